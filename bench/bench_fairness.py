"""Tenants on one replica: how long tenant B's short request (the canary) waits for its first token
while tenant A's long prompt prefills, under the old scheduling policy and the new one.

- ``fcfs`` (before): running sequences in arrival order, each taking what the step's token budget
  leaves, so A's prefill takes the whole budget every step and B waits for its last chunk.
- ``fair`` (after, the default): decodes first, then prefill chunks of at most ``prefill_chunk``
  tokens per sequence, fewest tokens left first; a prompt that shares the block another prompt is
  computing waits a step and hits it in the prefix cache.

Scenarios (the canary: 37 new tokens of tenant B, one output token; A and B have their own cache salts, A one per policy):

- (a) A sends one long prompt: 20k tokens on the simulated engine (H200, Llama 8B, the roofline
  cost model paced in real time by ``--time-scale``), and 8k (``--quick``: 2k) on the reference
  engine running the real model (``--model``, default SmolLM2-135M) on this CPU.
- (c) A fork flood: 16 forks of one 20k-token conversation (64 new tokens each) arrive together
  (simulated engine). Besides the canary: when the last fork got its first token, and the GPU
  time the flood took (forks that prefill the shared prefix side by side waste it).
- (b) 12 pathological greps: TODO, not here. It is harness-side (tool outputs entering the
  transcript) and belongs to the harness benchmark.

A canary is sent once A's first step ran, then again each time the previous one got its token,
until A's prompt(s) got theirs. TTFT is wall time (on the simulated engine divided by the time
scale: modelled seconds, the sleep of the step in flight included); idle: canaries alone.

Run: .venv/bin/python bench/bench_fairness.py [--quick] [--out DIR]
Writes fairness.md and fairness.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.inference.engine import AsyncEngine  # noqa: E402
from loopwire.inference.scheduler import DEFAULT_PREFILL_CHUNK  # noqa: E402
from loopwire.inference.sequence import GenerationRequest  # noqa: E402
from loopwire.inference.server import EngineOptions, build_engine  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=170)
GPU, PARAMS = "h200", "8b"
CANARY_TOKENS = 37
IDLE_CANARIES = 5
FORKS, FORK_TAIL = 16, 64
POLICIES = ("fcfs", "fair")


@dataclass
class Run:
    canary_s: list[float] = field(default_factory=list)  # each canary's TTFT
    tenant_a_s: float = 0.0  # when A's (last) prompt got its first token
    gpu_s: float = 0.0  # modelled busy time (simulated engine)

    @property
    def median(self) -> float:
        return statistics.median(self.canary_s) if self.canary_s else float("nan")


@dataclass
class Scenario:
    name: str
    engine: str
    prompt: str
    idle: Run
    runs: dict[str, Run]


class Prompts:
    """Distinct token ids for every request, so nothing hits the cache unless it is meant to."""

    def __init__(self, vocab: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.hi = min(vocab, 40_000)

    def __call__(self, n: int) -> list[int]:
        return [int(t) for t in self.rng.integers(1000, self.hi, n)]


async def first_token(engine: AsyncEngine, req: GenerationRequest, scale: float) -> float:
    """Seconds (modelled when scale != 1) from submitting ``req`` to its first token."""
    t0, first = time.monotonic(), None
    async for out in engine.generate(req):
        if out.token_ids and first is None:
            first = (time.monotonic() - t0) / scale
    if first is None:
        raise RuntimeError(f"{req.request_id} ended without a token")
    return first


def canary(prompts: Prompts, tag: str) -> GenerationRequest:
    return GenerationRequest(f"canary-{tag}", prompts(CANARY_TOKENS), 1, speculative=False, cache_salt="tenant-b")


async def idle_canaries(engine: AsyncEngine, prompts: Prompts, scale: float) -> Run:
    await first_token(engine, canary(prompts, "warmup"), scale)
    return Run([await first_token(engine, canary(prompts, f"idle{i}"), scale) for i in range(IDLE_CANARIES)])


async def loaded(engine: AsyncEngine, policy: str, long_prompts: list[list[int]], prompts: Prompts,
                 scale: float) -> Run:
    """Tenant A's prompts all at once; canaries one after another while any of them prefills."""
    engine.core.scheduler.policy = policy  # type: ignore[attr-defined]
    core = engine.core  # type: ignore[attr-defined]
    steps, busy = core.steps, _busy(engine)
    t0 = time.monotonic()
    tenant_a = [asyncio.create_task(first_token(engine, GenerationRequest(
        f"a-{policy}-{i}", p, 1, speculative=False, cache_salt=f"tenant-a-{policy}"), scale)) for i, p in enumerate(long_prompts)]
    while core.steps == steps:  # A is prefilling
        await asyncio.sleep(0.001)
    run = Run()
    while not all(t.done() for t in tenant_a):
        run.canary_s.append(await first_token(engine, canary(prompts, f"{policy}{len(run.canary_s)}"), scale))
    await asyncio.gather(*tenant_a)
    run.tenant_a_s = (time.monotonic() - t0) / scale
    run.gpu_s = _busy(engine) - busy
    return run


def _busy(engine: AsyncEngine) -> float:
    executor = engine.core.executor  # type: ignore[attr-defined]
    return float(getattr(executor, "busy_seconds", 0.0))


async def scenario(name: str, engine: AsyncEngine, label: str, prompt_text: str, long_prompts: list[list[int]],
                   scale: float, chunk: int) -> Scenario:
    engine.core.scheduler.prefill_chunk = chunk  # type: ignore[attr-defined]
    prompts = Prompts(engine.vocab_size, seed=len(name))
    idle = await idle_canaries(engine, prompts, scale)
    runs = {}
    for policy in POLICIES:
        runs[policy] = await loaded(engine, policy, long_prompts, prompts, scale)
        console.print(f"  {name} {policy}: canary {_ms(runs[policy].median)} (idle {_ms(idle.median)}), "
                      f"A {_ms(runs[policy].tenant_a_s)}")
    return Scenario(name, label, prompt_text, idle, runs)


async def run_all(args: argparse.Namespace) -> list[Scenario]:
    out = []
    sim = build_engine(EngineOptions(engine="simulated", gpu=GPU, model_params=PARAMS, time_scale=args.time_scale))
    assert isinstance(sim, AsyncEngine)
    long_sim = args.sim_tokens
    p = Prompts(sim.vocab_size, seed=1)
    try:
        out.append(await scenario("(a) one long prompt", sim, f"simulated {GPU.upper()} Llama {PARAMS.upper()}",
                                  f"{long_sim:,} tokens", [p(long_sim)], args.time_scale, args.prefill_chunk))
        shared = p(long_sim)
        forks = [shared + p(FORK_TAIL) for _ in range(FORKS)]
        out.append(await scenario("(c) fork flood", sim, f"simulated {GPU.upper()} Llama {PARAMS.upper()}",
                                  f"{FORKS} forks of {long_sim:,} + {FORK_TAIL} tokens", forks, args.time_scale,
                                  args.prefill_chunk))
    finally:
        await sim.close()
    console.print(f"loading the reference engine's model {args.model!r}...")
    ref = build_engine(EngineOptions(engine="reference", model=args.model))
    assert isinstance(ref, AsyncEngine)
    long_ref = 2_000 if args.quick else 8_000
    try:
        out.append(await scenario("(a) one long prompt", ref, f"reference {args.model_label or args.model} (this CPU)",
                                  f"{long_ref:,} tokens", [Prompts(ref.vocab_size, 2)(long_ref)], 1.0,
                                  args.prefill_chunk))
    finally:
        await ref.close()
    return out


def _ms(s: float) -> str:
    return f"{s * 1e3:,.1f} ms" if s < 10 else f"{s:,.1f} s"


def table(scenarios: list[Scenario]) -> Table:
    t = Table(title="Canary TTFT of tenant B while tenant A prefills: fcfs (before) vs fair (after)")
    for col in ("scenario", "engine", "tenant A", "canary idle", "canary fcfs", "canary fair", "fcfs / idle",
                "fair / idle", "fcfs / fair", "A's first token fcfs / fair", "GPU time fcfs / fair"):
        t.add_column(col, justify="left" if col in ("scenario", "engine", "tenant A") else "right")
    for s in scenarios:
        idle, fcfs, fair = s.idle.median, s.runs["fcfs"], s.runs["fair"]
        gpu = f"{fcfs.gpu_s:.2f} / {fair.gpu_s:.2f} s" if fcfs.gpu_s else "-"
        t.add_row(s.name, s.engine, s.prompt, _ms(idle), f"{_ms(fcfs.median)} (n={len(fcfs.canary_s)})",
                  f"{_ms(fair.median)} (max {_ms(max(fair.canary_s))}, n={len(fair.canary_s)})",
                  f"{fcfs.median / idle:,.1f}×", f"{fair.median / idle:,.2f}×", f"{fcfs.median / fair.median:,.0f}×",
                  f"{_ms(fcfs.tenant_a_s)} / {_ms(fair.tenant_a_s)}", gpu)
    return t


def plot(scenarios: list[Scenario], data: str) -> plt.Figure:
    fig, ax = plt.subplots(figsize=(9, 4.2))
    labels = [f"{s.name}\n{s.engine}\n{s.prompt}" for s in scenarios]
    x = np.arange(len(scenarios))
    for i, (key, color) in enumerate((("idle", "0.6"), ("fcfs", "tab:red"), ("fair", "tab:green"))):
        values = [s.idle.median if key == "idle" else s.runs[key].median for s in scenarios]
        bars = ax.bar(x + (i - 1) * 0.27, [v * 1e3 for v in values], 0.27, color=color,
                      label={"idle": "idle replica", "fcfs": "fcfs (before)", "fair": "fair (after)"}[key])
        ax.bar_label(bars, [_ms(v) for v in values], fontsize=7, padding=2)
    ax.set_yscale("log")
    ax.set_ylabel("canary time to first token (ms, median, log)")
    ax.set_xticks(x, labels, fontsize=7.5)
    ax.set_title("Tenant B's 37-token request while tenant A's long prompt prefills")
    ax.legend(fontsize=8)
    fig.tight_layout()
    provenance.stamp(fig, data)
    return fig


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 2k-token prompt on the reference engine (else 8k)")
    parser.add_argument("--sim-tokens", type=int, default=20_000, help="tenant A's prompt on the simulated engine")
    parser.add_argument("--time-scale", type=float, default=0.0,
                        help="real seconds per modelled second on the simulated engine (default: 5 with --quick, "
                             "else 20)")
    parser.add_argument("--prefill-chunk", type=int, default=DEFAULT_PREFILL_CHUNK,
                        help="the fair policy's prefill tokens per sequence and step")
    parser.add_argument("--model", default="default", help="the reference engine's model (default: SmolLM2-135M)")
    parser.add_argument("--model-label", default="", help="its name in the table (default: SmolLM2-135M for default)")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    args.time_scale = args.time_scale or (5.0 if args.quick else 20.0)
    args.model_label = args.model_label or ("SmolLM2-135M" if args.model == "default" else "")
    scenarios = asyncio.run(run_all(args))
    t = table(scenarios)
    console.print(t)
    data = (f"synthetic prompts: canary {CANARY_TOKENS} tokens; tenant A as in each row "
            f"(random token ids, no cache hits across requests)")
    png = provenance.save_figure(plot(scenarios, "synthetic prompts (bench_fairness)"), args.out, "fairness")
    header = provenance.provenance(
        data,
        engine=(f"simulated ({GPU} {PARAMS}, time scale {args.time_scale:g}, token budget 8192 per step) and "
                f"reference ({args.model}, token budget 1024 per step); fair policy prefill chunk "
                f"{args.prefill_chunk} tokens"),
        cost_model=provenance.cost_model(GPU, PARAMS),
        notes=["(b) 12 pathological greps: TODO, a harness-side workload (another benchmark)"])
    body = [*provenance.table_markdown(t), "",
            "TTFT: wall time from submitting the canary to its first token, the step in flight included "
            "(simulated: divided by the time scale). fcfs / fair: how much sooner the canary's token comes. "
            "A's first token: when tenant A's (last) prompt got its first token, the cost of fairness to A.", "",
            "![fairness](fairness.png)"]
    md = provenance.write_markdown(args.out, "fairness", "Tenant fairness: short requests beside long prefills",
                                   header, body)
    console.print(f"wrote {provenance.rel(png)} and {provenance.rel(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
