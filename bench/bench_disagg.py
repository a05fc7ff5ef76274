"""Prefill/decode disaggregation on agent traffic: colocated vs always-remote vs conditional.

Recorded sessions (data/sessions) are replayed through a real gateway in front of two simulated
replicas (H200 + 8B cost model) on loopback gRPC, with ``--time-scale`` > 0: each engine step
sleeps its modelled duration (scaled), so requests really queue behind each other's prefills.
At each ``--load`` level (sessions at once) every slot replays two sessions back to back (first
``--max-turns`` turns of each), so new sessions' long first prompts arrive while other sessions
decode their short appends.

Three deployments, the same two replicas' worth of GPUs:
- colocated: 2 x ``--role both`` (every prompt prefilled where it decodes);
- always-remote: 1 prefill + 1 decode, ``--max-local-prefill-length 0`` and no queue bound;
- conditional: 1 prefill + 1 decode, Dynamo's rule (``--max-local-prefill-length``, default 1024,
  ``--max-prefill-queue``, default 4).

Per turn: TTFT = the client's wall time to the first output event / time scale (virtual seconds:
queueing, the remote prefill, the KV pull and the first decode step included); TPOT = the decode
replica's own decode time / (output tokens - 1), on its virtual clock (so a prefill chunk batched
with the decode steps shows up in it, CPU noise does not). Goodput = turns meeting both the TTFT and
the TPOT objective per virtual second of the run; DistServe's goodput, the highest load level at
which 90 % of turns meet both, is reported per deployment. The KV pull between replicas is not priced by
the simulated engine (it moves only block ids), so remote prefill is slightly flattered here.

Run: .venv/bin/python bench/bench_disagg.py [--quick] [--time-scale 1] [--out DIR]
Writes disagg.md + disagg.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
import grpc  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common import grpc_server  # noqa: E402
from loopwire.common.auth import Authenticator  # noqa: E402
from loopwire.common.recorded import RecordedSession, load_session, user_item  # noqa: E402
from loopwire.gateway.disagg import DEFAULT_MAX_LOCAL_PREFILL_LENGTH, DEFAULT_MAX_PREFILL_QUEUE, DisaggPolicy  # noqa: E402
from loopwire.gateway.factory import start_gateway  # noqa: E402
from loopwire.gateway.router import Router  # noqa: E402
from loopwire.gateway.service import GatewayConfig  # noqa: E402
from loopwire.inference.server import EngineOptions, add_servicer, build_engine  # noqa: E402
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console(width=140)
GPU, PARAMS = "h200", "8b"


@dataclass
class Deployment:
    name: str
    roles: tuple[str, str]
    policy: DisaggPolicy


@dataclass
class Turn:
    ttft_s: float
    tpot_s: float | None  # None: one output token, no decode step
    input_tokens: int
    uncached_tokens: int


@dataclass
class Result:
    deployment: Deployment
    concurrency: int
    turns: list[Turn] = field(default_factory=list)
    virtual_s: float = 0.0
    remote: int = 0
    local_long: int = 0
    failed: int = 0


def deployments(threshold: int, bound: int) -> list[Deployment]:
    return [
        Deployment("colocated (2 x both)", ("both", "both"), DisaggPolicy(threshold, bound)),
        Deployment("always-remote (1 P + 1 D)", ("prefill", "decode"), DisaggPolicy(0, 1 << 30)),
        Deployment("conditional (1 P + 1 D)", ("prefill", "decode"), DisaggPolicy(threshold, bound)),
    ]


async def start(dep: Deployment, time_scale: float) -> tuple[gateway_pb2_grpc.GatewayServiceStub, Router, list]:
    closers: list = []
    addresses: list[str] = []
    for i, role in enumerate(dep.roles):
        engine = build_engine(EngineOptions(engine="simulated", replica_id=f"{role}-{i}", role=role,
                                            time_scale=time_scale, max_output_tokens=8192, gpu=GPU,
                                            model_params=PARAMS))
        server = grpc_server.make_server()
        # A decode replica imports KV only from its --peers: the replicas started before it.
        add_servicer(server, engine, role, "", frozenset(addresses))
        port = server.add_insecure_port("127.0.0.1:0")
        await engine.start()
        await server.start()
        addresses.append(f"127.0.0.1:{port}")
        closers += [engine.close, lambda s=server: s.stop(0)]
    gateway = await start_gateway(addresses, poll_interval_s=0.1, disagg=dep.policy, authenticator=Authenticator.open(),
                                  config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    closers.append(gateway.close)
    return gateway.stub, gateway.router, closers


async def replay(stub: gateway_pb2_grpc.GatewayServiceStub, session: RecordedSession, tag: str, max_turns: int,
                 time_scale: float, out: list[Turn]) -> None:
    """One recorded session, turn by turn, as a harness drives it (stateful appends)."""
    call = stub.Converse()
    items = [user_item(f"{tag}: {session.task}")]  # the tag keeps sessions from sharing a whole prompt
    new_items = list(items)
    previous = ""
    for turn in session.turns[:max_turns]:
        request = gateway_pb2.CreateResponse(
            replay=common_pb2.ReplayOutput(text=turn.text, function_calls=turn.calls),
            safety_mode=gateway_pb2.SAFETY_MODE_OFF,
            sampling=common_pb2.SamplingParams(speculative_decoding=False))
        if previous:
            request.previous_response_id = previous
            request.input.extend(new_items)
        else:
            request.instructions = session.instructions
            request.tools.extend(session.tools)
            request.input.extend(items)
        sent = time.perf_counter()
        await call.write(gateway_pb2.ConverseRequest(create_response=request))
        first = 0.0
        while True:
            event = await call.read()
            if event is grpc.aio.EOF:
                raise RuntimeError("gateway closed the stream")
            kind = event.WhichOneof("event")
            if not first and kind in ("text_delta", "tool_call_started", "tool_call_delta"):
                first = time.perf_counter()
            if kind == "failed":
                raise RuntimeError(f"response failed: {event.failed.error}")
            if kind == "completed":
                break
        done = event.completed
        ttft = ((first or time.perf_counter()) - sent) / time_scale
        n = done.usage.output_tokens
        tpot = done.timings.decode_us / 1e6 / (n - 1) if n > 1 else None
        out.append(Turn(ttft, tpot, done.usage.input_tokens, done.usage.input_tokens - done.usage.cached_input_tokens))
        previous = event.response_id
        new_items = list(turn.followups)
        items += [*done.output, *new_items]
    await call.done_writing()


async def run(dep: Deployment, sessions: list[RecordedSession], n_sessions: int, concurrency: int, max_turns: int,
              time_scale: float) -> Result:
    stub, router, closers = await start(dep, time_scale)
    result = Result(dep, concurrency)
    queue = list(range(n_sessions))

    async def slot() -> None:
        while queue:
            i = queue.pop(0)
            try:
                await replay(stub, sessions[i % len(sessions)], f"session {i}", max_turns, time_scale, result.turns)
            except RuntimeError as e:
                result.failed += 1
                console.print(f"[red]{dep.name}: session {i}: {e}")

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(slot() for _ in range(concurrency)))
        result.virtual_s = (time.perf_counter() - t0) / time_scale
    finally:
        result.remote, result.local_long = router.disagg.remote, router.disagg.local_long
        for close in reversed(closers):
            await close()
    return result


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def report(results: list[Result], slo_ttft: float, slo_tpot: float, title: str) -> Table:
    table = Table(title=title)
    for col in ("sessions at once", "deployment", "turns", "remote prefills", "TTFT p50 s", "TTFT p99 s", "TPOT p50 ms", "TPOT p99 ms",
                "SLO met", "goodput turns/s", "throughput turns/s"):
        table.add_column(col, justify="left" if col == "deployment" else "right")
    results = sorted(results, key=lambda r: r.concurrency)
    for r in results:
        ttft = [t.ttft_s for t in r.turns]
        tpot = [t.tpot_s for t in r.turns if t.tpot_s is not None]
        met = attainment(r, slo_ttft, slo_tpot)
        table.add_row(str(r.concurrency), r.deployment.name, str(len(r.turns)), f"{r.remote}", f"{pct(ttft, 0.5):.2f}",
                      f"{pct(ttft, 0.99):.2f}", f"{pct(tpot, 0.5) * 1e3:.1f}", f"{pct(tpot, 0.99) * 1e3:.1f}",
                      f"{met:.0%}", f"{goodput(r, slo_ttft, slo_tpot):.3f}",
                      f"{len(r.turns) / r.virtual_s:.3f}")
    return table


SWEEP_TPOT_MS = (6, 7, 8, 10, 15, 25)
ATTAINMENT = 0.9  # DistServe's goodput: the highest load at which this share of requests meets both objectives


def attainment(r: Result, slo_ttft: float, slo_tpot: float) -> float:
    return goodput(r, slo_ttft, slo_tpot) * r.virtual_s / max(1, len(r.turns))


def capacity(results: list[Result], slo_ttft: float, slo_tpot: float) -> Table:
    """Per deployment: the highest load level with >= 90 % attainment, and its turns/s (DistServe's goodput)."""
    table = Table(title=f"Goodput as DistServe defines it: the highest load with >= {ATTAINMENT:.0%} of turns "
                        f"meeting TTFT <= {slo_ttft:g} s and TPOT <= {slo_tpot * 1e3:g} ms")
    for col in ("deployment", "attainment by sessions at once", "highest load meeting it", "turns/s there"):
        table.add_column(col, justify="left" if col == "deployment" else "right")
    names = list(dict.fromkeys(r.deployment.name for r in results))
    for name in names:
        rows = sorted((r for r in results if r.deployment.name == name), key=lambda r: r.concurrency)
        ok = [r for r in rows if attainment(r, slo_ttft, slo_tpot) >= ATTAINMENT]
        best = ok[-1] if ok else None
        table.add_row(name, ", ".join(f"{r.concurrency}: {attainment(r, slo_ttft, slo_tpot):.0%}" for r in rows),
                      str(best.concurrency) if best else "none",
                      f"{len(best.turns) / best.virtual_s:.2f}" if best else "0")
    return table


def goodput(r: Result, slo_ttft: float, slo_tpot: float) -> float:
    good = sum(1 for t in r.turns if t.ttft_s <= slo_ttft and (t.tpot_s or 0.0) <= slo_tpot)
    return good / r.virtual_s


def sweep(results: list[Result], slo_ttft: float) -> Table:
    """Goodput as the TPOT objective tightens: where disaggregation's steadier decode starts to pay."""
    top = max(r.concurrency for r in results)
    results = [r for r in results if r.concurrency == top]
    table = Table(title=f"Turns/s meeting both objectives by TPOT objective, TTFT <= {slo_ttft:g} s, "
                        f"{top} sessions at once")
    table.add_column("deployment")
    for ms in SWEEP_TPOT_MS:
        table.add_column(f"TPOT <= {ms} ms", justify="right")
    for r in results:
        table.add_row(r.deployment.name, *(f"{goodput(r, slo_ttft, ms / 1e3):.2f}" for ms in SWEEP_TPOT_MS))
    return table


def plot(all_results: list[Result], slo_ttft: float, slo_tpot: float, out: Path, data: str) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    top = max(r.concurrency for r in all_results)
    results = [r for r in all_results if r.concurrency == top]
    for r in results:
        ttft = sorted(t.ttft_s for t in r.turns)
        tpot = sorted(t.tpot_s * 1e3 for t in r.turns if t.tpot_s is not None)
        axes[0].plot(ttft, [i / len(ttft) for i in range(1, len(ttft) + 1)], label=r.deployment.name)
        axes[1].plot(tpot, [i / len(tpot) for i in range(1, len(tpot) + 1)], label=r.deployment.name)
    axes[0].axvline(slo_ttft, color="0.5", ls="--", lw=1)
    axes[1].axvline(slo_tpot * 1e3, color="0.5", ls="--", lw=1)
    axes[0].set(xscale="log", xlabel="TTFT (virtual s)", ylabel="fraction of turns")
    axes[1].set(xlabel="TPOT (virtual ms)")
    for name in dict.fromkeys(r.deployment.name for r in all_results):
        rows = sorted((r for r in all_results if r.deployment.name == name), key=lambda r: r.concurrency)
        axes[2].plot([r.concurrency for r in rows], [attainment(r, slo_ttft, slo_tpot) for r in rows], "o-",
                     label=name)
    axes[2].axhline(ATTAINMENT, color="0.5", ls="--", lw=1)
    axes[2].set(xlabel="sessions at once", ylabel="share of turns meeting both objectives", ylim=(0, 1.02),
                title=f"SLO attainment (TTFT <= {slo_ttft:g} s, TPOT <= {slo_tpot * 1e3:g} ms)")
    axes[0].set_title(f"Time to first token ({top} sessions at once)")
    axes[1].set_title(f"Time per output token, decode replica ({top} at once)")
    axes[0].legend(fontsize=8)
    provenance.stamp(fig, data)
    return provenance.save_figure(fig, out, "disagg")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load", default="4,8,16,24",
                        help="load levels: sessions at once, comma-separated; each replays twice as many sessions "
                             "(%(default)s)")
    parser.add_argument("--max-turns", type=int, default=8, help="turns of each session (%(default)s)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="real seconds slept per modelled second (> 0: queueing is real) (%(default)s)")
    parser.add_argument("--max-local-prefill-length", type=int, default=DEFAULT_MAX_LOCAL_PREFILL_LENGTH)
    parser.add_argument("--max-prefill-queue", type=int, default=DEFAULT_MAX_PREFILL_QUEUE)
    parser.add_argument("--slo-ttft", type=float, default=0.5, help="TTFT objective, seconds (%(default)s)")
    parser.add_argument("--slo-tpot", type=float, default=0.008, help="TPOT objective, seconds (%(default)s)")
    parser.add_argument("--data", default=str(provenance.DATA_SESSIONS), help="recorded sessions")
    parser.add_argument("--quick", action="store_true", help="one load level (4 at once), 4 turns each")
    provenance.add_out_argument(parser)
    args = parser.parse_args(argv[1:])
    if args.time_scale <= 0:
        parser.error("--time-scale must be > 0: without sleeping the modelled time nothing queues")
    loads = [int(x) for x in args.load.split(",") if x.strip()]
    if args.quick:
        loads, args.max_turns = [4], 4
    logging.getLogger("loopwire").setLevel(logging.ERROR)
    paths = [p for p in provenance.session_files(args.data)]
    loaded = []
    for p in paths:
        try:
            loaded.append((p, load_session(p)))
        except ValueError:
            continue
    sessions = [s for _, s in loaded]
    results = []
    for load in loads:
        for dep in deployments(args.max_local_prefill_length, args.max_prefill_queue):
            console.print(f"{load} sessions at once: {dep.name} ...")
            results.append(asyncio.run(run(dep, sessions, 2 * load, load, args.max_turns, args.time_scale)))
    title = (f"Agent traffic, {args.max_turns} turns per session, 2 sessions per slot, simulated "
             f"{GPU.upper()} + {PARAMS.upper()}, time scale {args.time_scale:g}; SLO: TTFT <= {args.slo_ttft:g} s "
             f"and TPOT <= {args.slo_tpot * 1e3:g} ms")
    table = report(results, args.slo_ttft, args.slo_tpot, title)
    console.print(table)
    cap = capacity(results, args.slo_ttft, args.slo_tpot)
    console.print(cap)
    swept = sweep(results, args.slo_ttft)
    console.print(swept)
    n_sessions = 2 * max(loads)
    used = [(p, min(len(s.turns), args.max_turns)) for p, s in loaded][:n_sessions]
    data = provenance.short_data(used)
    colocated = [r for r in results if r.deployment.roles == ("both", "both")]
    first = [t for r in colocated for t in r.turns]
    long_first = sum(1 for t in first if t.uncached_tokens > args.max_local_prefill_length)
    kept = sum(r.local_long for r in results if r.deployment.name.startswith("conditional"))
    notes = [f"prompts with more than {args.max_local_prefill_length} uncached tokens (colocated runs): "
             f"{long_first} of {len(first)} turns; conditional kept {kept} long prompt(s) local "
             "because the prefill queue was full",
             "TTFT: client wall time / time scale (virtual s); TPOT: decode replica's virtual clock",
             "the simulated engine does not price the KV pull between replicas (block ids only)"]
    header = provenance.provenance(
        provenance.describe_sessions(used, note=f"load levels {args.load if not args.quick else '4'} sessions at "
                                                "once, twice as many sessions per level"),
        engine=f"simulated, `--time-scale {args.time_scale:g}` (modelled step time slept, scaled); gateway, replicas "
               "and clients in one process on loopback gRPC",
        cost_model=provenance.cost_model(GPU, PARAMS), notes=notes)
    png = plot(results, args.slo_ttft, args.slo_tpot, args.out, data)
    md = provenance.write_markdown(args.out, "disagg", "Prefill/decode disaggregation on agent traffic", header,
                                   [*provenance.table_markdown(table), "", *provenance.table_markdown(cap), "",
                                    *provenance.table_markdown(swept), "",
                                    f"![disagg]({png.name})"])
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 1 if any(r.failed for r in results) else 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: main(sys.argv)))
