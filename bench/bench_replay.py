"""Replay every recorded session through the real mesh with the simulated engine
(H200 + Llama 8B roofline cost model) and compare stateful vs stateless per layer,
on 1 and 4 replicas (cache-aware vs round-robin routing), at 1 and 16 concurrent sessions.

Times in the table are the engine's modelled (virtual) times; bytes and token counts are
what really crossed each hop. Writes bench/results/replay.md and bench/results/replay.png.

    .venv/bin/python bench/bench_replay.py [--traces DIR] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loopwire.analyze import expand_paths
from loopwire.common.recorded import load_session
from loopwire.mesh import start_mesh
from loopwire.replay import ALL_MODES, SERVICE_ARGS, ModeResult, replay_sessions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DEFAULT_TRACES = ROOT.parent / "shared" / "traces"
SIM_ARGS = ["--engine", "simulated", "--gpu", "h200", "--model-params", "8b", "--time-scale", "0"]


@dataclass
class Config:
    replicas: int
    routing: str
    concurrency: int
    mode: str

    @property
    def label(self) -> str:
        return f"{self.replicas}r {self.routing} c{self.concurrency} {self.mode}"


@dataclass
class Summary:
    config: Config
    bytes_sent: float
    tokens_tokenized: float
    prefill_computed: float
    prefill_cached: float
    mean_ttft_ms: float
    session_s: float
    real_s: float
    failed: int


def summarize(config: Config, result: ModeResult, real_s: float) -> Summary:
    turns = [p for r in result.runs for p in r.turns]
    n = max(1, len(turns))
    sessions = max(1, len(result.runs))
    modelled = sum((p.timings.queue_us + p.timings.ttft_us + p.timings.decode_us) for p in turns) / 1e6
    return Summary(
        config=config,
        bytes_sent=sum(p.bytes_sent for p in turns),
        tokens_tokenized=sum(p.timings.tokens_tokenized for p in turns),
        prefill_computed=sum(p.usage.input_tokens - p.usage.cached_input_tokens for p in turns),
        prefill_cached=sum(p.usage.cached_input_tokens for p in turns),
        mean_ttft_ms=sum(p.timings.ttft_us for p in turns) / n / 1000,
        session_s=modelled / sessions,
        real_s=real_s,
        failed=sum(not r.completed for r in result.runs),
    )


def configs(quick: bool) -> list[Config]:
    out = []
    for concurrency in (1, 16):
        for replicas, routing in ((1, "cache-aware"), (4, "cache-aware"), (4, "round-robin")):
            for mode in ALL_MODES:
                out.append(Config(replicas, routing, concurrency, mode))
    return out[:6] if quick else out


async def run_config(config: Config, sessions, progress: Progress) -> Summary:  # type: ignore[no-untyped-def]
    extra = {"inference": list(SIM_ARGS), "gateway": ["--routing", config.routing]}
    extra["inference"] += SERVICE_ARGS[config.mode].get("inference", [])
    with tempfile.TemporaryDirectory(prefix="loopwire-bench-") as state:
        mesh = await asyncio.to_thread(start_mesh, Path(state), inference_replicas=config.replicas, extra_args=extra)
        try:
            t0 = time.perf_counter()
            result = await replay_sessions(mesh.harness, sessions, config.mode, config.concurrency, progress,
                                           api_key=mesh.api_key)
            return summarize(config, result, time.perf_counter() - t0)
        finally:
            await asyncio.to_thread(mesh.stop)


def ratio_rows(summaries: list[Summary]) -> list[tuple[str, list[str]]]:
    """stateless/stateful ratios per (replicas, routing, concurrency)."""
    rows = []
    by_key = {(s.config.replicas, s.config.routing, s.config.concurrency, s.config.mode): s for s in summaries}
    for (replicas, routing, concurrency, mode), stateless in by_key.items():
        if mode != "stateless":
            continue
        stateful = by_key.get((replicas, routing, concurrency, "stateful"))
        if stateful is None:
            continue

        def r(a: float, b: float) -> str:
            return f"{a / b:.1f}×" if b else "∞"

        rows.append((f"{replicas} replica(s), {routing}, {concurrency} concurrent", [
            r(stateless.bytes_sent, stateful.bytes_sent),
            r(stateless.tokens_tokenized, stateful.tokens_tokenized),
            r(stateless.prefill_computed, stateful.prefill_computed),
            r(stateless.mean_ttft_ms, stateful.mean_ttft_ms),
            r(stateless.session_s, stateful.session_s),
        ]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default=str(DEFAULT_TRACES if DEFAULT_TRACES.is_dir() else ROOT / "examples" / "sessions"))
    parser.add_argument("--quick", action="store_true", help="4 sessions, 20 turns each, concurrency 1 only")
    parser.add_argument("--max-turns", type=int, default=0, help="replay only the first N turns of each session")
    args = parser.parse_args()
    console = Console(width=160)
    sessions = [load_session(p) for p in expand_paths([args.traces])]
    if args.quick:
        sessions = sessions[:4]
    max_turns = 20 if args.quick else args.max_turns
    for s in sessions:
        s.turns = s.turns[:max_turns] if max_turns else s.turns
    console.print(f"{len(sessions)} sessions, {sum(len(s.turns) for s in sessions)} turns from {args.traces}")
    summaries = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        for config in configs(args.quick):
            progress.console.print(f"[bold]{config.label}")
            summaries.append(asyncio.run(run_config(config, sessions, progress)))

    table = Table(title="replay through the mesh, simulated H200 + 8B (modelled times)")
    cols = ["config", "bytes sent", "tokens tokenized", "prefill computed", "prefill cached", "mean TTFT ms",
            "session s (modelled)", "real s", "failed"]
    for c in cols:
        table.add_column(c, justify="left" if c == "config" else "right")
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for s in summaries:
        cells = [s.config.label, f"{s.bytes_sent:,.0f}", f"{s.tokens_tokenized:,.0f}", f"{s.prefill_computed:,.0f}",
                 f"{s.prefill_cached:,.0f}", f"{s.mean_ttft_ms:.1f}", f"{s.session_s:.2f}", f"{s.real_s:.0f}",
                 str(s.failed)]
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    console.print(table)

    ratio_cols = ["setting", "bytes", "tokens tokenized", "prefill computed", "mean TTFT", "session time"]
    ratios = Table(title="stateless / stateful")
    for c in ratio_cols:
        ratios.add_column(c, justify="left" if c == "setting" else "right")
    md += ["", "stateless / stateful:", "", "| " + " | ".join(ratio_cols) + " |", "|" + "---|" * len(ratio_cols)]
    for name, cells in ratio_rows(summaries):
        ratios.add_row(name, *cells)
        md.append("| " + " | ".join([name, *cells]) + " |")
    console.print(ratios)

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "replay.md").write_text("\n".join(md) + "\n")
    plot(summaries, RESULTS / "replay.png")
    console.print(f"wrote {RESULTS / 'replay.md'} and {RESULTS / 'replay.png'}")


def plot(summaries: list[Summary], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    labels = [s.config.label for s in summaries]
    colors = ["tab:blue" if s.config.mode == "stateful" else "tab:red" for s in summaries]
    for ax, (title, values) in zip(axes, (
        ("prefill tokens computed", [s.prefill_computed for s in summaries]),
        ("mean TTFT (modelled ms)", [s.mean_ttft_ms for s in summaries]),
        ("tokens tokenized by the gateway", [s.tokens_tokenized for s in summaries]),
    ), strict=True):
        ax.barh(labels, values, color=colors)
        ax.set_title(title)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("stateful (blue) vs stateless (red), real sessions through the mesh, simulated H200 + 8B")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
