"""Conversation compaction: past a threshold, old tool outputs are masked, and only when that is not
enough older turns become a summary written by the model.

The store stays append-only: compaction appends `compaction_summary` items. A mask marker (see
`masking`) elides the outputs before its horizon and cuts kept outputs over a cap, pointing to a
workspace file with the whole text. A summary's `replaced_items` says how many items of the log,
from the start, it stands for. What the model sees (`view`) is the task (the first user message),
the last summary, the latest user message it would otherwise hide, the kept recent items (those
between `replaced_items` and the summary), then everything appended after it, with every mask
applied. The task and the latest user message are thus never seen only through a summary. A
harness killed at any point resumes on the same view, because the view is computed from the stored
log alone; the gateway conversation is reset *before* the markers are stored, so a crash in between
costs one full resend, never a delta against the wrong prefix.

Sizes are the served model's where the gateway reported them (the last turn's usage); what was
added since, and what a compaction would leave, are cl100k counts scaled by the ratio the last
turn showed between the two.

A summary that is degenerate (it hit the output cap, or repeats itself) or no shorter than what it
replaces is dropped, and the compaction falls back to masking every output the model has seen.
The cost is reported as a `CompactionCompleted` run event: the summary call's tokens in and out
and the prompt size after. When the summary call fails, the event carries the error and the
session goes on masked (or uncompacted, when masking changed nothing).

Counting runs off the event loop that serves every tenant's sessions: a message at the
harness's 1 MiB input bound is 0.3 s of cl100k encoding, which releases the GIL. A session's
estimate, plan and view go to a fair pool (`common.work_pool`) where each tenant runs at most
`COUNT_TENANT_SHARE` jobs at a time, so one tenant's huge messages never hold every worker.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from loopwire.common import errors, masking
from loopwire.common.summaries import SUMMARY_INSTRUCTIONS, SUMMARY_REQUEST, degenerate
from loopwire.common.work_pool import FairWorkPool
from loopwire.harness.config import HarnessConfig
from loopwire.harness.conversation import Conversation, GatewayError
from loopwire.v1 import common_pb2, gateway_pb2, harness_pb2

log = logging.getLogger("loopwire.harness")
T = TypeVar("T")

COUNT_WORKERS = 4  # threads counting tokens, for every tenant together
COUNT_TENANT_SHARE = 2  # of them, the most one tenant's sessions hold at once
COUNT_INLINE_BYTES = 64 * 1024  # a log smaller than this is counted on the loop (cheaper than the hop)

def _kind(item: common_pb2.Item) -> str:
    return item.WhichOneof("item") or ""


def _is_user(item: common_pb2.Item) -> bool:
    return _kind(item) == "message" and item.message.role == common_pb2.ROLE_USER


# -- the view ------------------------------------------------------------------------------


def _order(items: Sequence[common_pb2.Item]) -> tuple[list[int], int]:
    """The log positions the view shows, in order, and how many of them lead it pinned (the task,
    the summary, the latest user message it covers)."""
    last = next((i for i in range(len(items) - 1, -1, -1) if _kind(items[i]) == "compaction_summary"
                 and masking.parse(items[i].compaction_summary) is None), None)
    if last is None:
        shown = [i for i, x in enumerate(items) if _kind(x) != "compaction_summary"]
        return shown, 1 if shown and _is_user(items[shown[0]]) else 0
    start = min(items[last].compaction_summary.replaced_items, last)
    users = [i for i in range(start) if _is_user(items[i])]
    head = [*users[:1], last, *users[1:][-1:]]
    return head + [i for i in range(start, len(items)) if _kind(items[i]) != "compaction_summary"], len(head)


def _masks(items: Sequence[common_pb2.Item]) -> tuple[int, list[tuple[int, int]]]:
    """The highest mask horizon, and each marker's (position, cap)."""
    horizon, caps = 0, []
    for i, x in enumerate(items):
        if _kind(x) == "compaction_summary" and (cap := masking.parse(x.compaction_summary)) is not None:
            horizon = max(horizon, min(x.compaction_summary.replaced_items, i))
            caps.append((i, cap))
    return horizon, caps


def _shown(items: Sequence[common_pb2.Item], order: Sequence[int]) -> list[common_pb2.Item]:
    horizon, caps = _masks(items)
    if not caps:
        return [items[i] for i in order]
    names = {x.function_call.call_id: x.function_call.name for x in items if _kind(x) == "function_call"}
    out = []
    for i in order:
        x = items[i]
        if _kind(x) == "function_call_output":
            cap = min((c for p, c in caps if i < p and c), default=0)
            x = masking.masked_output(x, names.get(x.function_call_output.call_id, ""), elide=i < horizon, cap=cap)
        out.append(x)
    return out


def view(items: Sequence[common_pb2.Item]) -> list[common_pb2.Item]:
    """What the model sees: the task, the last summary, the latest user message it covers, the
    recent items it kept and everything after it, with old outputs masked."""
    return _shown(items, _order(items)[0])


def log_index(items: Sequence[common_pb2.Item], view_index: int) -> int:
    """The log position of the item at `view_index` of `view(items)` (for a cut before the summary)."""
    return _order(items)[0][view_index]


def item_tokens(item: common_pb2.Item) -> int:
    """A cl100k estimate of an item's prompt size (its text and call arguments)."""
    kind = _kind(item)
    if kind == "message":
        text = "".join(p.text for p in item.message.content)
    elif kind == "function_call":
        text = item.function_call.name + item.function_call.arguments
    elif kind == "function_call_output":
        text = item.function_call_output.output
    elif kind == "tool_search_output":
        text = json.dumps([[t.name, t.description, t.parameters] for t in item.tool_search_output.tools])
    else:
        text = item.compaction_summary.summary
    return masking.count(text) + 4


def tokens(items: Sequence[common_pb2.Item]) -> int:
    return sum(item_tokens(i) for i in items)


def cut_point(items: Sequence[common_pb2.Item], keep_tokens: int, lo: int = 1) -> int:
    """Where the recent part starts: at a turn boundary, keeping about `keep_tokens` of the end,
    never between a call and its output, and after the `lo` pinned items that lead the view.
    0 when nothing can be summarized."""
    budget = keep_tokens
    candidate = len(items)
    for i in range(len(items) - 1, 0, -1):
        budget -= item_tokens(items[i])
        if budget < 0:
            break
        candidate = i
    candidate = min(candidate, len(items) - 1)  # keep at least the last item
    floor = max(lo, 1)
    # Move back to a boundary: no call before the cut whose output comes after it.
    while candidate > floor:
        before = {x.function_call.call_id for x in items[:candidate] if _kind(x) == "function_call"}
        after = {x.function_call_output.call_id for x in items[candidate:] if _kind(x) == "function_call_output"}
        if not before & after and _kind(items[candidate]) != "function_call_output":
            break
        candidate -= 1
    return candidate if candidate > floor else 0


# -- planning (pure: the harness and bench/bench_compaction.py run the same code) -------------


@dataclass
class Plan:
    """What a compaction appends before any summary: a mask marker (or nothing, when masking
    changes nothing), the view it leaves, the whole outputs it cuts (workspace path -> text), and
    the part of that view a summary would stand for (`cut` 0: no summary needed or possible)."""

    before: list[common_pb2.Item]
    markers: list[common_pb2.Item]
    masked: list[common_pb2.Item]
    writes: dict[str, str] = field(default_factory=dict)
    cut: int = 0
    summary_input: list[common_pb2.Item] = field(default_factory=list)
    reason: str = ""  # why there is no summary input although one is wanted


def _mask_plan(items: Sequence[common_pb2.Item], keep: int, *, full: bool, truncate: bool) -> tuple[int, int]:
    """A mask horizon and cap: outputs the model has not read yet are never elided (only cut to a
    share of `keep` each); older ones stay whole, newest first, while they fit in `keep` (`full`:
    none stays)."""
    unseen = masking.unseen(items)
    fresh = sum(1 for x in items[unseen:] if _kind(x) == "function_call_output")
    cap = max(masking.MIN_CAP, min(keep, keep // max(1, fresh))) if truncate else 0
    horizon = unseen
    if not full:
        budget = keep
        for i in range(len(items) - 1, -1, -1):
            x = items[i]
            if _kind(x) != "function_call_output":
                continue
            budget -= min(masking.count(x.function_call_output.output), cap or 1 << 30)
            if budget < 0 and i < unseen:
                horizon = i + 1
                break
        else:
            horizon = 0
    return max(horizon, _masks(items)[0]), cap


def plan(items: Sequence[common_pb2.Item], config: HarnessConfig, window: int, *, fixed: int = 0,
         ratio: float = 1.0, full_mask: bool = False, truncate: bool = True) -> Plan:
    """Mask first; when the masked prompt (served-model estimate: `ratio` x cl100k, with `fixed`
    cl100k tokens of instructions and tools) is still over `compact_target` of the window, pick
    the older part of the masked view for a summary."""
    before = view(items)
    keep = int(window * config.compact_keep / ratio)
    markers: list[common_pb2.Item] = []
    writes: dict[str, str] = {}
    if config.compact_mask:
        horizon, cap = _mask_plan(items, keep, full=full_mask, truncate=truncate)
        mark = masking.marker(horizon, cap)
        if tokens(view([*items, mark])) < tokens(before):
            markers = [mark]
            writes = {masking.pointer_path(x.function_call_output.call_id): x.function_call_output.output
                      for x in items[horizon:] if _kind(x) == "function_call_output" and cap
                      and masking.count(x.function_call_output.output) > cap}
    logged = [*items, *markers]
    masked = view(logged)
    result = Plan(before, markers, masked, writes)
    if ratio * (fixed + tokens(masked)) <= window * config.compact_target or full_mask:
        return result
    lo = _order(logged)[1]
    result.cut = cut_point(masked, keep, lo)
    if result.cut == 0:
        result.reason = "nothing to summarize: the recent turns alone fill the budget"
        return result
    # The summary call must fit in the window itself: the oldest unpinned items go first.
    budget = (window - config.summary_max_tokens) / ratio - masking.count(SUMMARY_INSTRUCTIONS + SUMMARY_REQUEST) - 64
    prompt = list(masked[:result.cut])
    while prompt and tokens(prompt) > budget and len(prompt) > lo:
        del prompt[lo]
        while len(prompt) > lo and _kind(prompt[lo]) == "function_call_output":
            del prompt[lo]  # its call is gone
    if tokens(prompt) > budget or len(prompt) <= lo:
        result.cut, result.reason = 0, "nothing to summarize: the summary call would not fit in the window"
        return result
    result.summary_input = prompt
    return result




def with_summary(items: Sequence[common_pb2.Item], p: Plan, text: str) -> list[common_pb2.Item]:
    """The items to append for a summary of `p.summary_input`: the plan's markers, then the summary."""
    logged = [*items, *p.markers]
    replaced = log_index(logged, p.cut)  # log items before the first kept one
    summary = common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=text, replaced_items=replaced))
    return [*p.markers, summary]


def kept(before: Sequence[common_pb2.Item], after: Sequence[common_pb2.Item]) -> int:
    """How many items of `before` the `after` view still shows verbatim."""
    left = collections.Counter(x.SerializeToString(deterministic=True) for x in after)
    n = 0
    for x in before:
        key = x.SerializeToString(deterministic=True)
        if left[key]:
            left[key] -= 1
            n += 1
    return n


def compact_items(items: Sequence[common_pb2.Item], config: HarnessConfig, window: int,
                  summarize_fn: Callable[[list[common_pb2.Item]], tuple[str, int, int]] | None, *,
                  fixed: int = 0, ratio: float = 1.0) -> tuple[list[common_pb2.Item], str]:
    """Compaction without a harness (tests, the benchmark): the items to append and a note (why a
    summary was dropped). `summarize_fn` gets the summary input and returns (text, output tokens,
    finish reason)."""
    p = plan(items, config, window, fixed=fixed, ratio=ratio)
    if not p.summary_input or summarize_fn is None:
        return p.markers, p.reason
    text, out_tokens, finish = summarize_fn(p.summary_input)
    return settle(items, config, window, p, text, out_tokens, finish, fixed=fixed, ratio=ratio)


def settle(items: Sequence[common_pb2.Item], config: HarnessConfig, window: int, p: Plan, text: str,
           output_tokens: int, finish_reason: int, *, fixed: int = 0,
           ratio: float = 1.0) -> tuple[list[common_pb2.Item], str]:
    """The summary if it is usable, else the masked fallback (every output the model read elided);
    when even that stays over the threshold, the summarized turns are dropped behind a fixed note
    (no model text), so the prompt still fits."""
    why = "the summary call returned no text" if not text else degenerate(
        text, output_tokens, config.summary_max_tokens, finish_reason)
    if not why:
        appended = with_summary(items, p, text)
        if tokens(view([*items, *appended])) < tokens(p.masked):
            return appended, ""
        why = "it is no shorter than what it replaces"
    chosen: list[common_pb2.Item] = []
    if config.compact_mask:
        fallback = plan(items, config, window, full_mask=True, truncate=bool(p.writes))
        chosen = fallback.markers or p.markers
    if ratio * (fixed + tokens(view([*items, *chosen]))) < threshold(config, window):
        return chosen, f"summary dropped ({why}); compacted by masking tool outputs instead"
    dropped = with_summary(items, p, f"[{p.cut} earlier items were dropped without a summary: the summary "
                                     f"written for them was unusable ({why})]")
    if tokens(view([*items, *dropped])) < tokens(view([*items, *chosen])):
        return dropped, f"summary dropped ({why}); the older turns were dropped (masking was not enough)"
    return chosen, f"summary dropped ({why}); compacted by masking tool outputs instead" if chosen else \
        f"summary dropped: {why}"


# -- in a running session ------------------------------------------------------------------


@dataclass
class Outcome:
    event: harness_pb2.CompactionCompleted
    items: list[common_pb2.Item]  # to append: a mask marker, a summary, or both
    note: str = ""  # a diagnostic (a summary dropped for masking)
    writes: dict[str, str] = field(default_factory=dict)


async def summarize(config: HarnessConfig, metadata: tuple, model: str, items: Sequence[common_pb2.Item],
                    sampling: common_pb2.SamplingParams) -> tuple[str, common_pb2.Usage, int]:
    """One model call through the gateway, on its own stream (the session's key), without tools:
    the text, its usage and its finish reason."""
    conversation = Conversation(config.gateway, "", stateful=False)
    conversation.metadata = metadata
    request = gateway_pb2.CreateResponse(model=model, instructions=SUMMARY_INSTRUCTIONS, sampling=sampling)
    request.sampling.max_output_tokens = config.summary_max_tokens
    prompt = [*items, common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=SUMMARY_REQUEST)]))]
    try:
        turn = await conversation.respond(request, prompt, lambda event: None)
    finally:
        await conversation.close()
    return turn.text.strip(), turn.usage, turn.finish_reason


@dataclass(frozen=True)
class PromptCount:
    """A prompt and its reply as the served model counted them (the gateway's usage), and how many
    log items they covered."""

    tokens: int = 0
    items: int = 0


def threshold(config: HarnessConfig, window: int) -> int:
    return int(window * config.compact_at) if window > 0 else 0


def prompt_estimate(last_prompt_tokens: int, new_items: Sequence[common_pb2.Item], ratio: float = 1.0) -> int:
    """The next prompt's size: the last one's (as the gateway counted it) plus what was added since
    (cl100k, scaled to the served model's tokens)."""
    return last_prompt_tokens + round(ratio * tokens(new_items))


def write_outputs(workspace: Any, writes: dict[str, str]) -> None:
    """The whole text of each cut output, into the session's workspace as the file tools write
    (atomically, without leaving the workspace, owned by the tenant's sandbox uid)."""
    from loopwire.harness.file_edit import _write

    for path, text in writes.items():
        _write(workspace, path, text)


async def compact(run: Any, prompt_tokens: int) -> Outcome:
    """Mask (and if needed summarize) `run`'s view; the caller appends the items (or not)."""
    config: HarnessConfig = run.config
    window = run.context_window
    state = _STATES.setdefault(run, _State())
    items = list(run.items)  # what the counting threads read
    fixed, ratio = await counted(run, _fixed, run.stored), state.ratio
    event = harness_pb2.CompactionCompleted(turn=run.turn_count + 1, prompt_tokens_before=prompt_tokens,
                                            threshold_tokens=threshold(config, window))
    p = await counted(run, plan, items, config, window, fixed=fixed, ratio=ratio)
    if p.writes:
        try:
            await asyncio.to_thread(write_outputs, run.workspace, p.writes)
        except Exception as e:  # noqa: BLE001 - no pointer files: outputs are elided, never cut
            log.warning("session %s: cannot keep cut outputs in the workspace: %s", run.session_id, e)
            p = await counted(run, plan, items, config, window, fixed=fixed, ratio=ratio, truncate=False)
    appended, note = p.markers, p.reason if not p.markers else ""
    if p.summary_input:
        try:
            text, usage, finish = await summarize(config, run.conversation.metadata, run.start.model.model,
                                                  p.summary_input, run.start.model.sampling)
        except GatewayError as e:
            event.error.CopyFrom(e.error)
        except Exception as e:  # noqa: BLE001 - the session goes on (masked, or uncompacted)
            log.exception("compaction of session %s failed", run.session_id)
            event.error.CopyFrom(errors.error(common_pb2.ERROR_CODE_INTERNAL, f"{type(e).__name__}: {e}"))
        else:
            event.summary_input_tokens, event.summary_output_tokens = usage.input_tokens, usage.output_tokens
            appended, note = await counted(run, settle, items, config, window, p, text, usage.output_tokens,
                                           finish, fixed=fixed, ratio=ratio)
            if not appended:
                event.error.CopyFrom(errors.error(common_pb2.ERROR_CODE_INTERNAL, note))
        if event.HasField("error") and p.markers:  # the call failed: reported, and masking still helps
            event.error.message += "; compacted by masking tool outputs only"
            appended, note = p.markers, ""
    if not appended:
        if not event.HasField("error"):
            event.error.CopyFrom(errors.error(common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED, p.reason or "nothing to compact"))
        return Outcome(event, [])
    event.kept_items, after = await counted(run, _after, p.before, [*items, *appended])
    event.replaced_items = len(p.before) - event.kept_items
    event.prompt_tokens_after = round(ratio * (fixed + after))
    return Outcome(event, appended, note, p.writes)


def _after(before: Sequence[common_pb2.Item], logged: Sequence[common_pb2.Item]) -> tuple[int, int]:
    """How many items of `before` the view of `logged` keeps verbatim, and its cl100k size."""
    after = view(logged)
    return kept(before, after), tokens(after)


@dataclass
class _State:
    retry_at: int = 0  # after a failed compaction: the prompt size to try again at
    ratio: float = 1.0  # served-model tokens per cl100k token, as the last turn showed
    calibrated: PromptCount = field(default_factory=PromptCount)


_STATES: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FairWorkPool] = weakref.WeakKeyDictionary()


async def counted(run: Any, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, work that counts `run`'s log, on the counting pool in the turn of
    the session's tenant (inline when the log is small). The caller passes a snapshot of the log:
    the thread never reads what the loop may change."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:  # one per loop: a pool's bookkeeping runs on the loop its jobs came from
        pool = _POOLS[loop] = FairWorkPool(COUNT_WORKERS, COUNT_TENANT_SHARE, COUNT_INLINE_BYTES, "harness-count")
    size = sum(x.ByteSize() for x in run.items) + len(run.stored.instructions)
    return await pool.run(run.stored.tenant, size, functools.partial(fn, *args, **kwargs))


async def prompt_view(run: Any) -> list[common_pb2.Item]:
    """`view(run.items)` for the next model call, off the loop when the log is large (masking
    counts and cuts outputs)."""
    return await counted(run, view, list(run.items))


def _fixed(stored: Any) -> int:
    """cl100k tokens of the instructions and tool schemas."""
    return masking.count(stored.instructions) + sum(
        masking.count(t.name + t.description + t.parameters) for t in stored.tools)


async def estimate(run: Any) -> int:
    """The next prompt's size in the served model's tokens: the last prompt and reply as the
    gateway counted them plus what was added since; before the first turn, or after a compaction,
    the view and the fixed part. cl100k counts are scaled by the served/cl100k ratio of the last
    turn (the window is the served model's, and its tokenizer may count far more than cl100k)."""
    state = _STATES.setdefault(run, _State())
    return await counted(run, _estimate, state, list(run.items), run.last_prompt, run.stored)


def _estimate(state: _State, items: list[common_pb2.Item], last: PromptCount, stored: Any) -> int:
    fixed = _fixed(stored)
    if last.tokens and last != state.calibrated:
        state.calibrated = last
        counted = fixed + tokens(view(items[:last.items]))
        # Never below 1: an estimate too low overflows the window, one too high compacts a bit early.
        state.ratio = min(4.0, max(1.0, last.tokens / max(1, counted)))
    if last.tokens and not any(_kind(i) == "compaction_summary" for i in items[last.items:]):
        return prompt_estimate(last.tokens, items[last.items:], state.ratio)
    return round(state.ratio * (fixed + tokens(view(items))))


async def maybe_compact(run: Any) -> None:
    """Before a model call: compact when the prompt passed the threshold (and a failed attempt
    is retried only after the prompt grew by another 5% of the window)."""
    limit = threshold(run.config, run.context_window)
    if not limit:
        return
    prompt = await estimate(run)
    state = _STATES[run]
    if prompt < max(limit, state.retry_at):
        return
    outcome = await compact(run, prompt)
    if outcome.items:
        # Reset the gateway conversation first: a crash before the markers are stored then costs
        # one full resend, never a delta against a prefix the model no longer sees.
        run.conversation.last_response_id, run.conversation.held_items = "", 0
        await run._store(run.store.set_conversation, run.session_id, "", 0)
        await run.append(outcome.items)
        # Still over the threshold (masking alone was not enough): not again on the very next turn.
        over = outcome.event.prompt_tokens_after >= limit
        state.retry_at = prompt + max(1, run.context_window // 20) if over else 0
    else:
        state.retry_at = prompt + max(1, run.context_window // 20)
    if outcome.note:
        run.emit(diagnostic=harness_pb2.RunDiagnostic(source="compaction", message=outcome.note))
    run.emit(compaction=outcome.event)
