"""Load: many concurrent agent sessions through the whole mesh (simulated engine, virtual time).

Every bundled recorded session (data/sessions) is replayed, repeated until ``--sessions`` run at
once, stateful, on one harness, one gateway and one simulated replica (H200 + 8B cost model,
time scale 0: the engine's modelled time is not slept, so the machine's own CPU is what limits).
Reports failed runs (the goal is zero), p50/p99 turn latency as the harness saw it, and peak and
final RSS of each service process.

Run: .venv/bin/python bench/bench_load.py [--sessions 200] [--max-turns 0] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loopwire.common.recorded import load_session
from loopwire.mesh import start_mesh
from loopwire.replay import replay_sessions

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=120)


def memory(pid: int) -> tuple[int, int]:
    """Peak and current resident set size of a process, in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmHWM"].split()[0]) // 1024, int(fields["VmRSS"].split()[0]) // 1024


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=200, help="sessions at once (default: %(default)s)")
    parser.add_argument("--max-turns", type=int, default=0, help="turns per session, 0 = all (default: %(default)s)")
    parser.add_argument("--data", default=str(ROOT / "data" / "sessions"), help="recorded sessions")
    parser.add_argument("--out", default=str(ROOT / ".state" / "bench"), help="where load.md goes")
    args = parser.parse_args(argv[1:])
    recorded = [load_session(p) for p in sorted(Path(args.data).rglob("*")) if p.suffix in (".json", ".traj")]
    sessions = []
    for i in range(args.sessions):
        s = copy.deepcopy(recorded[i % len(recorded)])
        if args.max_turns:
            s.turns = s.turns[: args.max_turns]
        sessions.append(s)
    with tempfile.TemporaryDirectory(prefix="loopwire-load-") as state:
        mesh = start_mesh(Path(state), extra_args={"inference": ["--engine", "simulated", "--time-scale", "0"]})
        try:
            t0 = time.perf_counter()
            result = asyncio.run(replay_sessions(mesh.harness, sessions, "stateful", args.sessions,
                                                 api_key=mesh.api_key))
            wall = time.perf_counter() - t0
            rss = {name: memory(p.pid) for name, p in mesh.processes.items()}
        finally:
            mesh.stop()
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
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "load.md").write_text("\n".join([
        "# Load: concurrent sessions through the whole mesh", "",
        f"- command: `python {' '.join(argv)}`", f"- commit: {commit.strip()}",
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}",
        f"- machine: {platform.machine()}, {len(os.sched_getaffinity(0))} cores; harness, gateway and one simulated "
        "inference replica (H200 + 8B cost model, time scale 0) as processes on this machine",
        f"- data: {len(recorded)} recorded sessions from `{os.path.relpath(args.data, ROOT)}`, repeated to "
        f"{args.sessions}, {len(latency)} turns, all stateful, all at once", "",
        "| " + " | ".join(c.header for c in table.columns) + " |", "|" + "---|" * len(table.columns),
        "| " + " | ".join(row) + " |", "",
    ]))
    console.print(f"wrote {out / 'load.md'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
