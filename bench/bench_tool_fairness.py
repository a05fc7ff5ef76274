"""One tenant's pathological file tools against another's turn: row (b) of the fairness benchmark.

Tenant A calls ``grep`` 12 times at once with ``(x+x+)+y`` over 3,000 lines of 40 ``x`` (a
pattern a backtracking engine needs exponential time for); meanwhile tenant B calls
``read_file`` on a small file. Measured: B's call latency, beside A's greps and alone, and how
long A's greps take. Two ways, side by side in one run:

* ``before``: the `regex` engine (backtracking, with its per-call time limit) and every file tool
  on the process's one shared thread pool, as the harness ran them before;
* ``after``: RE2 (linear time) and a bounded pool per tenant (``harness/file_pool.py``).

Both ways call the harness's own tool code on real workspaces in one process (no model, no
sandboxed command: file tools run in the harness).

    .venv/bin/python bench/bench_tool_fairness.py [--greps 12] [--repeats 5] [--quick] [--out DIR]

Writes tool_fairness.md and tool_fairness.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from loopwire.harness import file_pool, workspace_files
from loopwire.harness.sandbox import Sandbox

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
    saved = workspace_files.re2
    if way == "before":
        workspace_files.re2 = None  # the backtracking engine decides, as before RE2

    async def call(ws: Path, fn, *args):  # noqa: ANN001, ANN202
        if way == "before":
            return await asyncio.to_thread(fn, ws, *args)
        return await file_pool.run_tool(sandbox, ws, fn, *args)

    try:
        t0 = time.perf_counter()
        await call(b, workspace_files.read_file, "notes.txt", 1, 400)
        alone = time.perf_counter() - t0
        t0 = time.perf_counter()
        a_tasks = [asyncio.ensure_future(call(a, workspace_files.grep, PATTERN, "xs.txt", "")) for _ in range(greps)]
        await asyncio.sleep(0)  # A's calls are queued first, as in one turn of parallel calls
        t1 = time.perf_counter()
        await call(b, workspace_files.read_file, "notes.txt", 1, 400)
        beside = time.perf_counter() - t1
        await asyncio.gather(*a_tasks)
        a_time = time.perf_counter() - t0
        return alone, beside, a_time
    finally:
        workspace_files.re2 = saved


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
    header = provenance.provenance(
        f"synthetic: tenant A's workspace holds 3,000 lines of 40 'x'; tenant B's a 20-line file; pattern {PATTERN}",
        engine="none: the harness's file-tool code in this process (workspace_files, file_pool), real files",
        notes=["before: the `regex` engine (RE2 switched off) on asyncio's default thread pool; after: RE2 and "
               "a pool per tenant", "medians over the runs; the ways alternate"])
    body = [*provenance.table_markdown(table), "", f"B beside A: before ÷ after = {before / after:,.0f}×", "",
            "![tool_fairness](tool_fairness.png)"]
    md = provenance.write_markdown(args.out, "tool_fairness", "File tools: one tenant's greps vs another's turn",
                                   header, body)
    png = plot(rows, args.out, short)
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: main(sys.argv)))
