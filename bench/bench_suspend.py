"""Resume after an approval wait: how long from the decision to the next token, with and without
the KV hold, under cache pressure from the sessions that ran meanwhile.

A real mesh (``loopwire.mesh.start_mesh``: inference, gateway and harness, each its own process)
on the simulated engine (the real scheduler and KV block manager, each step slept for its roofline
cost on an H200 at time scale 1, so a prefill takes the time a real one would). Each trial:

1. a waiting session starts with a long context (``--context`` tokens of instructions) and, in its
   first turn, calls ``shell`` under an ``APPROVAL_MODE_ALWAYS`` policy: the run suspends and the
   harness asks the gateway to hold its KV (``HoldKv`` -> ``HoldPrefix``), unless the harness runs
   with ``--approval-retention 0``;
2. ``--others`` other sessions, each with its own context as long, run to completion
   (``--concurrency`` at a time); together they need several times the replica's KV
   (``--kv-contexts`` contexts' worth of blocks), so without a hold the waiting session's blocks are
   evicted (least recently used first);
3. the approval decision is sent (a new Run stream with ``RunRequest(approval=...)``); the clock
   starts as the request is written and stops at the first ``RunTextDelta`` of the next turn (the
   resumed turn's recorded answer is text). Between the two: the harness releases the hold, runs
   ``true`` in the sandbox and sends the next turn; the gateway and the engine then prefill what the
   cache no longer has.

Outputs are forced by the replay script (``ReplayScript``, the real tools run), so every
configuration does the same work and only the caching differs. The prompt tokens the engine
computed on resume are ``input_tokens - cached_input_tokens`` of the resumed turn (``TurnCompleted``).

Run: .venv/bin/python bench/bench_suspend.py [--trials N] [--quick] [--out DIR]
Writes suspend.md and suspend.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common.grpc_server import service_channel  # noqa: E402
from loopwire.inference.cost_model import CostModel  # noqa: E402
from loopwire.v1 import common_pb2, harness_pb2, harness_pb2_grpc  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=160)
GPU, PARAMS, TIME_SCALE, BLOCK = "h200", "8b", 1.0, 16
SIM_ARGS = ["--engine", "simulated", "--model", "dummy:0", "--gpu", GPU, "--model-params", PARAMS,
            "--time-scale", f"{TIME_SCALE:g}", "--block-size", str(BLOCK)]
Mode = harness_pb2.ApprovalMode
# Words that are one cl100k token each after a space: N words of instructions are N prompt tokens.
WORDS = ("alpha delta echo golf hotel india mike november uniform whiskey red green blue amber violet copper "
         "silver iron tin lead zinc river stone cloud field forest harbor bridge tower").split()
OVERHEAD = 96  # the chat template, the tool schemas and the task, about (the table shows the prompt)


@dataclass(frozen=True)
class Config:
    label: str
    hold: bool
    host_tier: bool
    extra: bool = False  # beyond the three asked-for configurations


CONFIGS = [
    Config("(a) no KV hold", hold=False, host_tier=False),
    Config("(b) KV hold (default)", hold=True, host_tier=False),
    Config("(c) KV hold + host tier", hold=True, host_tier=True),
    Config("(d) host tier, no hold", hold=False, host_tier=True, extra=True),
]


@dataclass
class Trial:
    resume_s: float  # decision written -> first RunTextDelta of the resumed turn (client clock)
    harness_ttft_s: float  # the resumed turn's TurnProfile.harness_ttft_us
    input_tokens: int
    cached_tokens: int
    held_blocks: int  # what the hold diagnostic said (0: no hold asked, or none granted)
    first_ttft_s: float  # the waiting session's first turn (cold prefill), for scale


@dataclass
class Result:
    config: Config
    flags: dict[str, list[str]]
    trials: list[Trial] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def text_of(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(tokens))


def flags(config: Config, kv_blocks: int, host_bytes: int) -> dict[str, list[str]]:
    inference = [*SIM_ARGS, "--kv-blocks", str(kv_blocks)]
    if config.host_tier:
        inference += ["--host-kv-bytes", str(host_bytes)]
    return {"inference": inference, "harness": [] if config.hold else ["--approval-retention", "0"]}


def waiting_task(rng: random.Random, context: int) -> harness_pb2.StartTask:
    script = harness_pb2.ReplayScript(source="bench_suspend", run_tools=True, turns=[
        harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(
            text="Running the check.", function_calls=[common_pb2.FunctionCall(
                call_id="c1", name="shell", arguments='{"command": "true"}')])),
        harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(text="The check passed; done.")),
    ])
    return harness_pb2.StartTask(
        task="Run the check, then report.", instructions=text_of(rng, context), replay=script,
        approval_policy=harness_pb2.ApprovalPolicy(default_mode=Mode.APPROVAL_MODE_ON_REQUEST,
                                                   per_tool={"shell": Mode.APPROVAL_MODE_ALWAYS}))


def other_task(rng: random.Random, context: int) -> harness_pb2.StartTask:
    script = harness_pb2.ReplayScript(source="bench_suspend", turns=[
        harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(text="Nothing to do here; " * 8))])
    return harness_pb2.StartTask(task="Summarize.", instructions=text_of(rng, context), replay=script)


async def stream(stub: harness_pb2_grpc.HarnessServiceStub, request: harness_pb2.RunRequest, metadata: tuple,
                 on_event: object = None) -> list[harness_pb2.RunResponse]:
    events = []
    async for event in stub.Run(iter([request]), metadata=metadata, timeout=300):
        events.append(event)
        if on_event:
            on_event(event)  # type: ignore[operator]
        if event.WhichOneof("event") in ("completed", "failed"):
            break
    return events


def failure(events: list[harness_pb2.RunResponse]) -> str:
    for e in events:
        if e.WhichOneof("event") == "failed":
            return e.failed.error.message
    return ""


async def trial(stub: harness_pb2_grpc.HarnessServiceStub, metadata: tuple, rng: random.Random, context: int,
                others: int, concurrency: int) -> Trial:
    events = await stream(stub, harness_pb2.RunRequest(start=waiting_task(rng, context)), metadata)
    kinds = [e.WhichOneof("event") for e in events]
    if "approval_requested" not in kinds:
        raise RuntimeError(f"the waiting session did not suspend ({failure(events) or kinds[-3:]})")
    sid = next(e.started.session_id for e in events if e.WhichOneof("event") == "started")
    approval = next(e.approval_requested for e in events if e.WhichOneof("event") == "approval_requested")
    first = next(e.turn_completed.profile for e in events if e.WhichOneof("event") == "turn_completed")
    held = 0
    for e in events:
        msg = e.diagnostic.message if e.WhichOneof("event") == "diagnostic" else ""
        if msg.startswith("KV held while waiting for approval:"):
            held = int(msg.split(":", 1)[1].split()[0])

    gate = asyncio.Semaphore(concurrency)
    tasks = [other_task(rng, context) for _ in range(others)]

    async def one(task: harness_pb2.StartTask) -> None:
        async with gate:
            done = await stream(stub, harness_pb2.RunRequest(start=task), metadata)
            if done[-1].WhichOneof("event") != "completed":
                raise RuntimeError(f"a pressure session did not complete: {failure(done)}")

    await asyncio.gather(*(one(t) for t in tasks))

    first_token: list[float] = []

    def on_event(event: harness_pb2.RunResponse) -> None:
        if event.WhichOneof("event") == "text_delta" and event.text_delta.turn == 2 and not first_token:
            first_token.append(time.perf_counter())

    decision = harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(
        session_id=sid, approval_id=approval.approval_id, approved=True))
    t0 = time.perf_counter()
    events = await stream(stub, decision, metadata, on_event)
    if events[-1].WhichOneof("event") != "completed" or not first_token:
        raise RuntimeError(f"the resumed session did not complete with text ({failure(events)})")
    resumed = [e.turn_completed.profile for e in events if e.WhichOneof("event") == "turn_completed"][-1]
    return Trial(first_token[0] - t0, resumed.harness_ttft_us / 1e6, resumed.usage.input_tokens,
                 resumed.usage.cached_input_tokens, held, first.harness_ttft_us / 1e6)


async def run_config(config: Config, args: argparse.Namespace, kv_blocks: int, host_bytes: int,
                     progress: Progress) -> Result:
    result = Result(config, flags(config, kv_blocks, host_bytes))
    task = progress.add_task(config.label, total=args.trials + 1)
    rng = random.Random(f"{args.seed}")  # the same contexts in every configuration
    with tempfile.TemporaryDirectory(prefix="loopwire-bench-") as state:
        mesh = await asyncio.to_thread(interrupts.start_mesh, Path(state), extra_args=result.flags)
        try:
            metadata = (("authorization", f"Bearer {mesh.api_key}"),)
            async with service_channel(mesh.harness) as channel:
                stub = harness_pb2_grpc.HarnessServiceStub(channel)
                for i in range(args.trials + 1):  # the first is a warm-up, not counted
                    try:
                        t = await trial(stub, metadata, rng, args.context, args.others, args.concurrency)
                        if i:
                            result.trials.append(t)
                    except Exception as e:  # noqa: BLE001 - reported in the results
                        result.failures.append(f"trial {i}: {type(e).__name__}: {e}")
                    progress.advance(task)
        finally:
            await asyncio.to_thread(interrupts.stop, mesh)
    return result


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def script_note() -> str:
    me = Path(__file__).resolve()
    digest = hashlib.sha256(me.read_bytes()).hexdigest()
    tracked = bool(provenance._git("ls-files", "--", provenance.rel(me)))
    return (f"script: {provenance.rel(me)} sha256 {digest[:12]} (full: {digest})"
            + ("" if tracked else " (not yet in the commit above: the benchmark was run before it was committed)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=12, help="waiting sessions per configuration (after a warm-up)")
    parser.add_argument("--context", type=int, default=16000, help="tokens of instructions per session")
    parser.add_argument("--others", type=int, default=6, help="sessions that run while one waits")
    parser.add_argument("--concurrency", type=int, default=2, help="of those, how many at once")
    parser.add_argument("--kv-contexts", type=float, default=3.5,
                        help="device KV capacity in contexts of --context tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="3 trials, 4000-token contexts")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.trials, args.context = 3, 4000
    kv_blocks = int(args.kv_contexts * (args.context + OVERHEAD)) // BLOCK
    cost = CostModel.named(GPU, PARAMS)
    # Room on the host for every session of a trial: nothing a device eviction sends there is dropped.
    host_bytes = (args.others + 2) * (args.context + OVERHEAD) * cost.kv_bytes_per_token
    results: list[Result] = []
    with Progress(console=console, transient=True) as progress:
        for config in CONFIGS:
            results.append(asyncio.run(run_config(config, args, kv_blocks, host_bytes, progress)))
    base = next(r for r in results if r.config.label.startswith("(a)"))
    base50, base90 = pct([t.resume_s for t in base.trials], 50), pct([t.resume_s for t in base.trials], 90)

    table = Table(title=f"Decision → first token of the resumed turn, {args.others} other sessions ran during the "
                        f"wait (simulated {GPU.upper()} Llama {PARAMS.upper()}, time scale {TIME_SCALE:g}, device "
                        f"KV {kv_blocks * BLOCK:,} tokens ≈ {args.kv_contexts:g} sessions' prompts)")
    for col in ("configuration", "trials", "decision → first token p50 / p90 ms", "(a) ÷ this p50",
                "(a) ÷ this p90", "resumed turn harness TTFT p50 / p90 ms", "prompt tokens (resumed turn)",
                "cached", "computed on resume p50 / max", "held blocks", "failed"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for r in results:
        xs = [t.resume_s for t in r.trials]
        tt = [t.harness_ttft_s for t in r.trials]
        computed = [t.input_tokens - t.cached_tokens for t in r.trials]
        p50, p90 = pct(xs, 50), pct(xs, 90)
        table.add_row(
            r.config.label + (" (extra)" if r.config.extra else ""), str(len(r.trials)),
            f"{p50 * 1e3:,.0f} / {p90 * 1e3:,.0f}", f"{base50 / p50:.2f}×" if xs else "-",
            f"{base90 / p90:.2f}×" if xs else "-", f"{pct(tt, 50) * 1e3:,.0f} / {pct(tt, 90) * 1e3:,.0f}",
            f"{statistics.fmean(t.input_tokens for t in r.trials):,.0f}" if r.trials else "-",
            f"{statistics.fmean(t.cached_tokens for t in r.trials):,.0f}" if r.trials else "-",
            f"{statistics.median(computed):,.0f} / {max(computed):,}" if computed else "-",
            f"{statistics.median(t.held_blocks for t in r.trials):,.0f}" if r.trials else "-", str(len(r.failures)))
    console.print(table)
    for r in results:
        for f in r.failures:
            console.print(f"[red]{r.config.label}: {f}[/]")

    data = (f"synthetic sessions (seed {args.seed}): each trial one waiting session and {args.others} others, "
            f"~{args.context:,} tokens of distinct instructions each; {args.trials} trials per configuration "
            "after one warm-up trial")
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    labels = [r.config.label for r in results]
    ax = axes[0]
    for i, r in enumerate(results):
        xs = [t.resume_s * 1e3 for t in r.trials]
        ax.scatter([i + (j / max(len(xs), 1) - 0.5) * 0.3 for j in range(len(xs))], xs, s=14, alpha=0.7)
        if xs:
            ax.hlines([pct(xs, 50)], i - 0.3, i + 0.3, color="black")
            ax.hlines([pct(xs, 90)], i - 0.3, i + 0.3, color="black", linestyles="dotted")
    ax.set_xticks(range(len(labels)), labels, rotation=12)
    ax.set(title="Decision → first token of the resumed turn (each trial; — p50, ··· p90)", ylabel="ms (wall clock)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, axis="y")
    ax = axes[1]
    ax.bar(labels, [statistics.fmean([t.input_tokens - t.cached_tokens for t in r.trials]) if r.trials else 0
                    for r in results], label="computed (input - cached)")
    ax.bar(labels, [statistics.fmean([t.cached_tokens for t in r.trials]) if r.trials else 0 for r in results],
           bottom=[statistics.fmean([t.input_tokens - t.cached_tokens for t in r.trials]) if r.trials else 0
                   for r in results], label="cached", color="tab:green", alpha=0.6)
    ax.tick_params(axis="x", labelrotation=12)
    ax.set(title="Prompt tokens of the resumed turn (mean)", ylabel="tokens")
    ax.legend()
    fig.suptitle(f"Resume after an approval wait under cache pressure: simulated {GPU.upper()} Llama "
                 f"{PARAMS.upper()}, device KV {kv_blocks * BLOCK:,} tokens")
    fig.tight_layout()
    provenance.stamp(fig, data)
    png = provenance.save_figure(fig, args.out, "suspend")

    flag_notes = [f"{r.config.label}: inference `{' '.join(r.flags['inference'])}`; harness "
                  f"`{' '.join(r.flags['harness']) or '(defaults: --approval-retention 900)'}`; gateway defaults"
                  for r in results]
    header = provenance.provenance(
        data,
        engine=f"simulated (`{' '.join(SIM_ARGS)}`: the real scheduler and KV block manager, step times from "
               f"the cost model slept in real time); device KV {kv_blocks:,} blocks of {BLOCK}; prefix cache on, "
               "eviction `priority` (retention priority, then least recently used)",
        cost_model=provenance.cost_model(GPU, PARAMS) + f"; host link {cost.gpu.host_link_gb_per_s:g} GB/s "
                   f"(host tier {host_bytes / 2**30:.1f} GiB where on)",
        notes=[script_note(),
               "services: inference, gateway and harness on loopback, each its own process "
               "(`loopwire.mesh.start_mesh`), a fresh mesh per configuration, trials one after another",
               f"pressure: {args.others} other sessions per trial, {args.concurrency} at a time, run to completion "
               "while the waiting session is suspended",
               *[f"flags {n}" for n in flag_notes]])
    body = [
        "Each row: the same trials (same synthetic contexts, same forced outputs) through a fresh mesh. "
        "`decision → first token` is measured by this client: from writing the `ApprovalDecision` on a new "
        "Run stream to the first `RunTextDelta` of the resumed turn; it includes the harness's resume work "
        "(load the session, release the hold, run `true` in the sandbox) besides the model call. "
        "`resumed turn harness TTFT` is the harness's own request → first output of that turn (TurnProfile). "
        "`computed on resume` is `input_tokens - cached_input_tokens` of the resumed turn, as the engine "
        "reported it. Ratios are `(a) ÷ this` of the same percentile, all measured in this run. "
        "`held blocks` is what the harness's hold diagnostic reported the gateway pinned.",
        "", *provenance.table_markdown(table), "",
        *([f"- failed: {r.config.label}: {f}" for r in results for f in r.failures] or []),
        "![suspend](suspend.png)"]
    md = provenance.write_markdown(args.out, "suspend", "Resume after an approval wait: KV hold and host tier",
                                   header, body)
    console.print(f"wrote {provenance.rel(png)} and {provenance.rel(md)}")
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
