"""One tenant's pathological tools against another's turn: rows (b) and (c) of the fairness benchmark.

Tenant A calls ``grep`` 12 times at once with ``(x+x+)+y`` over 3,000 lines of 40 ``x`` (a
pattern a backtracking engine needs exponential time for); meanwhile tenant B calls
``read_file`` on a small file. Measured: B's call latency, beside A's greps and alone, and how
long A's greps take. Two ways, side by side in one run:

* ``before``: the `regex` engine (backtracking, with its per-call time limit) and every file tool
  on the process's one shared thread pool, as the harness ran them before;
* ``after``: RE2 (linear time) and a bounded pool per tenant (``harness/file_pool.py``).

(c) Tenant A's command forks 200 sleeping processes (under a process limit of 150); meanwhile
tenant B runs ``echo ok``. Before: every tenant's commands run as one host uid, so A's processes
count against B's limit; after: a uid per tenant. Measured: whether B's command ran, and its time.

Both ways call the harness's own tool code and its real bubblewrap sandbox on real workspaces in
one process (no model).

    .venv/bin/python bench/bench_tool_fairness.py [--greps 12] [--repeats 5] [--quick] [--out DIR]

Writes tool_fairness.md and tool_fairness.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loopwire.harness import file_pool, workspace_files, workspace_grep
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_limits import SandboxLimits

import interrupts
import provenance

console = Console()
PATTERN = r"(x+x+)+y"


def lay_out(root: Path) -> tuple[Path, Path]:
    a = workspace_files.tenant_workspace(root, "alpha", "w", "w")
    b = workspace_files.tenant_workspace(root, "beta", "w", "w")
    (a / "xs.txt").write_text(("x" * 40 + "\n") * 3000)
    (b / "notes.txt").write_text("hello\n" * 20)
    return a, b


async def one_way(way: str, a: Path, b: Path, sandbox: Sandbox, greps: int) -> tuple[float, float, float]:
    """(B's read_file seconds alone, beside A's greps, A's greps seconds)."""
    saved = workspace_grep.re2
    if way == "before":
        workspace_grep.re2 = None  # the backtracking engine decides, as before RE2

    async def call(ws: Path, fn, *args):  # noqa: ANN001, ANN202
        if way == "before":
            return await asyncio.to_thread(fn, ws, *args)
        return await file_pool.run_tool(sandbox, ws, fn, *args)

    try:
        t0 = time.perf_counter()
        await call(b, workspace_files.read_file, "notes.txt", 1, 400)
        alone = time.perf_counter() - t0
        t0 = time.perf_counter()
        a_tasks = [asyncio.ensure_future(call(a, workspace_grep.grep, PATTERN, "xs.txt", "")) for _ in range(greps)]
        await asyncio.sleep(0)  # A's calls are queued first, as in one turn of parallel calls
        t1 = time.perf_counter()
        await call(b, workspace_files.read_file, "notes.txt", 1, 400)
        beside = time.perf_counter() - t1
        await asyncio.gather(*a_tasks)
        a_time = time.perf_counter() - t0
        return alone, beside, a_time
    finally:
        workspace_grep.re2 = saved


FORKS, PROCESS_LIMIT = 200, 150


def _processes_of(uid: int | None) -> int:
    """How many processes run as ``uid`` (from /proc)."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            if f"Uid:\t{uid}\t" in status.read_text():
                count += 1
    return count


async def fork_flood(way: str, root: Path) -> tuple[bool, float, str]:
    """(B's command ran, its seconds, what it printed) while A's command holds FORKS processes."""
    limits = SandboxLimits(processes=PROCESS_LIMIT)
    root.mkdir(mode=0o755)
    if way == "before":  # the old layout: workspaces side by side, every command as one uid
        a, b = root / "a", root / "b"
        for ws in (a, b):
            ws.mkdir()
            ws.chmod(0o777)
        sandbox = Sandbox(limits=limits, host_uid=60999)
    else:
        a = workspace_files.tenant_workspace(root, "alpha", "w", "w")
        b = workspace_files.tenant_workspace(root, "beta", "w", "w")
        sandbox = Sandbox(limits=limits, workspace_root=root)
    flood = await sandbox.start(a, f"for i in $(seq {FORKS}); do sleep 60 & done; echo started; wait")
    try:
        a_uid = 60999 if way == "before" else sandbox.tenant_access(a)[0]
        deadline = time.monotonic() + 30
        while _processes_of(a_uid) < PROCESS_LIMIT - 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # until A's flood holds (nearly) its whole process limit
        t0 = time.perf_counter()
        result = await sandbox.run(b, "echo ok", timeout=30)
        took = time.perf_counter() - t0
        return result.exit_code == 0 and "ok" in result.output.text, took, result.output.text.strip()[:120]
    finally:
        flood.kill()
        with contextlib.suppress(Exception):
            await flood.result(10)  # reaped on this loop


def plot(rows: dict[str, list[tuple[float, float, float]]], out: Path, short: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ways = list(rows)
    ax.bar([i - 0.2 for i in range(len(ways))], [statistics.median(r[1] for r in rows[w]) for w in ways], 0.4,
           label="B's read_file beside A's greps")
    ax.bar([i + 0.2 for i in range(len(ways))], [statistics.median(r[0] for r in rows[w]) for w in ways], 0.4,
           label="B's read_file alone")
    ax.set_xticks(range(len(ways)), ways)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (median, log scale)")
    ax.legend(fontsize=8)
    ax.set_title(f"tenant B's file tool beside tenant A's pathological greps: {short}", fontsize=9)
    fig.tight_layout()
    provenance.stamp(fig, short)
    return provenance.save_figure(fig, out, "tool_fairness", dpi=110)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--greps", type=int, default=12, help="tenant A's parallel greps (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each way (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="2 runs of each way")
    provenance.add_out_argument(parser)
    args = parser.parse_args(argv[1:])
    if args.quick and args.repeats == parser.get_default("repeats"):
        args.repeats = 2
    short = f"{args.greps} greps of {PATTERN} over 3,000 lines of 40 x, {args.repeats} runs per way"
    console.print(short)
    rows: dict[str, list[tuple[float, float, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="loopwire-bench-tool-fairness-") as root:
        Path(root).chmod(0o755)  # as a harness's state directory is: every tenant uid can traverse it
        a, b = lay_out(Path(root))
        sandbox = Sandbox(workspace_root=Path(root))
        for _ in range(args.repeats):
            for way in rows:  # alternating, so machine noise hits both
                rows[way].append(asyncio.run(one_way(way, a, b, sandbox, args.greps)))
        floods = {way: asyncio.run(fork_flood(way, Path(root) / f"flood-{way}")) for way in ("before", "after")}
    table = Table(title=f"tenant B's read_file while tenant A greps: {short}")
    for col in ("way", "B alone ms", "B beside A ms", "beside ÷ alone", "A's greps s"):
        table.add_column(col, justify="left" if col == "way" else "right")
    for way, runs in rows.items():
        alone = statistics.median(r[0] for r in runs)
        beside = statistics.median(r[1] for r in runs)
        table.add_row(way, f"{alone * 1000:.2f}", f"{beside * 1000:.1f}", f"{beside / alone:,.0f}×",
                      f"{statistics.median(r[2] for r in runs):.2f}")
    before = statistics.median(r[1] for r in rows["before"])
    after = statistics.median(r[1] for r in rows["after"])
    console.print(table)
    console.print(f"B beside A: before ÷ after = {before / after:,.0f}×")
    flood_table = Table(title=f"tenant B's `echo ok` while tenant A forks {FORKS} processes (limit {PROCESS_LIMIT})")
    for col in ("way", "B's command ran", "B's time s", "B's output"):
        flood_table.add_column(col, justify="left" if col in ("way", "B's output") else "right")
    for way, (ran, took, text) in floods.items():
        flood_table.add_row(way, "yes" if ran else "no", f"{took:.2f}", text)
    console.print(flood_table)
    header = provenance.provenance(
        f"synthetic: tenant A's workspace holds 3,000 lines of 40 'x'; tenant B's a 20-line file; pattern {PATTERN}",
        engine="none: the harness's file-tool code in this process (workspace_files, file_pool), real files",
        notes=["(b) before: the `regex` engine (RE2 switched off) on asyncio's default thread pool; after: RE2 and "
               "a pool per tenant; medians over the runs, the ways alternate",
               "(c) before: one host uid for every tenant's commands (Sandbox(host_uid=60999)); after: a uid per "
               "tenant; RLIMIT_NPROC counts per uid"])
    body = [*provenance.table_markdown(table), "", f"B beside A: before ÷ after = {before / after:,.0f}×", "",
            *provenance.table_markdown(flood_table), "",
            "![tool_fairness](tool_fairness.png)"]
    md = provenance.write_markdown(args.out, "tool_fairness", "File tools: one tenant's greps vs another's turn",
                                   header, body)
    png = plot(rows, args.out, short)
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: main(sys.argv)))
