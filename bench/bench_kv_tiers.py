"""KV eviction policies on agent traffic with idle gaps: LRU vs retention priorities vs
priorities + a host-memory tier, at a device KV capacity that forces eviction.

Every session of ``--traces`` runs on one simulated replica (the real scheduler and block
manager, the roofline cost model on a virtual clock, host copies priced at the host-link
bandwidth). A session's next turn arrives when its previous turn finished plus an idle gap:
the tool's run time or a human approval wait. The recordings carry no timestamps, so the gaps
come from a documented, seeded model (``gap_seconds``): lognormal tool times, long for test
runs and installs seen in the recorded command, short otherwise, and an approval wait before
a fraction of the turns. Outputs are the recorded turns (replay oracle), no speculation, so
every policy does the same work and only caching differs.

Retention (``priority`` modes): the instructions + tool-schema prefix at 90 (alone in
``priority, prefix only``); a session that
waits for approval holds its context at 70 for ``HOLD_S``; the
rest at the default 35. Long tools are not held: the harness cannot tell a 2 s tool from a
2 min one, and holding every session's context starves the active ones at this capacity (TensorRT-LLM ``KvCacheRetentionConfig`` semantics).

Run: .venv/bin/python bench/bench_kv_tiers.py [--traces DIR] [--quick] [--out DIR]
Writes kv_tiers.md and kv_tiers.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import heapq
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from bench_engine import Turn, session_turns  # noqa: E402
from loopwire.common.model_def import dummy_definition  # noqa: E402
from loopwire.common.prompt import ChatPrompt  # noqa: E402
from loopwire.common.recorded import load_session  # noqa: E402
from loopwire.gateway.conversation import Conversation  # noqa: E402
from loopwire.inference.config import EngineConfig, model_preset  # noqa: E402
from loopwire.inference.cost_model import CostModel  # noqa: E402
from loopwire.inference.sequence import GenerationRequest, RetentionPolicy, TokenRangeRetention  # noqa: E402
from loopwire.inference.simulated_engine import simulated_core  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=150)
GPU, PARAMS = "h200", "8b"
BLOCK = 16
# Capacities as fractions of the working set (the sum of every session's longest context):
# the device holds a quarter of it, the host tier another half.
DEVICE_FRACTION, HOST_FRACTION = 0.25, 0.5
HOLD_S = 300.0
LONG_GAP_S = 30.0  # "after a gap": turns that waited at least this long
STAGGER_S = 4.0  # session i starts at i * STAGGER_S
QUICK_SESSIONS, QUICK_TURNS = 8, 20
# Gap model (seconds): lognormal(median, sigma). Long tools: test runs, installs, builds.
LONG_TOOL = re.compile(r"pytest|python -m|python3? \S+\.py|pip install|tox|make\b|setup\.py|npm |cargo ")
SHORT_TOOL_GAP, LONG_TOOL_GAP, APPROVAL_GAP = (1.0, 0.7), (20.0, 1.0), (90.0, 1.0)
APPROVAL_FRACTION = 0.15


@dataclass(frozen=True)
class Mode:
    label: str
    policy: str
    priorities: str  # "": none; "prefix": the instructions only; "holds": also approval holds
    host: bool


MODES = [
    Mode("LRU", "lru", "", False),
    Mode("priority, prefix only", "priority", "prefix", False),
    Mode("priority", "priority", "holds", False),
    Mode("LRU + host tier", "lru", "", True),
    Mode("priority + host tier", "priority", "holds", True),
]


@dataclass
class SessionPlan:
    name: str
    turns: list[Turn]
    system_len: int
    gaps: list[float]  # before turn j (gaps[0]: the start offset)
    holds: list[bool]  # turn j is followed by an approval wait (the harness knows it is asking)


@dataclass
class Result:
    queried: int = 0
    hit: int = 0
    host_hit: int = 0
    ttft: list[float] = field(default_factory=list)
    ttft_after_gap: list[float] = field(default_factory=list)
    hit_after_gap: list[float] = field(default_factory=list)
    onloaded: int = 0
    transfer_s: float = 0.0
    makespan: float = 0.0


def lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    return float(median * math.exp(sigma * rng.standard_normal()))


def plan(path: Path, index: int, rng: np.random.Generator, max_turns: int) -> SessionPlan | None:
    try:
        turns = session_turns(path)[: max_turns or None]
    except ValueError:
        return None
    s = load_session(path)
    system = Conversation(ChatPrompt(dummy_definition()), "", s.instructions, s.tools).prompt_ids()
    first = turns[0].prompt
    system_len = next((i for i, (a, b) in enumerate(zip(system, first, strict=False)) if a != b), len(system))
    gaps, holds = [index * STAGGER_S], []
    for t in s.turns[: len(turns)]:
        command = t.text + " ".join(c.arguments for c in t.calls)
        long_tool = bool(LONG_TOOL.search(command))
        gap = lognormal(rng, *(LONG_TOOL_GAP if long_tool else SHORT_TOOL_GAP))
        approval = rng.random() < APPROVAL_FRACTION
        if approval:
            gap += lognormal(rng, *APPROVAL_GAP)
        gaps.append(gap)
        holds.append(approval)
    return SessionPlan(path.name.split(".")[0], turns, system_len, gaps, holds)


def retention(p: SessionPlan, j: int, holds: bool) -> RetentionPolicy:
    ranges = [TokenRangeRetention(0, p.system_len, 90)]
    if not holds:
        return RetentionPolicy(tuple(ranges))
    # The latest request sets a block's priority: a session back from its wait drops its hold.
    ranges.append(TokenRangeRetention(p.system_len, None, 70, duration_s=HOLD_S) if p.holds[j]
                  else TokenRangeRetention(p.system_len, None, 35))
    return RetentionPolicy(tuple(ranges), decode_priority=70 if p.holds[j] else 35,
                           decode_duration_s=HOLD_S if p.holds[j] else None)


def capacities(plans: list[SessionPlan]) -> tuple[int, int]:
    """(device KV blocks, host tier bytes) for these sessions."""
    working_set = sum(len(p.turns[-1].prompt) + len(p.turns[-1].oracle) for p in plans)
    per_token = CostModel.named(GPU, PARAMS).kv_bytes_per_token
    return int(working_set * DEVICE_FRACTION) // BLOCK, int(working_set * HOST_FRACTION) * per_token


def run(mode: Mode, plans: list[SessionPlan], progress: Progress, task: object) -> Result:
    cost = CostModel.named(GPU, PARAMS)
    device_blocks, host_bytes = capacities(plans)
    config = EngineConfig(model=model_preset(PARAMS), block_size=BLOCK, num_kv_blocks=device_blocks,
                          max_batch_tokens=8192, max_running=256, eviction_policy=mode.policy,
                          host_kv_bytes=host_bytes if mode.host else 0)
    core, executor = simulated_core(config, cost, dummy_definition())
    clock = core.clock
    stop = tuple(dummy_definition().stop_token_ids)
    arrivals: list[tuple[float, int, int]] = [(p.gaps[0], i, 0) for i, p in enumerate(plans)]
    heapq.heapify(arrivals)
    waited: dict[str, float] = {}
    out = Result()
    while arrivals or core.has_work():
        if not core.has_work() and arrivals and arrivals[0][0] > clock.now():
            clock.advance(arrivals[0][0] - clock.now())  # type: ignore[attr-defined]
        while arrivals and arrivals[0][0] <= clock.now():
            _, i, j = heapq.heappop(arrivals)
            p = plans[i]
            turn = p.turns[j]
            rid = f"{i}/{j}"
            waited[rid] = p.gaps[j] if j else 0.0
            core.add(GenerationRequest(rid, turn.prompt, len(turn.oracle), stop_token_ids=stop, oracle=turn.oracle,
                                       speculative=False, session_id=p.name,
                                       retention=retention(p, j, mode.priorities == "holds") if mode.priorities
                                       else None))
        for o in core.step():
            if o.finished is None:
                continue
            i, j = map(int, o.request_id.split("/"))
            u, ttft = o.finished.usage, o.finished.timings.ttft_us / 1e6
            out.ttft.append(ttft)
            if waited.pop(o.request_id) >= LONG_GAP_S:
                out.ttft_after_gap.append(ttft)
                out.hit_after_gap.append(u.cached_input_tokens / max(u.input_tokens, 1))
            if j + 1 < len(plans[i].turns):
                heapq.heappush(arrivals, (clock.now() + plans[i].gaps[j + 1], i, j + 1))
            progress.advance(task)  # type: ignore[arg-type]
    b = core.blocks
    out.queried, out.hit, out.host_hit, out.onloaded = b.queried_tokens, b.hit_tokens, b.host_hit_tokens, b.onloaded_blocks
    out.transfer_s = executor.transfer_seconds
    out.makespan = clock.now()
    return out


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=provenance.DATA_SESSIONS)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_SESSIONS} sessions, their first {QUICK_TURNS} turns")
    parser.add_argument("--seed", type=int, default=0, help="seed of the gap model")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    paths = provenance.session_files(args.traces)[: QUICK_SESSIONS if args.quick else None]
    rng = np.random.default_rng(args.seed)
    plans = [p for i, path in enumerate(paths) if (p := plan(path, i, rng, QUICK_TURNS if args.quick else 0))]
    if not plans:
        raise SystemExit(f"no recorded sessions under {args.traces}")
    n_turns = sum(len(p.turns) for p in plans)
    results: dict[str, Result] = {}
    with Progress(console=console, transient=True) as progress:
        for mode in MODES:
            results[mode.label] = run(mode, plans, progress, progress.add_task(mode.label, total=n_turns))
    device_blocks, host_bytes = capacities(plans)
    gaps = [g for p in plans for g in p.gaps[1:]]
    long_gaps = sum(g >= LONG_GAP_S for g in gaps)

    table = Table(title=f"Eviction policies, {len(plans)} sessions, {n_turns:,} turns (replay; simulated "
                        f"{GPU.upper()} Llama {PARAMS.upper()}, {device_blocks * BLOCK:,} tokens of device KV)")
    for col in ("policy", "prefix hit rate", "from host", f"hit rate after a gap ≥ {LONG_GAP_S:.0f} s",
                "TTFT after a gap p50 / p90", "TTFT p50 / p99", "host→device copies", "makespan"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for mode in MODES:
        r = results[mode.label]
        table.add_row(mode.label, f"{r.hit / max(r.queried, 1):.1%}", f"{r.host_hit / max(r.queried, 1):.1%}",
                      f"{statistics.fmean(r.hit_after_gap):.1%}" if r.hit_after_gap else "-",
                      f"{pct(r.ttft_after_gap, 50) * 1e3:,.0f} / {pct(r.ttft_after_gap, 90) * 1e3:,.0f} ms",
                      f"{pct(r.ttft, 50) * 1e3:,.0f} / {pct(r.ttft, 99) * 1e3:,.0f} ms",
                      f"{r.onloaded:,} blocks ({r.transfer_s:.2f} s)", f"{r.makespan / 60:,.1f} min")
    console.print(table)

    used = [(path, len(p.turns)) for path, p in zip(paths, plans, strict=False)]
    short = provenance.short_data(used)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    labels = [m.label for m in MODES]
    ax = axes[0]
    ax.bar(labels, [results[m].hit / max(results[m].queried, 1) * 100 for m in labels], label="all turns")
    ax.bar(labels, [results[m].host_hit / max(results[m].queried, 1) * 100 for m in labels],
           label="of which from the host tier", color="tab:orange")
    ax.set(title="Prefix-cache hit rate (cached prompt tokens / prompt tokens)", ylabel="%")
    ax.tick_params(axis="x", labelrotation=15)
    ax.legend()
    ax = axes[1]
    for m in labels:
        xs = sorted(results[m].ttft_after_gap)
        if xs:
            ax.plot([x * 1e3 for x in xs], np.linspace(0, 1, len(xs)), label=m)
    ax.set_xscale("log")
    ax.set(title=f"TTFT of turns after an idle gap ≥ {LONG_GAP_S:.0f} s (CDF)", xlabel="ms (virtual time)",
           ylabel="fraction of turns")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.suptitle(f"KV eviction policies, simulated {GPU.upper()} Llama {PARAMS.upper()}, device KV "
                 f"{device_blocks * BLOCK:,} tokens, host tier {host_bytes / 2**30:.1f} GiB")
    fig.tight_layout()
    provenance.stamp(fig, short)
    png = provenance.save_figure(fig, args.out, "kv_tiers")
    header = provenance.provenance(
        provenance.describe_sessions(used, note=f"turns replayed with idle gaps, {long_gaps} of {len(gaps)} gaps "
                                                f"≥ {LONG_GAP_S:.0f} s"),
        engine=f"simulated engine, dummy:0 cl100k tokenizer; recorded turns forced by the replay oracle, no "
               f"speculation; device KV {device_blocks:,} blocks of {BLOCK} "
               f"({DEVICE_FRACTION:.0%} of the working set); host tier {host_bytes / 2**30:.1f} GiB "
               f"({HOST_FRACTION:.0%})",
        cost_model=provenance.cost_model(GPU, PARAMS) + f"; host link {CostModel.named(GPU, PARAMS).gpu.host_link_gb_per_s:g} GB/s",
        notes=[f"gap model (seed {args.seed}): tool time lognormal, median {LONG_TOOL_GAP[0]:g} s (σ {LONG_TOOL_GAP[1]:g}) "
               f"when the recorded command runs tests/installs/builds, else {SHORT_TOOL_GAP[0]:g} s (σ "
               f"{SHORT_TOOL_GAP[1]:g}); before {APPROVAL_FRACTION:.0%} of the turns an approval wait, median "
               f"{APPROVAL_GAP[0]:g} s (σ {APPROVAL_GAP[1]:g}); sessions start {STAGGER_S:g} s apart (the recordings "
               "carry no timestamps)",
               f"retention: instructions + tool schemas 90; a turn followed by an approval wait holds "
               f"its context at 70 for {HOLD_S:g} s; otherwise 35"])
    body = ["Replays of recorded sessions (oracle tokens).", "", *provenance.table_markdown(table), "",
            "![kv tiers](kv_tiers.png)"]
    md = provenance.write_markdown(args.out, "kv_tiers", "KV eviction policies and the host tier", header, body)
    console.print(f"wrote {provenance.rel(png)} and {provenance.rel(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
