"""Load: many concurrent agent sessions through the whole mesh (simulated engine, virtual time).

Every bundled recorded session (data/sessions) is replayed, repeated until ``--sessions`` run at
once, stateful, on one harness, one gateway and one simulated replica (H200 + 8B cost model,
time scale 0: the engine's modelled time is not slept, so the machine's own CPU is what limits).
Reports failed runs (the goal is zero), p50/p99 turn latency as the harness saw it, and peak and
final RSS of each service process.

Run: .venv/bin/python bench/bench_load.py [--sessions 200] [--max-turns 0] [--quick] [--out DIR]
Writes load.md into ``--out`` (default .state/bench/). The default run takes ~16 min on 2 cores;
``--quick``: 16 sessions of 10 turns.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loopwire.common.recorded import load_session
from loopwire.replay import replay_sessions

import interrupts
import provenance

console = Console(width=120)


def memory(pid: int) -> tuple[int, int]:
    """Peak and current resident set size of a process, in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmHWM"].split()[0]) // 1024, int(fields["VmRSS"].split()[0]) // 1024


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200, help="sessions at once (default: %(default)s)")
    parser.add_argument("--max-turns", type=int, default=0, help="turns per session, 0 = all (default: %(default)s)")
    parser.add_argument("--data", default=str(provenance.DATA_SESSIONS), help="recorded sessions")
    parser.add_argument("--quick", action="store_true", help="16 sessions of 10 turns (unless given)")
    provenance.add_out_argument(parser)
    args = parser.parse_args(argv[1:])
    if args.quick:
        args.sessions = 16 if args.sessions == parser.get_default("sessions") else args.sessions
        args.max_turns = args.max_turns or 10
    paths = [p for p in provenance.session_files(args.data) if p.suffix in (".json", ".traj")]
    recorded = [load_session(p) for p in paths]
    sessions = []
    for i in range(args.sessions):
        s = copy.deepcopy(recorded[i % len(recorded)])
        if args.max_turns:
            s.turns = s.turns[: args.max_turns]
        sessions.append(s)
    with tempfile.TemporaryDirectory(prefix="loopwire-load-") as state:
        mesh = interrupts.start_mesh(Path(state),
                                     extra_args={"inference": ["--engine", "simulated", "--time-scale", "0"]})
        try:
            t0 = time.perf_counter()
            result = asyncio.run(replay_sessions(mesh.harness, sessions, "stateful", args.sessions,
                                                 api_key=mesh.api_key))
            wall = time.perf_counter() - t0
            rss = {name: memory(p.pid) for name, p in mesh.processes.items()}
        finally:
            interrupts.stop(mesh)
    failures = [r.error for r in result.runs if not r.completed]
    latency = sorted(p.wall_us / 1000 for r in result.runs for p in r.turns)
    table = Table(title=f"{args.sessions} concurrent sessions, {len(latency)} turns, simulated H200 + 8B, time scale 0")
    for col in ("failed runs", "p50 turn ms", "p99 turn ms", "wall s", *(f"{n} peak / after MiB" for n in rss)):
        table.add_column(col, justify="right")
    row = [str(len(failures)), f"{latency[len(latency) // 2]:.0f}", f"{latency[int(len(latency) * 0.99)]:.0f}",
           f"{wall:.0f}", *(f"{peak} / {now}" for peak, now in rss.values())]
    table.add_row(*row)
    console.print(table)
    for error in sorted(set(failures))[:5]:
        console.print(f"[red]failed:[/] {error}")
    per_file = [(p, min(len(s.turns), args.max_turns) if args.max_turns else len(s.turns))
                for p, s in zip(paths, recorded, strict=True)][: args.sessions]
    note = (f"{'first ' + str(args.max_turns) + ' turns of each' if args.max_turns else 'every turn'}; "
            f"{'repeated to ' if args.sessions > len(recorded) else ''}{args.sessions} sessions "
            f"({len(latency):,} turns), all stateful, all at once")
    header = provenance.provenance(
        provenance.describe_sessions(per_file, note=note),
        engine="simulated (`--engine simulated --time-scale 0`: modelled time is not slept, so this machine's CPU "
               "is what limits); harness, gateway and one inference replica as processes on this machine",
        cost_model=provenance.cost_model("h200", "8b"))
    md = provenance.write_markdown(args.out, "load", "Load: concurrent sessions through the whole mesh", header,
                                   [*provenance.table_markdown(table), "",
                                    *(f"- failed: `{e}`" for e in sorted(set(failures))[:5])])
    console.print(f"wrote {provenance.rel(md)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: main(sys.argv)))
