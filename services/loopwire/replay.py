"""`loopwire replay`: recorded agent sessions through harness → gateway → inference,
three ways side by side, measured per layer.

* ``stateful``: one Converse stream per session, deltas via previous_response_id, append-only
  prompts to the replica that holds the session's KV (prefix cache on).
* ``stateless`` — the fair naive way, what an HTTP client of a provider with automatic prompt
  caching gets: the full transcript on a fresh connection every turn, tokenized in full, but the
  engine's prefix cache is on and routing is cache-aware, so a resent prompt still hits the cache.
* ``stateless-nocache``: the same with the prefix cache off and round-robin routing: what the
  engine's cache itself is worth.

Every ratio is reported against ``stateless`` (the fair baseline) and ``stateless-nocache``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loopwire.client import RunResult, run_task
from loopwire.common.recorded import RecordedSession, load_sessions
from loopwire.console import EventPrinter, wide_console
from loopwire.harness.replay import not_runnable
from loopwire.v1 import harness_pb2

MODES = {
    "stateful": harness_pb2.CONVERSATION_MODE_STATEFUL,
    "stateless": harness_pb2.CONVERSATION_MODE_STATELESS,
    "stateless-nocache": harness_pb2.CONVERSATION_MODE_STATELESS,
}
ALL_MODES = list(MODES)
# What each way changes below the harness (same binaries, flags only).
SERVICE_ARGS: dict[str, dict[str, list[str]]] = {
    "stateful": {},
    "stateless": {},
    "stateless-nocache": {"inference": ["--no-prefix-cache"], "gateway": ["--routing", "round-robin"]},
}


def parse_modes(text: str) -> list[str]:
    """``all``, ``both`` (stateful,stateless) or a comma-separated list of modes."""
    if text == "all":
        return list(ALL_MODES)
    if text == "both":
        return ["stateful", "stateless"]
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"unknown mode {', '.join(unknown) or text!r}: choose from "
                                         f"{', '.join(ALL_MODES)}, both or all")
    return modes


@dataclass
class ModeResult:
    mode: str
    runs: list[RunResult] = field(default_factory=list)

    def total(self, getter) -> float:  # type: ignore[no-untyped-def]
        return float(sum(getter(p) for r in self.runs for p in r.turns))

    @property
    def wall_s(self) -> float:
        return sum(r.wall_s for r in self.runs)


METRICS = [
    ("bytes harness→gateway", lambda p: p.bytes_sent),
    ("bytes received by gateway", lambda p: p.timings.bytes_received),
    ("tokens tokenized", lambda p: p.timings.tokens_tokenized),
    ("tokens gateway→inference", lambda p: p.timings.tokens_forwarded),
    ("prefill tokens computed", lambda p: p.usage.input_tokens - p.usage.cached_input_tokens),
    ("prefill tokens cached", lambda p: p.usage.cached_input_tokens),
    ("output tokens", lambda p: p.usage.output_tokens),
    ("queue ms", lambda p: p.timings.queue_us / 1000),
    ("TTFT ms", lambda p: p.timings.ttft_us / 1000),
    ("decode ms", lambda p: p.timings.decode_us / 1000),
    ("gateway overhead ms", lambda p: p.timings.gateway_overhead_us / 1000),
    ("tokenize ms", lambda p: p.timings.tokenize_us / 1000),
    ("safety ms", lambda p: p.timings.safety_us / 1000),
    ("tool ms", lambda p: p.tool_us / 1000),
]


def start_for(session: RecordedSession, mode: str, workspace: str = "") -> harness_pb2.StartTask:
    return harness_pb2.StartTask(
        task=session.task,
        instructions=session.instructions,
        workspace=workspace,
        replay=session.replay_script(run_tools=bool(workspace)),
        model=harness_pb2.ModelOptions(conversation_mode=MODES[mode]),
    )


async def replay_sessions(
    harness: str,
    sessions: list[RecordedSession],
    mode: str,
    concurrency: int,
    progress: Progress | None = None,
    printer: Callable[[harness_pb2.RunResponse], None] | None = None,
    api_key: str = "",
) -> ModeResult:
    result = ModeResult(mode)
    total_turns = sum(len(s.turns) for s in sessions)
    task = progress.add_task(f"{mode:>9}", total=total_turns) if progress else None
    gate = asyncio.Semaphore(concurrency)

    def on_event(event: harness_pb2.RunResponse) -> None:
        if printer is not None:
            printer(event)
        if progress is not None and task is not None and event.WhichOneof("event") == "turn_completed":
            progress.advance(task)

    async def one(session: RecordedSession) -> RunResult:
        async with gate:
            return await run_task(harness, start_for(session, mode), on_event, api_key=api_key)

    result.runs = list(await asyncio.gather(*(one(s) for s in sessions)))
    return result


def load_for_replay(paths: list[str], max_turns: int, console: Console) -> list[tuple[Path, RecordedSession]]:
    """The sessions to replay (the first ``max_turns`` turns of each when set), skipping what
    :func:`~loopwire.common.recorded.load_sessions` skips, with its words, on ``console``."""
    loaded = load_sessions(paths, lambda line: console.print(f"[yellow]{escape(line)}[/]", soft_wrap=True))
    if max_turns:
        for _, s in loaded:
            s.turns = s.turns[:max_turns]
    return loaded


def ended_early(session: RecordedSession, run: RunResult) -> bool:
    """A run that completed with fewer turns than its script: its numbers measure a cut session."""
    return run.completed and len(run.turns) < len(session.turns)


def early_ends(sessions: list[RecordedSession], results: list[ModeResult]) -> list[str]:
    """One line per session whose replay stopped before its recording did, naming the last turn
    played and the modes; a replay that ends early must fail, not report ratios of 1.0x."""
    by_stop: dict[tuple[int, int], list[str]] = {}
    for r in results:
        for i, (session, run) in enumerate(zip(sessions, r.runs, strict=True)):
            if ended_early(session, run):
                by_stop.setdefault((i, len(run.turns)), []).append(r.mode)
    lines = []
    for (i, played), modes in sorted(by_stop.items()):
        session = sessions[i]
        why = (f"recorded turn {played} has no tool call, so the harness took it as the final answer"
               if played and not session.turns[played - 1].calls else "the harness completed the run there")
        lines.append(f"{session.source} ({session.format}): the replay ended after turn {played} of "
                     f"{len(session.turns)} recorded ({', '.join(modes)}): {why}")
    return lines


def comparison_table(results: list[ModeResult], title: str) -> Table:
    table = Table(title=title)
    table.add_column("per layer (sum over sessions)")
    for r in results:
        table.add_column(r.mode, justify="right")
    base = next((i for i, r in enumerate(results) if r.mode == "stateful"), None)
    ratios = [i for i, r in enumerate(results) if base is not None and i != base]
    for i in ratios:
        table.add_column(f"{results[i].mode}\n÷ stateful", justify="right")
    rows = [*METRICS, ("mean TTFT ms", None), ("session wall s", None)]
    for name, getter in rows:
        if getter is not None:
            values = [r.total(getter) for r in results]
        elif name == "mean TTFT ms":
            values = [r.total(lambda p: p.timings.ttft_us / 1000) / max(1, sum(len(x.turns) for x in r.runs))
                      for r in results]
        else:
            values = [r.wall_s for r in results]
        cells = [f"{v:,.0f}" if v >= 100 else f"{v:,.2f}" for v in values]
        for i in ratios:
            assert base is not None
            cells.append(f"{values[i] / values[base]:.1f}×" if values[base] else "-")
        table.add_row(name, *cells)
    return table


def per_turn_table(results: list[ModeResult], session_index: int) -> Table:
    """One session turn by turn, every mode side by side: where the naive way's cost grows."""
    runs = [r.runs[session_index] for r in results]
    table = Table(title=f"per turn, session {runs[0].session_id or session_index}")
    table.add_column("turn", justify="right")
    for name in ("bytes sent", "tokenized", "prefilled", "TTFT ms"):
        for r in results:
            table.add_column(f"{name}\n{r.mode}", justify="right")
    for i in range(max(len(run.turns) for run in runs)):
        cells = [str(i + 1)]
        for getter in (
            lambda p: f"{p.bytes_sent:,}",
            lambda p: f"{p.timings.tokens_tokenized:,}",
            lambda p: f"{p.usage.input_tokens - p.usage.cached_input_tokens:,}",
            lambda p: f"{p.timings.ttft_us / 1000:.1f}",
        ):
            cells += [getter(run.turns[i]) if i < len(run.turns) else "-" for run in runs]
        table.add_row(*cells)
    return table


def plot(results: list[ModeResult], prefix: str) -> list[str]:
    """TTFT, tokens tokenized and bytes per turn: one line per session and mode (turns 1-based,
    as in the tables), so a curve never dips because another session ended."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"stateful": "tab:green", "stateless": "tab:orange", "stateless-nocache": "tab:red"}
    sessions = max(len(r.runs) for r in results)
    turns = sum(len(run.turns) for run in results[0].runs)
    written = []
    for name, getter, ylabel in (
        ("ttft", lambda p: p.timings.ttft_us / 1000, "time to first token (ms, log scale)"),
        ("tokenized", lambda p: p.timings.tokens_tokenized, "tokens tokenized by the gateway (log scale)"),
        ("bytes", lambda p: p.bytes_sent, "bytes sent harness → gateway (log scale)"),
    ):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in results:
            for k, run in enumerate(r.runs):
                xs = list(range(1, len(run.turns) + 1))
                ax.plot(xs, [max(getter(p), 1e-3) for p in run.turns], color=colours.get(r.mode, "tab:blue"),
                        alpha=0.7, linewidth=1.2, label=r.mode if k == 0 else None)
        ax.set_yscale("log")
        ax.set_xlabel("turn (1-based, as in the tables)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{ylabel.split(' (')[0]} per turn: {sessions} replayed session(s), {turns} turns each way")
        ax.legend(title="one line per session")
        ax.grid(alpha=0.3, which="both")
        path = f"{prefix}_{name}.png"
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="recorded sessions (.traj.json, .traj, OpenAI chat JSON) or directories")
    parser.add_argument("--mode", type=parse_modes, default=list(ALL_MODES),
                        help="stateful, stateless (full resend, prefix cache on: the fair naive way), "
                             "stateless-nocache, a comma list, both (stateful,stateless) or all (default: all)")
    parser.add_argument("--harness", default="", help="a running harness; default: start an embedded mesh")
    parser.add_argument("--api-key", default=os.environ.get("LOOPWIRE_API_KEY", ""),
                        help="tenant key for --harness (env LOOPWIRE_API_KEY)")
    parser.add_argument("--concurrency", type=int, default=1, help="sessions replayed at once")
    parser.add_argument("--max-turns", type=int, default=0, help="replay only the first N turns of each session")
    parser.add_argument("--plots", default="", help="write PNG plots with this path prefix")
    parser.add_argument("--engine", default="reference", choices=["reference", "simulated"],
                        help="inference engine for the replay (default: %(default)s)")
    parser.add_argument("--model", default="dummy:0",
                        help="model the replica serves (default: %(default)s, random weights of the tiny shape with "
                             "the cl100k tokenizer: the recorded turns are emitted by the replay oracle, so the "
                             "real model's numpy speed would only stretch the run)")
    parser.add_argument("--events", action="store_true", help="stream every run event of the first mode")


def main(args: argparse.Namespace) -> int:
    console = wide_console()
    if args.plots and importlib.util.find_spec("matplotlib") is None:
        console.print("[red]error:[/] --plots needs matplotlib: install loopwire with its bench extra (loopwire[bench])")
        return 2
    sessions = [s for _, s in load_for_replay(args.paths, args.max_turns, console)]
    if not sessions:
        console.print("[red]no sessions to replay[/]")
        return 1
    modes = args.mode
    if swe := swe_agent_calls(sessions):
        console.print(f"{sum(swe.values())} recorded calls are SWE-agent's own tools, not shell commands "
                      f"({', '.join(f'{tool} {n}' for tool, n in swe.most_common())}): the harness has none of them, "
                      "so they replay their recorded outputs and are never run")
    console.print(
        f"replaying {len(sessions)} recorded session(s), {sum(len(s.turns) for s in sessions)} turns, "
        f"modes: {', '.join(modes)}; {args.engine} engine serving {args.model} (the engine does the real work of "
        "a model of that shape while the replay oracle emits the recorded assistant turns)"
    )
    results = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        for mode in modes:
            printer = EventPrinter(progress.console, stream_text=False) if args.events and mode == modes[0] else None
            results.append(asyncio.run(_replay_mode(args, sessions, mode, progress, printer)))
    failed = [(r.mode, run.error) for r in results for run in r.runs if not run.completed]
    longest = max(range(len(sessions)), key=lambda i: len(sessions[i].turns))
    console.print(per_turn_table(results, longest))
    console.print(comparison_table(results, f"{len(sessions)} sessions, concurrency {args.concurrency}"))
    if args.plots:
        for written in plot(results, args.plots):
            console.print(f"wrote {written}")
    for mode, error in failed:
        console.print(f"[red]{mode} session failed:[/] {escape(error)}")
    early = early_ends(sessions, results)
    for line in early:
        console.print(f"[red]error:[/] {escape(line)}", soft_wrap=True)
    return 1 if failed or early else 0


def swe_agent_calls(sessions: list[RecordedSession]) -> collections.Counter[str]:
    """How many of the sessions' calls are each of SWE-agent's own tools (``harness.replay.not_runnable``)."""
    return collections.Counter(tool for s in sessions for t in s.turns for c in t.calls if (tool := not_runnable(c)))


async def _replay_mode(args: argparse.Namespace, sessions: list[RecordedSession], mode: str,
                       progress: Progress, printer: Callable[[harness_pb2.RunResponse], None] | None) -> ModeResult:
    if args.harness:
        return await replay_sessions(args.harness, sessions, mode, args.concurrency, progress, printer, args.api_key)
    from loopwire.mesh import start_mesh

    extra = {k: list(v) for k, v in SERVICE_ARGS[mode].items()}
    extra.setdefault("inference", []).extend(["--engine", args.engine, "--model", args.model])
    with tempfile.TemporaryDirectory(prefix="loopwire-replay-") as state:
        mesh = await asyncio.to_thread(start_mesh, Path(state), extra_args=extra)
        try:
            return await replay_sessions(mesh.harness, sessions, mode, args.concurrency, progress, printer,
                                         mesh.api_key)
        finally:
            await asyncio.to_thread(mesh.stop)
