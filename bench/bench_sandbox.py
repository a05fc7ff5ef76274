"""Sandbox benchmark: a sandbox per session (each command in namespaces of its own inside it)
vs a bubblewrap sandbox per command vs no sandbox.

1. Spawn: `true` run N times through each path, wall time per command (start to exit, output
   collected), as the shell tool sees it.
2. The process storm of the seed: `seq 1000 | xargs -I{} true` (1,000 tiny processes) as one
   command, through each sandboxed path and bare.
3. The recorded sessions' real shell commands (``data/sessions``), each session's commands in
   order in a workspace of its own, through the shell tool (``tools.execute``: spawn,
   namespaces, shell start, output capture and formatting) per command and per session. The
   command's own runtime is measured inside its shell (``$EPOCHREALTIME`` as it starts and at its
   EXIT trap); the harness's overhead is the rest of the tool call's wall time. Commands run in
   an empty workspace (the sessions' repositories are not here), so many fail fast: the share
   of overhead is an upper bound for sessions whose commands do real work. Store writes and
   events of the loop are not included.

Run: .venv/bin/python bench/bench_sandbox.py [--quick] [--sessions N] [--out DIR]
Writes sandbox.md and sandbox.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common.recorded import load_session  # noqa: E402
from loopwire.harness import tools  # noqa: E402
from loopwire.harness.background import BackgroundTasks  # noqa: E402
from loopwire.harness.sandbox import Sandbox, command_env  # noqa: E402
from loopwire.harness.session_sandbox import SessionSandbox  # noqa: E402
from loopwire.v1 import common_pb2  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=150)
STORM = "seq 1000 | xargs -I{} true"
PER_COMMAND, PER_SESSION, BARE = "sandbox per command (before)", "sandbox per session (after)", "bare (no sandbox)"
_MARK = re.compile(r"@@loopwire-bench (\d+\.\d+) (\d+\.\d+)\s*$")


async def bare(workspace: Path, command: str) -> float:
    """Seconds for ``bash -c command`` without a sandbox, output collected the same way."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec("bash", "-c", command, cwd=workspace, env=command_env(str(workspace)),
                                                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    await proc.communicate()
    return time.perf_counter() - started


async def sandboxed(start: object, command: str) -> float:
    started = time.perf_counter()
    process = await start(command)  # type: ignore[operator]
    await process.result(60)
    return time.perf_counter() - started


def runners(box: Sandbox, workspace: Path) -> tuple[dict[str, object], SessionSandbox]:
    session = SessionSandbox(box, workspace)
    return {PER_COMMAND: lambda c: box.start(workspace, c), PER_SESSION: session.start,
            BARE: lambda c: bare(workspace, c)}, session


async def timed(mode: str, run: object, command: str) -> float:
    return await run(command) if mode == BARE else await sandboxed(run, command)  # type: ignore[operator]


async def bench_spawn(box: Sandbox, tmp: Path, reps: int, progress: Progress) -> dict[str, list[float]]:
    ws = tmp / "spawn"
    ws.mkdir()
    run, session = runners(box, ws)
    await sandboxed(session.start, "true")  # the session's sandbox starts once, before the clock
    out: dict[str, list[float]] = {m: [] for m in run}
    task = progress.add_task("spawn: `true`", total=reps * len(run))
    for _ in range(reps):  # interleaved, so load on the machine hits every path alike
        for mode, r in run.items():
            out[mode].append(await timed(mode, r, "true"))
            progress.advance(task)
    session.close()
    return out


async def bench_storm(box: Sandbox, tmp: Path, reps: int, progress: Progress) -> dict[str, list[float]]:
    ws = tmp / "storm"
    ws.mkdir()
    run, session = runners(box, ws)
    await sandboxed(session.start, "true")
    out: dict[str, list[float]] = {m: [] for m in run}
    task = progress.add_task(f"storm: `{STORM}`", total=reps * len(run))
    for _ in range(reps):
        for mode, r in run.items():
            out[mode].append(await timed(mode, r, STORM))
            progress.advance(task)
    session.close()
    return out


@dataclass
class Overhead:
    commands: int = 0
    measured: int = 0  # commands whose shell reported its own runtime (an `exec` replaces the shell)
    wall: float = 0.0  # seconds of the tool calls, measured ones only
    own: float = 0.0  # seconds the commands' shells ran
    first_wall: float = 0.0  # the session's first command (it starts the session's sandbox)
    per_call: list[float] = field(default_factory=list)

    @property
    def share(self) -> float:
        return (self.wall - self.own) / self.wall if self.wall else 0.0


def wrapped(command: str) -> str:
    """The command, with its shell reporting when it started and ended (no extra process)."""
    return ("trap 'printf \"\\n@@loopwire-bench %s %s\\n\" \"$__lw_s\" \"$EPOCHREALTIME\"' EXIT; "
            f"__lw_s=$EPOCHREALTIME; eval {shlex.quote(command)}")


async def bench_sessions(box: Sandbox, tmp: Path, paths: list[Path], limit: int,
                         progress: Progress) -> tuple[dict[str, Overhead], list[tuple[Path, int]]]:
    sessions = []
    for path in paths:
        recorded = load_session(path)
        commands = [json.loads(c.arguments).get("command", "") for t in recorded.turns for c in t.calls
                    if c.name == "bash"]
        sessions.append((path, len(recorded.turns), [c for c in commands if c][:limit or None]))
    out = {PER_COMMAND: Overhead(), PER_SESSION: Overhead()}
    task = progress.add_task("recorded commands", total=2 * sum(len(c) for _, _, c in sessions))
    for n, (_, _, commands) in enumerate(sessions):
        for mode, overhead in out.items():
            ws = tmp / f"session-{n}-{'s' if mode == PER_SESSION else 'c'}"
            ws.mkdir()
            box.per_session = mode == PER_SESSION
            ctx = tools.ToolContext(ws, box, BackgroundTasks(), shell_timeout=10, background_after=60)
            for i, command in enumerate(commands):
                call = common_pb2.FunctionCall(call_id="c", name="shell",
                                               arguments=json.dumps({"command": wrapped(command), "timeout_seconds": 10}))
                started = time.time()
                outcome = await tools.execute(call, ctx)
                wall = time.time() - started
                overhead.commands += 1
                if i == 0:
                    overhead.first_wall += wall
                elif m := _MARK.search(outcome.output.rsplit("\n[exit code", 1)[0]):
                    overhead.measured += 1
                    overhead.wall += wall
                    overhead.own += float(m.group(2)) - float(m.group(1))
                    overhead.per_call.append(wall - (float(m.group(2)) - float(m.group(1))))
                progress.advance(task)
            ctx.background.kill_all()
    box.per_session = True
    return out, [(p, turns) for p, turns, _ in sessions]


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f}"


def report(spawn: dict[str, list[float]], storm: dict[str, list[float]], overhead: dict[str, Overhead],
           short: str) -> tuple[list[Table], plt.Figure]:
    t1 = Table(title=f"1. spawn: `true` per command ({len(spawn[BARE])} runs each, interleaved)")
    for name in ("path", "median ms", "mean ms", "p90 ms", "vs per command", "beyond bare (median ms)"):
        t1.add_column(name, justify="left" if name == "path" else "right")
    base, floor = statistics.median(spawn[PER_COMMAND]), statistics.median(spawn[BARE])
    for mode, values in spawn.items():
        med = statistics.median(values)
        t1.add_row(mode, ms(values), f"{statistics.mean(values) * 1000:.2f}",
                   f"{statistics.quantiles(values, n=10)[-1] * 1000:.2f}", f"{med / base:.2f}×",
                   f"{(med - floor) * 1000:.2f}")
    t2 = Table(title=f"2. process storm: `{STORM}` as one command ({len(storm[BARE])} runs each)")
    for name in ("path", "median ms", "vs per command", "vs bare"):
        t2.add_column(name, justify="left" if name == "path" else "right")
    sbase, sfloor = statistics.median(storm[PER_COMMAND]), statistics.median(storm[BARE])
    for mode, values in storm.items():
        med = statistics.median(values)
        t2.add_row(mode, ms(values), f"{med / sbase:.2f}×", f"{med / sfloor:.2f}×")
    t3 = Table(title="3. recorded sessions' commands through the shell tool: harness overhead beyond the commands' "
                     "own runtime (each session's first command, which starts the session's sandbox, counted apart)")
    for name in ("path", "commands", "measured", "tool wall s", "own runtime s", "overhead s", "overhead share",
                 "median overhead ms/call", "first commands wall s"):
        t3.add_column(name, justify="left" if name == "path" else "right")
    for mode, o in overhead.items():
        t3.add_row(mode, str(o.commands), str(o.measured), f"{o.wall:.2f}", f"{o.own:.2f}", f"{o.wall - o.own:.2f}",
                   f"{o.share:.1%}", ms(o.per_call) if o.per_call else "-", f"{o.first_wall:.2f}")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    colors = {PER_COMMAND: "tab:gray", PER_SESSION: "tab:green", BARE: "tab:blue"}
    for ax, data, title, unit in ((axes[0], spawn, "1. `true`: wall per command", "ms (median)"),
                                  (axes[1], storm, f"2. `{STORM}`", "ms (median)")):
        medians = {m: statistics.median(v) * 1000 for m, v in data.items()}
        bars = ax.barh(list(medians), list(medians.values()), color=[colors[m] for m in medians])
        ax.bar_label(bars, labels=[f"{v:.1f} ms" for v in medians.values()], fontsize=8, padding=2)
        ax.set_xlim(0, max(medians.values()) * 1.3)
        ax.invert_yaxis()
        ax.set(title=title, xlabel=unit)
        ax.tick_params(axis="y", labelsize=8)
    shares = {m: o.share * 100 for m, o in overhead.items()}
    bars = axes[2].bar([m.split(" (")[0].replace("sandbox ", "") for m in shares], list(shares.values()),
                       color=[colors[m] for m in shares])
    axes[2].bar_label(bars, labels=[f"{v:.1f}%" for v in shares.values()], fontsize=8)
    axes[2].axhline(5, color="tab:red", linestyle="--", linewidth=1, label="goal: 5%")
    axes[2].legend(fontsize=8)
    axes[2].set(title="3. harness overhead on recorded commands", ylabel="% of tool-call wall time")
    fig.suptitle("Shell sandbox: one per session vs one per command", fontsize=11)
    fig.tight_layout()
    return [t1, t2, t3], fig


async def main_async(args: argparse.Namespace) -> int:
    paths = provenance.session_files(args.traces)[:args.sessions or None]
    reps = 30 if args.quick else args.reps
    storm_reps = 3 if args.quick else 10
    limit = 20 if args.quick else 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    box = Sandbox(output_limit=16384)
    if reason := box.probe(tmp / "probe"):
        console.print(f"[red]the sandbox cannot run here: {reason}")
        return 1
    if not box.per_session:
        console.print("[red]no system python3 for a session's supervisor: nothing to compare")
        return 1
    try:
        with Progress(console=console, transient=True) as progress:
            spawn = await bench_spawn(box, tmp, reps, progress)
            storm = await bench_storm(box, tmp, storm_reps, progress)
            overhead, used = await bench_sessions(box, tmp, paths, limit, progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    note = f"their `bash` calls{f', the first {limit} of each' if limit else ''}, in an empty workspace"
    short = provenance.short_data(used, note)
    tables, fig = report(spawn, storm, overhead, short)
    for t in tables:
        console.print(t)
    provenance.stamp(fig, short)
    png = provenance.save_figure(fig, args.out, "sandbox")
    header = provenance.provenance(
        [f"part 1: `true` × {reps} per path", f"part 2: `{STORM}` × {storm_reps} per path",
         f"part 3: {provenance.describe_sessions(used, note=note)}"],
        notes=["the machine's cores are shared: compare paths within one run (they are interleaved), not across runs"])
    body = []
    for t in tables:
        body += [*provenance.table_markdown(t), ""]
    md = provenance.write_markdown(args.out, "sandbox", "Shell sandbox: per session vs per command", header,
                                   [*body, "![sandbox](sandbox.png)"])
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(provenance.DATA_SESSIONS),
                        help="recorded sessions whose shell commands part 3 runs (default: data/sessions)")
    parser.add_argument("--sessions", type=int, default=0, help="only the first N sessions (0: all)")
    parser.add_argument("--reps", type=int, default=200, help="runs of `true` per path")
    parser.add_argument("--quick", action="store_true", help="fewer runs, 20 commands per session")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
