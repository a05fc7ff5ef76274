"""Relay benchmark: how many output tokens a second one gateway process relays, and the delay
it adds to each token, with the replica, the gateway(s) and the clients each in a process of
their own (loopback gRPC), so the pieces that are not the gateway do not bound it.

A simulated replica (its own process) streams replayed outputs of ``--tokens`` tokens to 1, 16
and 64 concurrent streams, opened by a client process, each stream running ``--rounds``
measured stateful turns after one unmeasured turn. Per stream count, three paths in turn:

* direct: the clients' Generate streams straight to the replica (no gateway): the ceiling the
  replica and the clients allow, and the end-to-end delay without a gateway;
* 1 gateway: Converse streams through one gateway process;
* 2 gateways: two gateway processes on the same replica, stream i pinned to gateway i % 2
  (response ids are per gateway: a stream's continuation must reach the gateway holding it).

Two paces: paced, a 1B model on an H200 in real time (a decode step of about 1 ms: 64 streams
ask for about 60k tokens/s); unpaced, time scale 0 (the replica steps as fast as it can).

Measured per run, every figure a measurement (nothing subtracted, nothing clamped):

* tokens/s: output tokens of the measured turns over their wall time, at the clients;
* gateway hop: per token, inside the gateway process (a bench-only patch of its replica
  stream's read and of its Converse writer), the time the replica message holding the token was
  read minus the time the client message holding its text was handed to gRPC;
* end to end: per token, the client's read time minus the replica's write time (its Generate
  stream handing the message holding the token to gRPC); clocks are CLOCK_MONOTONIC
  (``time.perf_counter``), one clock for every process on the machine;
* each process's CPU (``time.process_time_ns``, every thread) over the measured turns, as a
  share of one core, and the gateway's CPU per token relayed.

Run: .venv/bin/python bench/bench_relay.py [--quick] [--out DIR]
Writes relay.md + relay.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import cProfile
import logging
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
import grpc  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import bench_gateway  # noqa: E402
from loopwire.common import gc_tuning, grpc_server  # noqa: E402
from loopwire.common.auth import Authenticator  # noqa: E402
from loopwire.common.model_def import load_definition  # noqa: E402
from loopwire.common.prompt import ChatPrompt  # noqa: E402
from loopwire.common.recorded import user_item  # noqa: E402
from loopwire.gateway.factory import start_gateway  # noqa: E402
from loopwire.gateway.generate_link import GenerateLink  # noqa: E402
from loopwire.gateway.service import GatewayConfig, GatewayServicer  # noqa: E402
from loopwire.inference.outbox import COALESCE_MAX_TOKENS, COALESCE_WINDOW_S  # noqa: E402
from loopwire.inference.server import EngineOptions, build_engine  # noqa: E402
from loopwire.inference.service import InferenceServicer  # noqa: E402
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, inference_pb2, inference_pb2_grpc  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console(width=160)
MODEL = "dummy:0"  # cl100k: "word" then " word" are one token each
PACES = {"paced": ("1b", 1.0), "unpaced": ("8b", 0.0)}
PATHS = ("direct", "1 gateway", "2 gateways")
Stamps = dict[str, list[tuple[float, int]]]  # response (request) id -> (time, tokens so far)


# -- a child process serving commands ----------------------------------------------------------


Commands = dict[str, Callable[..., Awaitable[object]]]


def _child_main(conn: multiprocessing.connection.Connection, build: Callable[..., Awaitable[tuple[int, Commands,
                Callable[[], Awaitable[None]]]]], args: tuple[object, ...]) -> None:
    """Builds its server (or clients), sends its port, then answers (command, kwargs) on ``conn``
    until "stop"; "cpu" is answered from this thread (the process's CPU, every thread)."""
    logging.basicConfig(level=logging.ERROR)

    async def serve() -> None:
        port, commands, close = await build(*args)
        gc_tuning.tune_for_serving()  # as every loopwire server is once built (the clients too: both paths alike)
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def answer() -> None:
            try:
                while (message := conn.recv()) != "stop":
                    name, kwargs = message
                    if name == "cpu":
                        conn.send(("ok", time.process_time_ns()))
                        continue
                    try:
                        conn.send(("ok", asyncio.run_coroutine_threadsafe(commands[name](**kwargs), loop).result()))
                    except Exception as e:  # noqa: BLE001 - the parent raises it
                        conn.send(("error", f"{name}: {type(e).__name__}: {e}"))
            except EOFError:
                pass
            loop.call_soon_threadsafe(stopped.set)

        threading.Thread(target=answer, daemon=True).start()
        conn.send(port)
        await stopped.wait()
        await close()

    asyncio.run(serve())


class Child:
    """A process of the benchmark: started, asked, stopped."""

    def __init__(self, build: Callable[..., Awaitable[object]], *args: object) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_child_main, args=(child, build, args), daemon=True)
        self.process.start()
        if not self.conn.poll(120):
            raise RuntimeError(f"{build.__name__} did not start")
        self.port: int = self.conn.recv()

    def send(self, name: str, **kwargs: object) -> None:
        self.conn.send((name, kwargs))

    def result(self) -> object:
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(value)
        return value

    def ask(self, name: str, **kwargs: object) -> object:
        self.send(name, **kwargs)
        return self.result()

    def close(self) -> None:
        bench_gateway.stop_child(self.conn, self.process)


def _taken(stamps: list[tuple[float, str, int]]) -> Callable[[], Awaitable[object]]:
    async def take() -> object:
        out = list(stamps)
        stamps.clear()
        return out
    return take


# -- the replica: each Generate message stamped as it is handed to gRPC ---------------------------


async def build_replica(params: str, time_scale: float, window_s: float, max_tokens: int
                        ) -> tuple[int, Commands, Callable[[], Awaitable[None]]]:
    engine = build_engine(EngineOptions(engine="simulated", replica_id="relay-0", time_scale=time_scale,
                                        max_output_tokens=8192, gpu="h200", model_params=params, model=MODEL))
    writes: list[tuple[float, str, int]] = []  # (time, request id, tokens in the message)

    class Stamping(InferenceServicer):
        async def Generate(self, requests: object, context: object) -> AsyncIterator[object]:  # type: ignore[override]  # noqa: N802
            async for response in super().Generate(requests, context):  # type: ignore[arg-type]
                if response.HasField("tokens"):
                    writes.append((time.perf_counter(), response.request_id, len(response.tokens.token_ids)))
                yield response

    server = grpc_server.make_server()
    inference_pb2_grpc.add_InferenceServiceServicer_to_server(
        Stamping(engine, coalesce_window_s=window_s, coalesce_max_tokens=max_tokens), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await engine.start()
    await server.start()

    async def close() -> None:
        await server.stop(0)
        await engine.close()

    return port, {"stamps": _taken(writes)}, close


# -- a gateway, its hop stamped: replica message read, client message handed to gRPC --------------


class _StampedCall:
    """A gateway's Generate call whose reads are stamped (time, request id, token ids)."""

    def __init__(self, call: object, reads: list[tuple[float, str, int]]) -> None:
        self._call = call
        self._reads = reads

    def __getattr__(self, name: str) -> object:
        return getattr(self._call, name)

    async def read(self) -> object:
        response = await self._call.read()  # type: ignore[attr-defined]
        if response is not grpc.aio.EOF and response.HasField("tokens"):
            self._reads.append((time.perf_counter(), response.request_id, len(response.tokens.token_ids)))
        return response


async def build_gateway(addresses: list[str], gateway_id: str,
                        profile: str = "") -> tuple[int, Commands, Callable[[], Awaitable[None]]]:
    """A gateway as ``loopwire gateway`` builds it, its hop stamped (and its event loop profiled
    into ``profile`` when given)."""
    reads: list[tuple[float, str, int]] = []
    sends: list[tuple[float, str, int]] = []  # (time, response id, characters of text)
    link_init, converse = GenerateLink.__init__, GatewayServicer.Converse

    def init(self: GenerateLink, *args: object) -> None:
        link_init(self, *args)  # type: ignore[arg-type]
        self.call = _StampedCall(self.call, reads)  # type: ignore[assignment]  # its reader has not run yet

    async def stamped(self: GatewayServicer, requests: object, context: object) -> AsyncIterator[object]:
        async for event in converse(self, requests, context):  # type: ignore[arg-type]
            if event.WhichOneof("event") == "text_delta":
                sends.append((time.perf_counter(), event.response_id, len(event.text_delta.text)))
            yield event

    GenerateLink.__init__ = init  # type: ignore[method-assign]
    GatewayServicer.Converse = stamped  # type: ignore[method-assign, assignment]
    gateway = await start_gateway(addresses, authenticator=Authenticator.open(), config=GatewayConfig(
        allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF, default_max_output_tokens=8192,
        gateway_id=gateway_id))

    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()

    async def stamps() -> object:
        out = (list(reads), list(sends))
        reads.clear()
        sends.clear()
        return out

    async def close() -> None:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
        await gateway.close()

    return gateway.port, {"stamps": stamps}, close


# -- the clients -----------------------------------------------------------------------------------


def replay_text(tokens: int) -> str:
    return "word" + " word" * (tokens - 1)


def tokens_in(chars: int) -> int:
    """Whole tokens in the first ``chars`` characters of ``replay_text``."""
    return 0 if chars < 4 else 1 + (chars - 4) // 5


@dataclass
class Turn:
    key: str  # the response id (through a gateway) or the request id (direct)
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (read time, tokens read so far)
    output_tokens: int = 0
    messages: int = 0


class ConverseStream:
    def __init__(self, stub: gateway_pb2_grpc.GatewayServiceStub, n: int, text: str) -> None:
        self.call = stub.Converse()
        self.n, self.text = n, text
        self.previous = ""

    async def turn(self) -> Turn:
        request = gateway_pb2.CreateResponse(
            previous_response_id=self.previous, input=[user_item(f"Stream {self.n}: say word, again and again.")],
            safety_mode=gateway_pb2.SAFETY_MODE_OFF, replay=common_pb2.ReplayOutput(text=self.text),
            sampling=common_pb2.SamplingParams(speculative_decoding=False))
        await self.call.write(gateway_pb2.ConverseRequest(create_response=request))
        turn, chars = Turn(""), 0
        while True:
            event = await self.call.read()
            kind = event.WhichOneof("event")
            turn.messages += 1
            if kind == "created":
                turn.key = event.response_id
            elif kind == "text_delta":
                chars += len(event.text_delta.text)
                turn.arrivals.append((time.perf_counter(), tokens_in(chars)))
            elif kind == "failed":
                raise RuntimeError(f"response failed: {event.failed.error}")
            elif kind == "completed":
                turn.output_tokens = event.completed.usage.output_tokens
                self.previous = turn.key
                return turn

    async def close(self) -> None:
        await self.call.done_writing()


class DirectStream:
    """A Generate stream straight to the replica: the same replayed ids, no gateway."""

    def __init__(self, stub: inference_pb2_grpc.InferenceServiceStub, n: int, prompt: list[int],
                 oracle: list[int], stop_id: int) -> None:
        self.call = stub.Generate()
        self.n, self.prompt, self.oracle, self.stop_id = n, prompt, oracle, stop_id
        self.turns = 0

    async def turn(self) -> Turn:
        self.turns += 1
        turn = Turn(f"direct_{self.n}_{self.turns}")
        start = inference_pb2.GenerationStart(
            request_id=turn.key, session_id=f"direct_{self.n}", full=inference_pb2.FullPrompt(token_ids=self.prompt),
            params=inference_pb2.GenerationParams(max_tokens=len(self.oracle), stop_token_ids=[self.stop_id],
                                                  speculative_decoding=False),
            oracle_token_ids=self.oracle)
        await self.call.write(inference_pb2.GenerateRequest(start=start))
        n = 0
        while True:
            response = await self.call.read()
            kind = response.WhichOneof("event")
            turn.messages += 1
            if kind == "tokens":
                n += len(response.tokens.token_ids)
                turn.arrivals.append((time.perf_counter(), n))
            elif kind == "error":
                raise RuntimeError(f"generation failed: {response.error}")
            elif kind == "finished":
                turn.output_tokens = response.finished.usage.output_tokens
                return turn

    async def close(self) -> None:
        await self.call.done_writing()


async def build_clients() -> tuple[int, Commands, Callable[[], Awaitable[None]]]:
    model = load_definition(MODEL)
    prompt = ChatPrompt(model)
    streams: list[ConverseStream | DirectStream] = []
    channels: list[grpc.aio.Channel] = []

    async def close() -> None:
        for s in streams:
            await s.close()
        for c in channels:
            await c.close()
        streams.clear()
        channels.clear()

    async def open_streams(targets: list[str], direct: bool, count: int, tokens: int) -> object:
        await close()
        channels.extend(grpc_server.service_channel(t) for t in targets)
        text = replay_text(tokens)
        oracle = prompt.output_ids(text, [])
        for i in range(count):
            channel = channels[i % len(channels)]  # stream i pinned to target i % n
            if direct:
                streams.append(DirectStream(inference_pb2_grpc.InferenceServiceStub(channel), i,
                                            model.tokenizer.encode(f"Stream {i}: say word, again and again."),
                                            oracle, model.stop_token_ids[0]))
            else:
                streams.append(ConverseStream(gateway_pb2_grpc.GatewayServiceStub(channel), i, text))
        return None

    async def turns(rounds: int) -> object:
        """``rounds`` turns on every stream at once: (wall s, CPU ns, the turns as plain tuples)."""
        cpu0, t0 = time.process_time_ns(), time.perf_counter()
        done: list[Turn] = []
        for _ in range(rounds):
            done += await asyncio.gather(*(s.turn() for s in streams))
        wall, cpu = time.perf_counter() - t0, time.process_time_ns() - cpu0
        return wall, cpu, [(t.key, t.arrivals, t.output_tokens, t.messages) for t in done]

    return 0, {"open": open_streams, "turns": turns, "close": close}, close


# -- one run ---------------------------------------------------------------------------------------


@dataclass
class Run:
    pace: str
    streams: int
    path: str
    tokens: int = 0
    wall_s: float = 0.0
    replica_msgs: int = 0
    client_msgs: int = 0
    cpu_share: dict[str, float] = field(default_factory=dict)  # process -> CPU s per wall s
    gateway_cpu_ns: int = 0
    hop_ms: list[float] = field(default_factory=list)  # the gateway's own, per token
    e2e_ms: list[float] = field(default_factory=list)  # replica write -> client read, per token
    gaps_ms: list[float] = field(default_factory=list)  # between reads on one stream

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.wall_s, 1e-9)

    @property
    def gateway_us_per_token(self) -> float:
        return self.gateway_cpu_ns / 1000 / max(1, self.tokens)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cumulative(messages: list[tuple[float, str, int]], to_tokens: Callable[[int], int] = int) -> Stamps:
    """Per id, (time, tokens so far) from per-message (time, id, count) stamps."""
    totals: dict[str, int] = {}
    out: Stamps = {}
    for t, key, n in messages:
        totals[key] = totals.get(key, 0) + n
        out.setdefault(key, []).append((t, to_tokens(totals[key])))
    return out


def _delays(src: list[tuple[float, int]], dst: list[tuple[float, int]]) -> list[float]:
    """Per token that reached ``dst``: its time there minus its time at ``src`` (ms)."""
    counts = [n for _, n in src]
    out, last = [], 0
    for t, n in dst:
        for k in range(last + 1, n + 1):
            i = bisect.bisect_left(counts, k)
            if i < len(src):
                out.append((t - src[i][0]) * 1000)
        last = max(last, n)
    return out


def bench_one(pace: str, streams: int, path: str, replica: Child, gateways: list[Child], clients: Child,
              tokens: int, rounds: int) -> Run:
    via = [] if path == "direct" else gateways[: 1 if path == "1 gateway" else 2]
    targets = [f"127.0.0.1:{g.port}" for g in via] or [f"127.0.0.1:{replica.port}"]
    clients.ask("open", targets=targets, direct=not via, count=streams, tokens=tokens)
    clients.ask("turns", rounds=1)  # unmeasured: links open, caches warm
    servers = [replica, *via]
    for s in servers:
        s.ask("stamps")
    cpu0 = [s.ask("cpu") for s in servers]
    wall, client_cpu, turns = clients.ask("turns", rounds=rounds)  # type: ignore[misc]
    cpu = [s.ask("cpu") - c for s, c in zip(servers, cpu0, strict=True)]  # type: ignore[operator]
    run = Run(pace, streams, path, wall_s=wall)
    run.cpu_share = {"replica": cpu[0] / 1e9 / wall, "clients": client_cpu / 1e9 / wall}
    for k, c in enumerate(cpu[1:]):
        run.cpu_share[f"gateway {k + 1}"] = c / 1e9 / wall
    run.gateway_cpu_ns = sum(cpu[1:])
    writes: list[tuple[float, str, int]] = replica.ask("stamps")  # type: ignore[assignment]
    replica_at = _cumulative(writes)
    run.replica_msgs = len(writes)
    reads: list[tuple[float, str, int]] = []
    sends: list[tuple[float, str, int]] = []
    for g in via:
        r, s = g.ask("stamps")  # type: ignore[misc]
        reads += r
        sends += s
    read_at, sent_at = _cumulative(reads), _cumulative(sends, tokens_in)
    for key, arrivals, output_tokens, messages in turns:
        run.tokens += output_tokens
        run.client_msgs += messages
        run.e2e_ms += _delays(replica_at.get(key, []), arrivals)
        if via:
            run.hop_ms += _delays(read_at.get(key, []), sent_at.get(key, []))
        run.gaps_ms += [(b[0] - a[0]) * 1000 for a, b in zip(arrivals, arrivals[1:], strict=False)]
    clients.ask("close")
    return run


# -- report ----------------------------------------------------------------------------------------


def _f(x: float, spec: str = ".2f") -> str:
    return "–" if x != x else format(x, spec)  # NaN: nothing measured


def report(runs: dict[tuple[str, int, str], Run], stream_counts: list[int], paces: list[str]
           ) -> tuple[Table, Table, object]:
    table = Table(title="Relay through the gateway: aggregate tokens/s and the delay added per token (ms), "
                        "direct vs 1 vs 2 gateway processes")
    for col in ("pace", "streams", "tokens/s direct", "tokens/s 1 gateway", "tokens/s 2 gateways",
                "gateway hop p50 / p99 (1 gw)", "gateway hop p99 (2 gw)", "end-to-end p99 direct",
                "end-to-end p99 1 gw", "replica → client msgs/token (1 gw)", "gateway CPU µs/token (1 gw)",
                "gateway CPU share of a core (1 gw)"):
        table.add_column(col, justify="right")
    for pace in paces:
        for s in stream_counts:
            d, g1, g2 = (runs.get((pace, s, p)) for p in PATHS)

            def tps(r: Run | None) -> str:
                return f"{r.tokens_per_s:,.0f}" if r else "–"
            assert d is not None and g1 is not None
            table.add_row(
                pace, str(s), tps(d), tps(g1), tps(g2),
                f"{_f(_pct(g1.hop_ms, 0.5), '.3f')} / {_f(_pct(g1.hop_ms, 0.99))}",
                _f(_pct(g2.hop_ms, 0.99)) if g2 else "–", _f(_pct(d.e2e_ms, 0.99)), _f(_pct(g1.e2e_ms, 0.99)),
                f"{g1.replica_msgs / max(1, g1.tokens):.3f} → {g1.client_msgs / max(1, g1.tokens):.3f}",
                f"{g1.gateway_us_per_token:.1f}", f"{g1.cpu_share['gateway 1']:.2f}")
    console.print(table)
    detail = Table(title="Every run (delays in ms, per token; CPU as a share of one core over the measured turns)")
    for col in ("pace", "streams", "path", "tokens", "wall s", "tokens/s", "replica msgs/token", "client msgs/token",
                "hop p50", "hop p99", "hop max", "e2e p50", "e2e p99", "gap p99", "CPU replica", "CPU gateway(s)",
                "CPU clients", "gateway µs/token"):
        detail.add_column(col, justify="right")
    for pace in paces:
        for s in stream_counts:
            for p in PATHS:
                r = runs.get((pace, s, p))
                if r is None:
                    continue
                gw = " + ".join(f"{v:.2f}" for k, v in r.cpu_share.items() if k.startswith("gateway")) or "–"
                detail.add_row(pace, str(s), p, f"{r.tokens:,}", f"{r.wall_s:.2f}", f"{r.tokens_per_s:,.0f}",
                               f"{r.replica_msgs / max(1, r.tokens):.3f}", f"{r.client_msgs / max(1, r.tokens):.3f}",
                               _f(_pct(r.hop_ms, 0.5), ".3f"), _f(_pct(r.hop_ms, 0.99)), _f(max(r.hop_ms, default=float("nan"))),
                               _f(_pct(r.e2e_ms, 0.5)), _f(_pct(r.e2e_ms, 0.99)), _f(_pct(r.gaps_ms, 0.99)),
                               f"{r.cpu_share['replica']:.2f}", gw, f"{r.cpu_share['clients']:.2f}",
                               f"{r.gateway_us_per_token:.1f}" if p != "direct" else "–")
    console.print(detail)

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    colours = {"paced": "tab:blue", "unpaced": "tab:orange"}
    styles = {"direct": "s:", "1 gateway": "o-", "2 gateways": "^--"}
    for pace in paces:
        for p in PATHS:
            rs = [(s, runs[(pace, s, p)]) for s in stream_counts if (pace, s, p) in runs]
            xs = [s for s, _ in rs]
            label = f"{pace}, {p}"
            axes[0].plot(xs, [r.tokens_per_s for _, r in rs], styles[p], color=colours[pace], label=label)
            axes[2].plot(xs, [_pct(r.e2e_ms, 0.99) for _, r in rs], styles[p], color=colours[pace], label=label)
            if p != "direct":
                axes[1].plot(xs, [_pct(r.hop_ms, 0.99) for _, r in rs], styles[p], color=colours[pace], label=label)
    axes[0].axhline(50_000, color="0.5", linestyle=":", linewidth=1, label="goal: 50k tokens/s (64 streams)")
    axes[1].axhline(2.0, color="0.5", linestyle=":", linewidth=1, label="goal: p99 ≤ 2 ms")
    for ax, ylabel in zip(axes, ("aggregate tokens/s measured", "p99 gateway hop per token (ms, log scale)",
                                 "p99 replica write → client read per token (ms, log scale)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(stream_counts, [str(s) for s in stream_counts])
        ax.minorticks_off()
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(ylabel)
        if ax is axes[0]:
            ax.set_ylim(bottom=0)
        else:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Replica, gateway(s) and clients in processes of their own: tokens/s and the delay the gateway adds "
                 "(simulated replica)", fontsize=10)
    fig.tight_layout()
    return table, detail, fig


def goals(runs: dict[tuple[str, int, str], Run], paces: list[str], stream_counts: list[int]) -> list[str]:
    """The goal's three numbers, for one gateway, as measured."""
    lines = []
    for pace in paces:
        best = {s: runs[(pace, s, "1 gateway")] for s in stream_counts}
        parts = []
        if 64 in best:
            parts.append(f"64 streams {best[64].tokens_per_s:,.0f} tokens/s (goal ≥ 50,000: "
                         f"{'met' if best[64].tokens_per_s >= 50_000 else 'not met'})")
        if 1 in best:
            parts.append(f"1 stream {best[1].tokens_per_s:,.0f} tokens/s (goal ≥ 10,000: "
                         f"{'met' if best[1].tokens_per_s >= 10_000 else 'not met'})")
        worst = max(_pct(r.hop_ms, 0.99) for r in best.values())
        parts.append(f"worst p99 gateway hop {worst:.2f} ms (goal ≤ 2 ms: {'met' if worst <= 2 else 'not met'})")
        lines.append(f"goal, {pace}, one gateway: " + "; ".join(parts))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter outputs, one measured round")
    parser.add_argument("--streams", default="1,16,64", help="concurrent streams per run (default: 1,16,64)")
    parser.add_argument("--paces", default="paced,unpaced", help="paced, unpaced or both (default)")
    parser.add_argument("--tokens", type=int, default=0, help="output tokens per turn (default 2000; --quick 500)")
    parser.add_argument("--rounds", type=int, default=0, help="measured turns per stream (default 2; --quick 1)")
    parser.add_argument("--window-ms", type=float, default=COALESCE_WINDOW_S * 1000,
                        help=f"the replica's coalescing window (default: the server's, {COALESCE_WINDOW_S * 1000:g})")
    parser.add_argument("--max-tokens", type=int, default=COALESCE_MAX_TOKENS,
                        help=f"replica: a batch this long leaves at once (default {COALESCE_MAX_TOKENS})")
    parser.add_argument("--profile", default="", help="cProfile the first gateway's event loop into this file "
                        "(every run; its last pace's)")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    tokens = args.tokens or (500 if args.quick else 2000)
    rounds = args.rounds or (1 if args.quick else 2)
    stream_counts = [int(s) for s in args.streams.split(",") if s.strip()]
    paces = [p.strip() for p in args.paces.split(",") if p.strip()]
    runs: dict[tuple[str, int, str], Run] = {}
    clients = Child(build_clients)
    try:
        for pace in paces:
            params, time_scale = PACES[pace]
            replica = Child(build_replica, params, time_scale, args.window_ms / 1000, args.max_tokens)
            address = [f"127.0.0.1:{replica.port}"]
            gateways = [Child(build_gateway, address, f"g{k}", args.profile if k == 0 else "") for k in range(2)]
            try:
                for s in stream_counts:
                    for p in PATHS if s > 1 else PATHS[:2]:  # one stream cannot be shared
                        runs[(pace, s, p)] = r = bench_one(pace, s, p, replica, gateways, clients, tokens, rounds)
                        console.print(
                            f"{pace:>7} {s:>3} streams, {p:>10}: {r.tokens_per_s:9,.0f} tokens/s, hop p99 "
                            f"{_f(_pct(r.hop_ms, 0.99))} ms, e2e p99 {_f(_pct(r.e2e_ms, 0.99))} ms, CPU "
                            + ", ".join(f"{k} {v:.2f}" for k, v in r.cpu_share.items()))
            finally:
                for child in (*gateways, replica):
                    child.close()
    finally:
        clients.close()
    table, detail, fig = report(runs, stream_counts, paces)
    verdicts = goals(runs, paces, stream_counts)
    for line in verdicts:
        console.print(line)
    short = (f"replayed outputs of {tokens} tokens ('word' repeated; cl100k), {rounds} measured turns per stream, "
             f"streams {args.streams}; replica, gateway(s), clients: one process each")
    provenance.stamp(fig, short)
    out = args.out
    written = [provenance.save_figure(fig, out, "relay", dpi=110)]
    written.append(provenance.write_markdown(
        out, "relay", "Relay benchmark: tokens/s through one and two gateway processes, and the delay a gateway adds",
        provenance.provenance(
            f"synthetic: each stream's turns replay an output of {tokens} tokens ('word' then ' word' repeated, "
            f"model {MODEL}: cl100k, ChatML), one unmeasured turn then {rounds} measured turns per stream (stateful "
            f"Converse turns through a gateway; direct: a full short prompt each turn); {args.streams} concurrent "
            "streams",
            engine=("simulated (the real scheduler and KV block manager, step times from the cost model) in a process "
                    "of its own, its coalescing window "
                    f"{args.window_ms:g} ms, at most {args.max_tokens} tokens a batch, the first tokens never wait; each "
                    "gateway alone in its process; the clients in one more; loopback gRPC; safety off; speculative "
                    "decoding off (a token per sequence per step)"),
            cost_model=("paced: " + provenance.cost_model("h200", "1b") + " at time scale 1 (real time); unpaced: "
                        + provenance.cost_model("h200", "8b") + " at time scale 0 (no sleeping)"),
            notes=["gateway hop: per token, inside the gateway process, the time its replica message was read to the "
                   "time the client message holding its text was handed to gRPC (a bench-only patch of "
                   "GenerateLink's call and of GatewayServicer.Converse); end to end: the replica's hand-off of the "
                   "message holding the token to gRPC to the client's read (one CLOCK_MONOTONIC for all processes); "
                   "the stop token has no text and is not in either",
                   "2 gateways: stream i pinned to gateway i % 2 (as the api routes a continuation to the gateway its "
                   "response id names: --gateway-id g0 and g1, ids resp_g0_<hex>); conversations live in the "
                   "gateway that made them, so a stream's turns stay on it",
                   "CPU: each process's time.process_time_ns over the measured turns per wall second (1.00 = one "
                   "core busy); the machine's cores are shared by all processes (see machine)",
                   *verdicts]),
        [*provenance.table_markdown(table), "", *provenance.table_markdown(detail), "", "![relay](relay.png)"]))
    for path in written:
        console.print(f"wrote {provenance.rel(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
