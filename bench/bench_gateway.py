"""Gateway benchmark: what the stateful protocol, concurrent safety and cache-aware
routing save, each measured against the naive way through the same binary.

1. Per turn of real recorded sessions: stateful deltas (``previous_response_id``) vs a
   stateless full resend (``--stateless``): bytes received, tokens tokenized, gateway CPU.
2. TTFT with the safety input check serial vs concurrent with prefill (a guard-model
   classifier served by a simulated replica, both running in modelled real time).
3. Routing over 4 simulated replicas with 32 concurrent sessions: prefix-cache hit rate
   and load imbalance (max/mean prefill tokens) for cache-aware, round-robin and
   least-loaded, with sticky streams and with a new stream every turn.

Run: .venv/bin/python bench/bench_gateway.py [--traces DIR] [--quick]
Outputs are replays of recorded sessions (labelled as such); the engines are simulated.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common import grpc_server  # noqa: E402
from loopwire.common.auth import Authenticator  # noqa: E402
from loopwire.common.model_def import ModelDefinition  # noqa: E402
from loopwire.common.recorded import RecordedSession, load_session, user_item  # noqa: E402
from loopwire.gateway.router import Router  # noqa: E402
from loopwire.gateway.safety import GuardModelClassifier, LexiconClassifier, SafetyClassifier  # noqa: E402
from loopwire.gateway.service import GatewayConfig, GatewayServicer  # noqa: E402
from loopwire.inference.server import EngineOptions, add_servicer, build_engine  # noqa: E402
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
console = Console(width=140)


# -- servers ------------------------------------------------------------------------------


@dataclass
class Mesh:
    stub: gateway_pb2_grpc.GatewayServiceStub
    gateway: GatewayServicer
    replica_addresses: list[str]
    closers: list = field(default_factory=list)

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


async def start_replicas(
    n: int, time_scale: float, kv_blocks: int = 0, prefix: str = "sim", gpu: str = "h200", params: str = "8b"
) -> tuple[list[str], list]:
    addresses, closers = [], []
    for i in range(n):
        engine = build_engine(EngineOptions(engine="simulated", replica_id=f"{prefix}-{i}", time_scale=time_scale,
                                            kv_blocks=kv_blocks, max_output_tokens=8192, gpu=gpu, model_params=params))
        server = grpc_server.make_server()
        add_servicer(server, engine)
        port = server.add_insecure_port("127.0.0.1:0")
        await engine.start()
        await server.start()
        addresses.append(f"127.0.0.1:{port}")
        closers += [engine.close, _stopper(server)]
    return addresses, closers


def _stopper(server: grpc.aio.Server) -> Callable[[], Awaitable[None]]:
    return lambda: server.stop(0)


async def start_mesh(
    replicas: int = 1,
    time_scale: float = 0.0,
    kv_blocks: int = 0,
    routing: str = "cache-aware",
    config: GatewayConfig | None = None,
    classifier: SafetyClassifier | None = None,
    gpu: str = "h200",
    params: str = "8b",
) -> Mesh:
    addresses, closers = await start_replicas(replicas, time_scale, kv_blocks, gpu=gpu, params=params)
    router = Router(addresses, routing, poll_interval_s=0.1)
    await router.start()
    model = ModelDefinition.from_proto(await router.fetch_model())  # as the gateway server starts
    gateway = GatewayServicer(model, router, Authenticator.open(), classifier or LexiconClassifier(),
                              config or GatewayConfig())
    server = grpc_server.make_server()
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(gateway, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc_server.insecure_channel(f"127.0.0.1:{port}")
    closers += [router.close, lambda: server.stop(0), channel.close]
    return Mesh(gateway_pb2_grpc.GatewayServiceStub(channel), gateway, addresses, closers)


# -- a recorded session through the gateway --------------------------------------------------


@dataclass
class TurnResult:
    turn: int
    bytes_received: int
    tokens_tokenized: int
    gateway_us: int
    ttft_s: float
    replica: str
    input_tokens: int
    cached_tokens: int


async def read_response(call: grpc.aio.StreamStreamCall, sent_at: float) -> tuple[list, float]:
    events, ttft = [], 0.0
    while True:
        event = await call.read()
        if event is grpc.aio.EOF:
            raise RuntimeError("gateway closed the stream")
        kind = event.WhichOneof("event")
        if not ttft and kind in ("text_delta", "tool_call_started"):
            ttft = time.perf_counter() - sent_at
        events.append(event)
        if kind == "failed":
            raise RuntimeError(f"response failed: {event.failed.error}")
        if kind == "completed":
            return events, ttft


async def replay_session(
    stub: gateway_pb2_grpc.GatewayServiceStub,
    session: RecordedSession,
    *,
    stateless: bool = False,
    max_turns: int = 0,
    task_prefix: str = "",
    new_stream_per_turn: bool = False,
    safety_mode: gateway_pb2.SafetyMode.ValueType = gateway_pb2.SAFETY_MODE_OFF,
    progress: Callable[[], None] | None = None,
) -> list[TurnResult]:
    """Drive a recorded session turn by turn, the way a harness would."""
    turns = session.turns[:max_turns] if max_turns else session.turns
    call = stub.Converse()
    items = [user_item(task_prefix + session.task)]
    new_items = list(items)
    previous = ""
    results = []
    for i, turn in enumerate(turns):
        request = gateway_pb2.CreateResponse(
            replay=common_pb2.ReplayOutput(text=turn.text, function_calls=turn.calls), safety_mode=safety_mode,
            # The replayed output is fixed; drafting it would only spend the simulated engine's CPU.
            sampling=common_pb2.SamplingParams(speculative_decoding=False))
        if stateless or not previous:
            request.instructions = session.instructions
            request.tools.extend(session.tools)
            request.input.extend(items)
            request.no_store = stateless
        else:
            request.previous_response_id = previous
            request.input.extend(new_items)
        if new_stream_per_turn and i:
            await call.done_writing()
            call = stub.Converse()
        sent = time.perf_counter()
        await call.write(gateway_pb2.ConverseRequest(create_response=request))
        events, ttft = await read_response(call, sent)
        done = events[-1].completed
        previous = events[0].response_id
        replica = next((e.created.replica_id for e in events if e.WhichOneof("event") == "created"), "")
        t = done.timings
        results.append(TurnResult(i, t.bytes_received, t.tokens_tokenized, t.gateway_overhead_us, ttft, replica,
                                  done.usage.input_tokens, done.usage.cached_input_tokens))
        new_items = list(turn.followups)
        items += [*done.output, *new_items]
        if progress:
            progress()
    await call.done_writing()
    return results


def load_sessions(directory: Path) -> list[RecordedSession]:
    sessions = []
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path.suffix in (".json", ".traj") and not path.name.startswith("LICENSE"):
            try:
                sessions.append(load_session(path))
            except ValueError as e:
                console.print(f"[yellow]skipping {path.name}: {e}")
    return sessions


# -- 1. stateful vs stateless -------------------------------------------------------------


async def bench_protocol(sessions: list[RecordedSession], max_turns: int) -> dict[str, list[list[TurnResult]]]:
    results: dict[str, list[list[TurnResult]]] = {}
    total = sum(len(s.turns[:max_turns] if max_turns else s.turns) for s in sessions) * 2
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("protocol: stateful vs stateless", total=total)
        for name, stateless in (("stateful", False), ("stateless", True)):
            mesh = await start_mesh(config=GatewayConfig(stateless=stateless))
            try:
                results[name] = [
                    await replay_session(mesh.stub, s, stateless=stateless, max_turns=max_turns,
                                         progress=lambda: progress.advance(task))
                    for s in sessions
                ]
            finally:
                await mesh.close()
    return results


def report_protocol(results: dict[str, list[list[TurnResult]]]) -> None:
    table = Table(title="Per-turn gateway work over recorded sessions (replayed): stateful deltas vs stateless resend")
    for col in ("way", "turns", "bytes received", "tokens tokenized", "gateway CPU ms", "CPU µs/turn (last 10%)"):
        table.add_column(col, justify="right")
    totals = {}
    for name, runs in results.items():
        flat = [t for run in runs for t in run]
        tail = [t for run in runs for t in run[int(len(run) * 0.9):]]
        totals[name] = (sum(t.bytes_received for t in flat), sum(t.tokens_tokenized for t in flat),
                        sum(t.gateway_us for t in flat))
        table.add_row(name, str(len(flat)), f"{totals[name][0]:,}", f"{totals[name][1]:,}",
                      f"{totals[name][2] / 1000:,.1f}", f"{statistics.mean(t.gateway_us for t in tail):,.0f}")
    a, b = totals["stateless"], totals["stateful"]
    table.add_row("stateless / stateful", "", f"{a[0] / max(1, b[0]):.1f}x", f"{a[1] / max(1, b[1]):.1f}x",
                  f"{a[2] / max(1, b[2]):.1f}x", "", style="bold")
    console.print(table)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for name, runs in results.items():
        longest = max(len(r) for r in runs)
        for ax, attr, label in zip(axes, ("bytes_received", "tokens_tokenized", "gateway_us"),
                                   ("bytes received", "tokens tokenized", "gateway CPU (µs)"), strict=True):
            means = [statistics.mean(getattr(r[i], attr) for r in runs if len(r) > i) for i in range(longest)]
            ax.plot(range(longest), means, label=name)
            ax.set_xlabel("turn index")
            ax.set_ylabel(label + " per turn (mean over sessions)")
            ax.set_yscale("log")
    axes[0].legend()
    fig.suptitle("Gateway work per turn: stateful deltas vs stateless full resend (recorded sessions, replayed)")
    fig.tight_layout()
    fig.savefig(RESULTS / "gateway.png", dpi=110)
    plt.close(fig)


# -- 2. safety serial vs concurrent ----------------------------------------------------------


async def bench_safety(sessions: list[RecordedSession], turns: int) -> dict[str, list[float]]:
    ttfts: dict[str, list[float]] = {}
    # The guard: an 8B Llama Guard-sized model on an H200; the served model: 70B on a B200.
    guard_addresses, guard_closers = await start_replicas(1, time_scale=1.0, prefix="guard")
    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("safety: serial vs concurrent", total=2 * len(sessions) * turns)
            for name, serial in (("serial", True), ("concurrent", False)):
                classifier = GuardModelClassifier(guard_addresses[0], max_tokens=2)
                mesh = await start_mesh(time_scale=1.0, classifier=classifier, gpu="b200", params="70b",
                                        config=GatewayConfig(safety_serial=serial))
                try:
                    ttfts[name] = []
                    for s in sessions:
                        run = await replay_session(mesh.stub, s, max_turns=turns,
                                                   safety_mode=gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT,
                                                   task_prefix=f"[{name}] ", progress=lambda: progress.advance(task))
                        ttfts[name] += [t.ttft_s for t in run]
                finally:
                    await mesh.close()
                    await classifier.close()
    finally:
        for close in reversed(guard_closers):
            await close()
    return ttfts


def report_safety(ttfts: dict[str, list[float]]) -> None:
    table = Table(title="TTFT with a guard-model input check (simulated: 70B on B200 serving, 8B guard on H200; "
                        "modelled real time)")
    for col in ("safety check", "turns", "TTFT mean ms", "TTFT p50 ms", "TTFT p90 ms"):
        table.add_column(col, justify="right")
    for name, values in ttfts.items():
        values = sorted(values)
        table.add_row(name, str(len(values)), f"{statistics.mean(values) * 1000:.1f}",
                      f"{values[len(values) // 2] * 1000:.1f}", f"{values[int(len(values) * 0.9)] * 1000:.1f}")
    s, c = statistics.mean(ttfts["serial"]), statistics.mean(ttfts["concurrent"])
    table.add_row("serial / concurrent", "", f"{s / c:.2f}x", "", "", style="bold")
    console.print(table)


# -- 3. routing -----------------------------------------------------------------------------


async def bench_routing(sessions: list[RecordedSession], n_sessions: int, turns: int, time_scale: float) -> list[tuple]:
    rows = []
    configs = [(p, sticky) for sticky in (True, False) for p in ("cache-aware", "round-robin", "least-loaded")]
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("routing", total=len(configs) * n_sessions * turns)
        for policy, sticky in configs:
            mesh = await start_mesh(replicas=4, routing=policy, time_scale=time_scale)
            try:
                runs = await asyncio.gather(*(
                    replay_session(mesh.stub, sessions[i % len(sessions)], max_turns=turns,
                                   task_prefix=f"session {i}: ", new_stream_per_turn=not sticky,
                                   progress=lambda: progress.advance(task))
                    for i in range(n_sessions)
                ))
            finally:
                await mesh.close()
            flat = [t for run in runs for t in run]
            prefill: defaultdict[str, int] = defaultdict(int)
            for t in flat:
                prefill[t.replica] += t.input_tokens - t.cached_tokens
            loads = [prefill.get(f"sim-{i}", 0) for i in range(4)]
            hit = sum(t.cached_tokens for t in flat) / max(1, sum(t.input_tokens for t in flat))
            rows.append((policy, "sticky stream" if sticky else "new stream per turn", hit,
                         max(loads) / max(1e-9, statistics.mean(loads)), sum(loads),
                         statistics.mean(t.ttft_s for t in flat)))
    return rows


def report_routing(rows: list[tuple], n_sessions: int) -> None:
    table = Table(title=f"Routing over 4 simulated replicas, {n_sessions} concurrent replayed sessions")
    for col in ("policy", "streams", "prefix-cache hit rate", "load imbalance (max/mean prefill)", "tokens prefilled",
                "TTFT mean ms"):
        table.add_column(col, justify="right")
    for policy, mode, hit, imbalance, prefilled, ttft in rows:
        table.add_row(policy, mode, f"{hit:.1%}", f"{imbalance:.2f}", f"{prefilled:,}", f"{ttft * 1000:.1f}")
    console.print(table)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{p}\n{m}" for p, m, *_ in rows]
    axes[0].bar(labels, [r[2] for r in rows])
    axes[0].set_ylabel("prefix-cache hit rate")
    axes[1].bar(labels, [r[3] for r in rows])
    axes[1].set_ylabel("load imbalance (max/mean)")
    for ax in axes:
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "gateway_routing.png", dpi=110)
    plt.close(fig)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=ROOT / "examples" / "sessions")
    parser.add_argument("--quick", action="store_true", help="fewer turns and sessions")
    parser.add_argument("--max-turns", type=int, default=0, help="turns per session in part 1 (0: all)")
    parser.add_argument("--sessions", type=int, default=32, help="concurrent sessions in the routing part")
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="routing part: real seconds per modelled second of the simulated replicas")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    RESULTS.mkdir(parents=True, exist_ok=True)
    sessions = load_sessions(args.traces)
    if not sessions:
        raise SystemExit(f"no recorded sessions under {args.traces}")
    console.print(f"{len(sessions)} recorded sessions from {args.traces.name}/ (outputs replayed; engines simulated)")
    max_turns = args.max_turns or (10 if args.quick else 0)
    report_protocol(await bench_protocol(sessions, max_turns))
    report_safety(await bench_safety(sessions[:3], 2 if args.quick else 4))
    n_sessions = 8 if args.quick else args.sessions
    report_routing(await bench_routing(sessions, n_sessions, 4 if args.quick else 8, args.time_scale), n_sessions)
    console.print(f"plots: {RESULTS.relative_to(ROOT)}/gateway.png, gateway_routing.png")


if __name__ == "__main__":
    asyncio.run(main())
