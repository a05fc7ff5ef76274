"""Replay every recorded session through the real mesh (harness → gateway → inference, each its
own process) with the simulated engine (H200 + Llama 8B roofline cost model) and compare the
three ways of ``loopwire.replay.ALL_MODES`` per layer, on 1 and 4 replicas (cache-aware vs
round-robin routing), at 1 and 16 concurrent sessions:

* ``stateful``: deltas on one stream, the replica keeps the session's KV;
* ``stateless``: the full transcript every turn, the engine's prefix cache on (the fair naive
  way, what a client of a provider with automatic prompt caching gets): the headline baseline;
* ``stateless-nocache``: the same with the prefix cache off (what the cache itself is worth).

Ratios are ``baseline ÷ stateful`` (how many times the stateful way's cost the baseline pays),
against ``stateless`` first and ``stateless-nocache`` second. Routing is the setting's for every
mode, so the three ways of a setting differ in conversation mode and prefix cache only.

Times are the engine's modelled (virtual) times; bytes and token counts are what really crossed
each hop. Writes replay.md and replay.png into ``--out`` (default .state/bench/).

    .venv/bin/python bench/bench_replay.py [--traces DIR] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from loopwire.common.recorded import RecordedSession
from loopwire.replay import (
    ALL_MODES,
    SERVICE_ARGS,
    ModeResult,
    early_ends,
    ended_early,
    load_for_replay,
    replay_sessions,
)

import interrupts
import provenance

GPU, PARAMS = "h200", "8b"
SIM_ARGS = ["--engine", "simulated", "--gpu", GPU, "--model-params", PARAMS, "--time-scale", "0"]
BASELINES = ("stateless", "stateless-nocache")  # headline first
COLOURS = {"stateful": "tab:green", "stateless": "tab:orange", "stateless-nocache": "tab:red"}
SETTINGS = ((1, "cache-aware"), (4, "cache-aware"), (4, "round-robin"))


@dataclass
class Config:
    replicas: int
    routing: str
    concurrency: int
    mode: str

    @property
    def setting(self) -> tuple[int, str, int]:
        return self.replicas, self.routing, self.concurrency

    @property
    def label(self) -> str:
        return f"{self.replicas}r {self.routing} c{self.concurrency} {self.mode}"


def setting_label(setting: tuple[int, str, int], short: bool = False) -> str:
    replicas, routing, concurrency = setting
    if short:
        return f"{replicas}r {routing} c{concurrency}"
    return f"{replicas} replica{'s' if replicas > 1 else ''}, {routing}, {concurrency} concurrent"


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


METRICS = (  # (ratio column, Summary field)
    ("bytes sent", "bytes_sent"),
    ("tokens tokenized", "tokens_tokenized"),
    ("prefill computed", "prefill_computed"),
    ("mean TTFT", "mean_ttft_ms"),
    ("session time", "session_s"),
)


def summarize(config: Config, result: ModeResult, real_s: float, recorded: Sequence[RecordedSession] = ()) -> Summary:
    """Sums over the runs; a run that ended before its ``recorded`` session did counts as failed."""
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
        failed=sum(not r.completed for r in result.runs)
        + sum(ended_early(s, r) for s, r in zip(recorded, result.runs, strict=False)),
    )


def parse_settings(text: str) -> list[tuple[int, str]]:
    """``1:cache-aware,4:round-robin`` → [(1, "cache-aware"), (4, "round-robin")]."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        replicas, _, routing = part.partition(":")
        if not replicas.isdigit() or routing not in ("cache-aware", "round-robin", "least-loaded"):
            raise argparse.ArgumentTypeError(f"{part!r}: expected REPLICAS:ROUTING, e.g. 4:round-robin")
        out.append((int(replicas), routing))
    return out


def parse_ints(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a comma list of integers") from None


def configs(settings: list[tuple[int, str]], concurrencies: list[int]) -> list[Config]:
    return [Config(replicas, routing, concurrency, mode)
            for concurrency in concurrencies for replicas, routing in settings for mode in ALL_MODES]


async def run_config(config: Config, sessions: list[RecordedSession], progress: Progress) -> Summary:
    # Each mode's own service flags (the prefix cache off for stateless-nocache), but the setting's
    # routing for every mode, so a setting's rows differ in conversation mode and cache only.
    extra = {"inference": [*SIM_ARGS, *SERVICE_ARGS[config.mode].get("inference", [])],
             "gateway": ["--routing", config.routing]}
    with tempfile.TemporaryDirectory(prefix="loopwire-bench-") as state:
        mesh = await asyncio.to_thread(interrupts.start_mesh, Path(state), inference_replicas=config.replicas,
                                       extra_args=extra)
        try:
            t0 = time.perf_counter()
            result = await replay_sessions(mesh.harness, sessions, config.mode, config.concurrency, progress,
                                           api_key=mesh.api_key)
            for line in early_ends(sessions, [result]):
                progress.console.print(f"[red]error:[/] {escape(line)}", soft_wrap=True)
            return summarize(config, result, time.perf_counter() - t0, sessions)
        finally:
            await asyncio.to_thread(interrupts.stop, mesh)


def ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def fmt_ratio(x: float) -> str:
    return "∞" if x == float("inf") else f"{x:.1f}×" if x >= 9.95 else f"{x:.2f}×"


def ratios(summaries: list[Summary], baseline: str) -> list[tuple[tuple[int, str, int], list[float]]]:
    """``baseline ÷ stateful`` per setting and metric."""
    by_key = {(s.config.setting, s.config.mode): s for s in summaries}
    rows = []
    for setting in dict.fromkeys(s.config.setting for s in summaries):
        base, ours = by_key.get((setting, baseline)), by_key.get((setting, "stateful"))
        if base and ours:
            rows.append((setting, [ratio(getattr(base, f), getattr(ours, f)) for _, f in METRICS]))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default=str(provenance.DATA_SESSIONS),
                        help="recorded sessions: a directory or file (default: data/sessions)")
    parser.add_argument("--quick", action="store_true",
                        help="4 sessions, 20 turns each, concurrency 1, 1 replica and 4 round-robin only "
                             "(--settings / --concurrency override)")
    parser.add_argument("--max-turns", type=int, default=0, help="replay only the first N turns of each session")
    parser.add_argument("--settings", type=parse_settings,
                        help="REPLICAS:ROUTING comma list (default: " +
                             ",".join(f"{r}:{p}" for r, p in SETTINGS) + "; --quick: 1:cache-aware,4:round-robin)")
    parser.add_argument("--concurrency", type=parse_ints,
                        help="sessions replayed at once, a comma list (default: 1,16; --quick: 1)")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    console = Console(width=160)
    max_turns = 20 if args.quick else args.max_turns
    loaded = load_for_replay([args.traces], max_turns, console)  # skips what `loopwire replay` skips
    if args.quick:
        loaded = loaded[:4]
    if not loaded:
        console.print("[red]no sessions to replay[/]")
        return 1
    sessions = [s for _, s in loaded]
    used = [(p, len(s.turns)) for p, s in loaded]
    note = f"first {max_turns} turns of each" if max_turns else "every turn"
    data = provenance.describe_sessions(used, note=note)
    short = provenance.short_data(used, note)
    console.print(f"{short}; modes {', '.join(ALL_MODES)}")
    summaries = []
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            for config in configs(args.settings or (list(SETTINGS[::2]) if args.quick else list(SETTINGS)),
                                  args.concurrency or ([1] if args.quick else [1, 16])):
                progress.console.print(f"[bold]{config.label}")
                summaries.append(asyncio.run(run_config(config, sessions, progress)))
    finally:
        interrupts.stop_all()

    table = Table(title=f"Replay through the mesh, simulated {GPU.upper()} + {PARAMS.upper()} (modelled times): "
                        f"{short}\n(r = inference replicas, c = sessions replayed concurrently)")
    cols = ["setting", "mode", "bytes sent", "tokens tokenized", "prefill computed",
            "prefill cached", "mean TTFT ms", "session s (modelled)", "real s", "failed"]
    for c in cols:
        table.add_column(c, justify="left" if c in cols[:2] else "right")
    for s in summaries:
        table.add_row(setting_label(s.config.setting, short=True), s.config.mode, f"{s.bytes_sent:,.0f}",
                      f"{s.tokens_tokenized:,.0f}", f"{s.prefill_computed:,.0f}", f"{s.prefill_cached:,.0f}",
                      f"{s.mean_ttft_ms:.1f}", f"{s.session_s:.2f}", f"{s.real_s:.0f}", str(s.failed))
    console.print(table)

    ratio_tables = []
    for baseline in BASELINES:
        kind = "fair baseline, headline" if baseline == "stateless" else "no prefix cache"
        t = Table(title=f"{baseline} ÷ stateful ({kind}): how many times the stateful way's cost {baseline} pays")
        t.add_column("replicas, routing, concurrency")
        for name, _ in METRICS:
            t.add_column(name, justify="right")
        for setting, values in ratios(summaries, baseline):
            t.add_row(setting_label(setting), *map(fmt_ratio, values))
        console.print(t)
        ratio_tables.append(t)

    out = args.out
    body = [f"Modes: {', '.join(ALL_MODES)}. Routing is the setting's for every mode. Ratios are "
            "`baseline ÷ stateful` over the sums (mean TTFT and session time: over their means).", ""]
    for t in ratio_tables:
        body += [*provenance.table_markdown(t), ""]
    body += [*provenance.table_markdown(table), "", "![replay](replay.png)"]
    header = provenance.provenance(
        data, engine="simulated (`--engine simulated --time-scale 0`: the real scheduler and KV block manager, "
                     "step times from the cost model on a virtual clock; `real s` is wall time on this machine)",
        cost_model=provenance.cost_model(GPU, PARAMS),
        notes=[f"services: harness, gateway and {', '.join(sorted({str(s.config.replicas) for s in summaries}))} "
               "inference replica(s) as separate processes (`loopwire.mesh.start_mesh`), fresh per row"])
    md = provenance.write_markdown(out, "replay", "Recorded sessions through the mesh: stateful vs stateless",
                                   header, body)
    png = plot(summaries, out, short)
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 1 if any(s.failed for s in summaries) else 0


def plot(summaries: list[Summary], out: Path, short: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    panels = list(METRICS)
    per_baseline = {b: ratios(summaries, b) for b in BASELINES}
    settings = [s for s, _ in per_baseline[BASELINES[0]]]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 4.8), sharey=True)
    x = np.arange(len(settings))
    width = 0.38
    for ax, (name, field) in zip(axes, panels, strict=True):
        k = [f for _, f in METRICS].index(field)
        for j, baseline in enumerate(BASELINES):
            values = [v[k] for _, v in per_baseline[baseline]]
            # Bars grow from 1× (= the stateful way's cost): up when the baseline pays more.
            bars = ax.bar(x + (j - 0.5) * width, [v - 1 for v in values], width, bottom=1,
                          color=COLOURS[baseline], label=f"{baseline} ÷ stateful")
            ax.bar_label(bars, labels=[fmt_ratio(v) for v in values], fontsize=7, padding=1)
        ax.axhline(1, color="0.3", linewidth=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(x, [setting_label(s).replace(", ", "\n") for s in settings], fontsize=7)
        ax.set_title({"mean_ttft_ms": "mean TTFT (modelled)", "session_s": "session time (modelled)"}.get(field, name))
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0].set_ylabel("baseline ÷ stateful (log scale; bars start at 1× = same as stateful)")
    top = max(v for rows in per_baseline.values() for _, vs in rows for v in vs if v != float("inf"))
    axes[0].set_ylim(0.5, top * 3)
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"What each turn costs the naive ways, relative to stateful: {short}; simulated "
                 f"{GPU.upper()} + Llama {PARAMS.upper()} (modelled times)", fontsize=10)
    fig.tight_layout()
    provenance.stamp(fig, short)
    return provenance.save_figure(fig, out, "replay", dpi=110)


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
