"""Compaction on the recorded long sessions, offline: each session's transcript grows turn by turn
as it was recorded, and before every model call the harness's compaction runs (at 0.9 of the
window) in one of three ways:

* ``none``: no compaction (the prompt outgrows the window);
* ``summaries``: summaries only, as before masking (the old view: the summary first, the task
  inside it);
* ``mask+summary``: `loopwire.harness.compaction` as it is: old tool outputs masked, kept outputs
  over a cap cut, a summary only when that is not enough, the task and latest user message pinned.

No model runs. Every summary is a STUB: a fixed-size text (``--summary-tokens`` distinct words),
so the numbers measure what the masking and the cut points leave, not a model's summary. Token
counts are the project's cl100k counts (`compaction.item_tokens`), instructions and tools included.
"Prefill" counts what a stateful session computes: the new tokens of each turn, the whole prompt
after a compaction (the conversation is reset), and each summary call's whole input.

    .venv/bin/python bench/bench_compaction.py [--traces DIR ...] [--window N] [--out DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from loopwire.common import masking
from loopwire.common.recorded import RecordedSession, load_sessions
from loopwire.harness import compaction
from loopwire.harness.config import HarnessConfig
from loopwire.v1 import common_pb2

import provenance

MODES = ("none", "summaries", "mask+summary")


@dataclass
class Result:
    max_prompt: int = 0
    over_window: int = 0  # turns whose prompt was over the window
    prefill: int = 0
    compactions: int = 0
    summaries: int = 0
    max_summary_input: int = 0
    task_verbatim: bool = True


def turns_of(session: RecordedSession) -> list[list[common_pb2.Item]]:
    """The items each turn appends (its output, then its followups), as `RecordedSession.items`."""
    out = []
    for t in session.turns:
        items = []
        if t.text or not t.calls:
            items.append(common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=t.text)])))
        items += [common_pb2.Item(function_call=c) for c in t.calls]
        out.append(items + list(t.followups))
    return out


def stub_text(n: int) -> str:
    return "STUB SUMMARY " + " ".join(f"fact{i}" for i in range(n))


def stub(text: str, calls: list[int]) -> Callable[[list[common_pb2.Item]], tuple[str, int, int]]:
    """The benchmark's summarizer: always `text`; records each call's input size in `calls`."""
    def summarize(prompt_items: list[common_pb2.Item]) -> tuple[str, int, int]:
        calls.append(compaction.tokens(prompt_items))
        return text, masking.count(text), common_pb2.FINISH_REASON_STOP
    return summarize


# -- before masking: the summary first, the task inside it (the code this replaces) -----------


def old_view(items: Sequence[common_pb2.Item]) -> list[common_pb2.Item]:
    last = next((i for i in range(len(items) - 1, -1, -1) if items[i].WhichOneof("item") == "compaction_summary"), None)
    if last is None:
        return list(items)
    start = min(items[last].compaction_summary.replaced_items, last)
    kept = [x for x in items[start:last] if x.WhichOneof("item") != "compaction_summary"]
    return [items[last], *kept, *items[last + 1:]]


def old_compact(items: list[common_pb2.Item], config: HarnessConfig, window: int,
                text: str) -> tuple[list[common_pb2.Item], int]:
    shown = old_view(items)
    cut = compaction.cut_point(shown, int(window * config.compact_keep))
    if cut == 0:
        return [], 0
    order = list(range(len(items)))
    last = next((i for i in range(len(items) - 1, -1, -1) if items[i].WhichOneof("item") == "compaction_summary"), None)
    if last is not None:
        start = min(items[last].compaction_summary.replaced_items, last)
        order = [last, *[i for i in range(start, last) if items[i].WhichOneof("item") != "compaction_summary"],
                 *range(last + 1, len(items))]
    summary = common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=text, replaced_items=order[cut]))
    return [summary], compaction.tokens(shown[:cut])


# -- one session, one way ----------------------------------------------------------------------


def run(session: RecordedSession, mode: str, window: int, summary_tokens: int) -> Result:
    config = HarnessConfig(context_window=window)
    fixed = masking.count(session.instructions) + sum(
        masking.count(t.name + t.description + t.parameters) for t in session.tools)
    text = stub_text(summary_tokens)
    items: list[common_pb2.Item] = [common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=session.task)]))]
    summary_prompt = masking.count(compaction.SUMMARY_INSTRUCTIONS + compaction.SUMMARY_REQUEST)
    shown_of: Callable[[Sequence[common_pb2.Item]], list[common_pb2.Item]] = (
        old_view if mode == "summaries" else compaction.view)
    r, previous = Result(), 0
    for added in turns_of(session):
        prompt = fixed + compaction.tokens(shown_of(items))
        reset = False
        if mode != "none" and prompt >= compaction.threshold(config, window):
            if mode == "summaries":
                appended, summary_in = old_compact(items, config, window, text)
                r.max_summary_input = max(r.max_summary_input, summary_in)
            else:
                calls: list[int] = []
                appended, _ = compaction.compact_items(items, config, window, stub(text, calls), fixed=fixed)
                summary_in = sum(calls)
                r.max_summary_input = max([r.max_summary_input, *calls])
            if appended:
                items += appended
                r.compactions += 1
                r.summaries += any(masking.parse(x.compaction_summary) is None for x in appended)
                r.prefill += summary_in + (summary_prompt if summary_in else 0)  # the summary call's prompt
                prompt, reset = fixed + compaction.tokens(shown_of(items)), True
        shown = shown_of(items)
        if not any(x.WhichOneof("item") == "message" and x.message.role == common_pb2.ROLE_USER
                   and x.message.content[0].text == session.task for x in shown):
            r.task_verbatim = False
        r.max_prompt = max(r.max_prompt, prompt)
        r.over_window += prompt > window
        r.prefill += prompt if reset or not previous else max(0, prompt - previous)
        previous = prompt
        items += added
    return r


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", nargs="+", default=[str(provenance.DATA_SESSIONS)])
    parser.add_argument("--window", type=int, default=16384)
    parser.add_argument("--min-turns", type=int, default=100, help="sessions with at least this many turns")
    parser.add_argument("--summary-tokens", type=int, default=400, help="size of the stub summary")
    provenance.add_out_argument(parser)
    args = parser.parse_args(argv)
    console = Console(width=170)
    loaded = [(p, s) for p, s in load_sessions(args.traces, lambda why: console.print(f"skipped: {why}"))
              if len(s.turns) >= args.min_turns]
    table = Table(title=f"Compaction at 0.9 of a {args.window:,}-token window (cl100k; STUB summaries of "
                        f"{args.summary_tokens} tokens, no model)")
    for c in ("session", "turns", "way", "max prompt", "max ÷ window", "turns over window", "prefill tokens",
              "compactions (summaries)", "max summary input", "task verbatim"):
        table.add_column(c, justify="left" if c in ("session", "way", "task verbatim") else "right")
    for path, session in loaded:
        for mode in MODES:
            r = run(session, mode, args.window, args.summary_tokens)
            table.add_row(path.name.removesuffix(".traj.json").removesuffix(".traj"), str(len(session.turns)), mode,
                          f"{r.max_prompt:,}", f"{r.max_prompt / args.window:.2f}", str(r.over_window),
                          f"{r.prefill:,}", f"{r.compactions} ({r.summaries})" if mode != "none" else "-",
                          f"{r.max_summary_input:,}" if mode != "none" else "-",
                          "yes" if r.task_verbatim else "no")
        table.add_section()
    console.print(table)
    used = [(p, len(s.turns)) for p, s in loaded]
    note = f"sessions with {args.min_turns}+ turns"
    header = provenance.provenance(provenance.describe_sessions(used, note=note), notes=[
        "no model: every summary is a fixed-size STUB text, so summary quality is not measured",
        "prefill: a stateful session's computed prompt tokens (new tokens per turn; the whole prompt after a "
        "compaction; each summary call's input)"])
    md = provenance.write_markdown(args.out, "compaction", "Compaction: masking first vs summaries only", header,
                                   provenance.table_markdown(table))
    console.print(f"wrote {provenance.rel(md)}")


if __name__ == "__main__":
    main()
