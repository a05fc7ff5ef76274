"""Relay benchmark: what one gateway process spends per output token it relays, and how many
tokens a second it relays, with the replica's coalescing window off (before) and on (after).

A simulated replica (this process) streams replayed outputs of ``--tokens`` tokens each to
1, 16 and 64 concurrent Converse streams through one gateway (a child process of its own);
each stream runs ``--rounds`` stateful turns after one unmeasured turn. Two paces:

* paced: a 1B model on an H200 in real time (time scale 1): a decode step of about 1 ms, so
  64 streams ask for about 50k tokens/s, the goal for one gateway process;
* unpaced: time scale 0, the replica steps as fast as it can (tokens/s then says what the
  whole mesh on this machine manages; the gateway's CPU per token says what it costs).

Per run: the gateway's process CPU per output token (``time.process_time_ns`` of the child
around the measured rounds, minus the calibrated cost of asking and its idle CPU over the
wall time; every thread counted, gRPC's included; per-turn work such as preparing the turn
and tokenizing the replayed text is included, amortised over the turn's tokens), the
aggregate tokens/s measured, the tokens/s one gateway core could carry at that cost, stream
messages per token on both hops, and the delay each token gains between the engine handing
it to the replica's stream and the client reading it (p50/p99; the replica, both gRPC hops
and the gateway: the window's wait is in it), with the p99 gap between tokens at the client.
Replica and clients share this process, so on a small machine they compete with each other
for one core: tokens/s is then bounded by them, not by the gateway.

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
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import bench_gateway  # noqa: E402
from loopwire.common import grpc_server  # noqa: E402
from loopwire.common.recorded import user_item  # noqa: E402
from loopwire.gateway.service import GatewayConfig  # noqa: E402
from loopwire.inference.server import EngineOptions, build_engine  # noqa: E402
from loopwire.inference.service import COALESCE_MAX_TOKENS, COALESCE_WINDOW_S, InferenceServicer  # noqa: E402
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, inference_pb2_grpc  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console(width=150)
MODEL = "dummy:0"  # cl100k: "word" then " word" are one token each
PACES = {"paced": ("1b", 1.0), "unpaced": ("8b", 0.0)}


# -- the replica, with its engine's output stamped -------------------------------------------


class StampedEngine:
    """The engine as the servicer sees it; records when each request's tokens came out."""

    def __init__(self, engine: object) -> None:
        self._engine = engine
        self.stamps: dict[str, list[tuple[float, int]]] = {}  # request id -> (time, tokens so far)
        self.batches = 0  # engine outputs holding tokens (before the stream's coalescing)

    def __getattr__(self, name: str) -> object:
        return getattr(self._engine, name)

    async def generate(self, req: object) -> AsyncIterator[object]:
        stamps = self.stamps.setdefault(req.request_id.rsplit("/", 1)[-1], [])  # type: ignore[attr-defined]
        n = 0
        async for out in self._engine.generate(req):  # type: ignore[attr-defined]
            if out.token_ids:
                n += len(out.token_ids)
                self.batches += 1
                stamps.append((time.perf_counter(), n))
            yield out


class CountingServicer(InferenceServicer):
    """Counts the token messages the replica's Generate streams send."""

    messages = 0

    async def Generate(self, requests: object, context: object) -> AsyncIterator[object]:  # type: ignore[override]
        async for response in super().Generate(requests, context):  # type: ignore[arg-type]
            if response.HasField("tokens"):
                self.messages += 1
            yield response


async def start_replica(params: str, time_scale: float, window_s: float, max_tokens: int
                        ) -> tuple[str, StampedEngine, list]:
    engine = build_engine(EngineOptions(engine="simulated", replica_id="relay-0", time_scale=time_scale,
                                        max_output_tokens=8192, gpu="h200", model_params=params, model=MODEL))
    stamped = StampedEngine(engine)
    server = grpc_server.make_server()
    servicer = CountingServicer(stamped, coalesce_window_s=window_s, coalesce_max_tokens=max_tokens)  # type: ignore[arg-type]
    inference_pb2_grpc.add_InferenceServiceServicer_to_server(servicer, server)
    stamped.counter = servicer  # type: ignore[attr-defined]
    port = server.add_insecure_port("127.0.0.1:0")
    await engine.start()
    await server.start()

    async def stop() -> None:
        await server.stop(0)
        await engine.close()

    return f"127.0.0.1:{port}", stamped, [stop]


# -- the gateway in a child process (optionally profiled) ------------------------------------


def _gateway_child(addresses: list[str], config: GatewayConfig, conn: object, profile: str) -> None:
    if not profile:
        bench_gateway._gateway_main(addresses, config, conn)  # type: ignore[arg-type]
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        bench_gateway._gateway_main(addresses, config, conn)  # type: ignore[arg-type]
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


class GatewayChild(bench_gateway.GatewayProcess):
    def __init__(self, addresses: list[str], config: GatewayConfig, profile: str = "") -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_gateway_child, args=(addresses, config, child, profile), daemon=True)
        self.process.start()
        self.port = 0
        self.probe_ns = 0
        self.idle_ns_per_s = 0.0


# -- clients ---------------------------------------------------------------------------------


def replay_text(tokens: int) -> str:
    return "word" + " word" * (tokens - 1)


def tokens_in(chars: int) -> int:
    """Whole tokens in the first ``chars`` characters of ``replay_text``."""
    return 0 if chars < 4 else 1 + (chars - 4) // 5


@dataclass
class Turn:
    response_id: str
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens read so far)
    output_tokens: int = 0
    events: int = 0


class Stream:
    def __init__(self, stub: gateway_pb2_grpc.GatewayServiceStub, n: int) -> None:
        self.call = stub.Converse()
        self.n = n
        self.previous = ""

    async def turn(self, text: str) -> Turn:
        request = gateway_pb2.CreateResponse(
            previous_response_id=self.previous, input=[user_item(f"Stream {self.n}: say word, again and again.")],
            safety_mode=gateway_pb2.SAFETY_MODE_OFF,
            replay=common_pb2.ReplayOutput(text=text),
            sampling=common_pb2.SamplingParams(speculative_decoding=False))
        await self.call.write(gateway_pb2.ConverseRequest(create_response=request))
        turn, chars = Turn(""), 0
        while True:
            event = await self.call.read()
            kind = event.WhichOneof("event")
            turn.events += 1
            if kind == "created":
                turn.response_id = event.response_id
            elif kind == "text_delta":
                chars += len(event.text_delta.text)
                turn.arrivals.append((time.perf_counter(), tokens_in(chars)))
            elif kind == "failed":
                raise RuntimeError(f"response failed: {event.failed.error}")
            elif kind == "completed":
                turn.output_tokens = event.completed.usage.output_tokens
                self.previous = turn.response_id
                return turn

    async def close(self) -> None:
        await self.call.done_writing()


# -- one run ---------------------------------------------------------------------------------


@dataclass
class Run:
    pace: str
    streams: int
    window_ms: float
    tokens: int = 0
    cpu_us: int = 0
    wall_s: float = 0.0
    replica_msgs_per_token: float = 0.0
    gateway_events_per_token: float = 0.0
    delays_ms: list[float] = field(default_factory=list)
    gaps_ms: list[float] = field(default_factory=list)

    @property
    def us_per_token(self) -> float:
        return self.cpu_us / max(1, self.tokens)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / max(self.wall_s, 1e-9)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _delays(engine: StampedEngine, turns: list[Turn]) -> tuple[list[float], list[float]]:
    """Per token: client read time minus engine output time (ms); per stream: gaps between reads."""
    delays, gaps = [], []
    for turn in turns:
        stamps = engine.stamps.get(turn.response_id, [])
        if not stamps or not turn.arrivals:
            continue
        counts = [n for _, n in stamps]
        last_n = 0
        for t, n in turn.arrivals:
            for k in range(last_n + 1, n + 1):
                i = bisect.bisect_left(counts, k)
                if i < len(stamps):
                    delays.append((t - stamps[i][0]) * 1000)
            last_n = max(last_n, n)
        gaps += [(b[0] - a[0]) * 1000 for a, b in zip(turn.arrivals, turn.arrivals[1:], strict=False)]
    return delays, gaps


async def bench_one(pace: str, streams: int, window_s: float, max_tokens: int, tokens: int, rounds: int,
                    profile: str = "") -> Run:
    params, time_scale = PACES[pace]
    address, engine, closers = await start_replica(params, time_scale, window_s, max_tokens)
    gateway = GatewayChild([address], GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF,
                                                    default_max_output_tokens=8192), profile)
    run = Run(pace, streams, window_s * 1000)
    try:
        await gateway.started()
        await gateway.calibrate()
        channel = grpc_server.service_channel(f"127.0.0.1:{gateway.port}")
        closers.append(channel.close)
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        clients = [Stream(stub, i) for i in range(streams)]
        text = replay_text(tokens)
        await asyncio.gather(*(c.turn(text) for c in clients))  # unmeasured: links open, caches warm
        msgs0, engine.stamps = engine.counter.messages, {}  # type: ignore[attr-defined]
        turns: list[Turn] = []
        cpu0, t0 = gateway.cpu_ns(), time.perf_counter()
        for _ in range(rounds):
            turns += await asyncio.gather(*(c.turn(text) for c in clients))
        run.wall_s = time.perf_counter() - t0
        run.cpu_us = gateway.turn_cpu_us(cpu0, run.wall_s)
        run.tokens = sum(t.output_tokens for t in turns)
        run.replica_msgs_per_token = (engine.counter.messages - msgs0) / max(1, run.tokens)  # type: ignore[attr-defined]
        run.gateway_events_per_token = sum(t.events for t in turns) / max(1, run.tokens)
        run.delays_ms, run.gaps_ms = _delays(engine, turns)
        for c in clients:
            await c.close()
    finally:
        gateway.close()
        for close in reversed(closers):
            await close()
    return run


# -- report ----------------------------------------------------------------------------------


def report(runs: dict[tuple[str, int, float], Run], windows: list[float], after: float, stream_counts: list[int],
           paces: list[str]) -> tuple[Table, Table, object]:
    before = windows[0]
    table = Table(title=f"Gateway relay per output token: replica window {before:g} ms (before) vs {after:g} ms "
                        "(after), one gateway process")
    for col in ("pace", "streams", "before: gateway CPU µs/token", "after: µs/token", "before / after",
                "before: tokens/s measured", "after: tokens/s measured", "after / before",
                "before: tokens/s per gateway core", "after: tokens/s per gateway core",
                "replica msgs/token before → after", "p99 delay ms before → after",
                "p99 gap at client ms before → after"):
        table.add_column(col, justify="right")
    for pace in paces:
        for s in stream_counts:
            b, a = runs[(pace, s, before)], runs[(pace, s, after)]
            table.add_row(
                pace, str(s), f"{b.us_per_token:.1f}", f"{a.us_per_token:.1f}",
                f"{b.us_per_token / max(a.us_per_token, 1e-9):.2f}×",
                f"{b.tokens_per_s:,.0f}", f"{a.tokens_per_s:,.0f}", f"{a.tokens_per_s / max(b.tokens_per_s, 1e-9):.2f}×",
                f"{1e6 / max(b.us_per_token, 1e-9):,.0f}", f"{1e6 / max(a.us_per_token, 1e-9):,.0f}",
                f"{b.replica_msgs_per_token:.3f} → {a.replica_msgs_per_token:.3f}",
                f"{_pct(b.delays_ms, 0.99):.2f} → {_pct(a.delays_ms, 0.99):.2f}",
                f"{_pct(b.gaps_ms, 0.99):.2f} → {_pct(a.gaps_ms, 0.99):.2f}")
    console.print(table)
    detail = Table(title="Every run: delay each token gains from engine output to the client's read (ms)")
    for col in ("pace", "streams", "window ms", "tokens", "wall s", "gateway CPU ms", "µs/token", "tokens/s",
                "replica msgs/token", "gateway events/token", "delay p50", "delay p99", "gap p50", "gap p99"):
        detail.add_column(col, justify="right")
    for (pace, s, w), r in sorted(runs.items()):
        detail.add_row(pace, str(s), f"{w:g}", f"{r.tokens:,}", f"{r.wall_s:.2f}", f"{r.cpu_us / 1000:,.1f}",
                       f"{r.us_per_token:.1f}", f"{r.tokens_per_s:,.0f}", f"{r.replica_msgs_per_token:.3f}",
                       f"{r.gateway_events_per_token:.3f}", f"{_pct(r.delays_ms, 0.5):.2f}",
                       f"{_pct(r.delays_ms, 0.99):.2f}", f"{_pct(r.gaps_ms, 0.5):.2f}", f"{_pct(r.gaps_ms, 0.99):.2f}")
    console.print(detail)

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    colours = {"paced": "tab:blue", "unpaced": "tab:orange"}
    styles = ["o--", "s:", "o-", "^-.", "v-"]
    for pace in paces:
        for k, w in enumerate(windows):
            rs = [runs[(pace, s, w)] for s in stream_counts]
            style = "o-" if w == after else "o--" if w == before else styles[1 + k % 3]
            alpha = 1.0 if w in (before, after) else 0.5
            label = f"{pace}, window {w:g} ms" + (" (before)" if w == before else " (after)" if w == after else "")
            for ax, ys in zip(axes, ([r.us_per_token for r in rs], [r.tokens_per_s for r in rs],
                                     [_pct(r.delays_ms, 0.99) for r in rs]), strict=True):
                ax.plot(stream_counts, ys, style, color=colours[pace], alpha=alpha, label=label)
    axes[1].axhline(50_000, color="0.5", linestyle=":", linewidth=1, label="goal: 50k tokens/s (64 streams)")
    for ax, ylabel in zip(axes, ("gateway process CPU per output token (µs)", "aggregate tokens/s measured",
                                 "p99 delay engine → client per token (ms, log scale)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(stream_counts, [str(s) for s in stream_counts])
        ax.minorticks_off()
        ax.set_xlabel("concurrent streams through one gateway")
        ax.set_ylabel(ylabel)
        if ax is axes[2]:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle(f"One gateway process relaying replayed outputs: replica coalescing window {before:g} ms (before) vs "
                 f"{after:g} ms (after), others for scale (simulated replica)", fontsize=10)
    fig.tight_layout()
    return table, detail, fig


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter outputs, one measured round")
    parser.add_argument("--streams", default="1,16,64", help="concurrent streams per run (default: 1,16,64)")
    parser.add_argument("--paces", default="paced,unpaced", help="paced, unpaced or both (default)")
    parser.add_argument("--tokens", type=int, default=0, help="output tokens per turn (default 2000; --quick 500)")
    parser.add_argument("--rounds", type=int, default=0, help="measured turns per stream (default 3; --quick 1)")
    parser.add_argument("--windows", default=f"0,2,{COALESCE_WINDOW_S * 1000:g}",
                        help="replica windows in ms; the first is before (default 0,2,the server's default)")
    parser.add_argument("--after-ms", type=float, default=COALESCE_WINDOW_S * 1000,
                        help=f"the window reported as after (default: the server's, {COALESCE_WINDOW_S * 1000:g})")
    parser.add_argument("--max-tokens", type=int, default=COALESCE_MAX_TOKENS,
                        help=f"replica: a batch this long leaves at once (default {COALESCE_MAX_TOKENS})")
    parser.add_argument("--profile", default="", help="cProfile the gateway of one run: PACE,STREAMS,WINDOW_MS,FILE")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    tokens = args.tokens or (500 if args.quick else 2000)
    rounds = args.rounds or (1 if args.quick else 3)
    stream_counts = [int(s) for s in args.streams.split(",") if s.strip()]
    paces = [p.strip() for p in args.paces.split(",") if p.strip()]
    if args.profile:
        pace, streams, window, path = args.profile.split(",")
        run = await bench_one(pace, int(streams), float(window) / 1000, args.max_tokens, tokens, rounds, path)
        console.print(f"{run.tokens} tokens, {run.us_per_token:.1f} µs/token, {run.tokens_per_s:,.0f} tokens/s; "
                      f"profile in {path}")
        return 0
    windows = [float(w) for w in args.windows.split(",") if w.strip()]
    if args.after_ms not in windows:
        windows.append(args.after_ms)
    runs: dict[tuple[str, int, float], Run] = {}
    for pace in paces:
        for s in stream_counts:
            for w in windows:  # every window side by side, one run after the other
                runs[(pace, s, w)] = r = await bench_one(pace, s, w / 1000, args.max_tokens, tokens, rounds)
                console.print(f"{pace} {s:>3} streams, window {w:g} ms: {r.us_per_token:6.1f} µs/token, "
                              f"{r.tokens_per_s:9,.0f} tokens/s, replica msgs/token {r.replica_msgs_per_token:.3f}, "
                              f"p99 delay {_pct(r.delays_ms, 0.99):.2f} ms")
    table, detail, fig = report(runs, windows, args.after_ms, stream_counts, paces)
    short = (f"replayed outputs of {tokens} tokens ('word' repeated; cl100k), {rounds} measured turns per stream, "
             f"streams {args.streams}")
    provenance.stamp(fig, short)
    out = args.out
    written = [provenance.save_figure(fig, out, "relay", dpi=110)]
    written.append(provenance.write_markdown(
        out, "relay", "Relay benchmark: gateway CPU and throughput per output token, replica coalescing window off vs on",
        provenance.provenance(
            f"synthetic: each stream's turns replay an output of {tokens} tokens ('word' then ' word' repeated, "
            f"model {MODEL}: cl100k, ChatML), one unmeasured turn then {rounds} measured stateful turns per stream; "
            f"{args.streams} concurrent streams on one gateway",
            engine=("simulated (the real scheduler and KV block manager, step times from the cost model) in the "
                    "benchmark's process, with the clients; the gateway alone in a child process (its process CPU "
                    "measured with time.process_time_ns around the measured turns, minus the calibrated cost of "
                    "asking and its idle CPU over the wall time); safety off"),
            cost_model=("paced: " + provenance.cost_model("h200", "1b") + " at time scale 1 (real time); unpaced: "
                        + provenance.cost_model("h200", "8b") + " at time scale 0 (no sleeping)"),
            notes=[f"before: the replica's coalescing window {windows[0]:g} ms (a message per engine step unless the "
                   f"gateway reads slower); after: {args.after_ms:g} ms (the server's default), at most "
                   f"{args.max_tokens} tokens a batch; the first tokens of a generation never wait; windows run: "
                   + ", ".join(f"{w:g} ms" for w in windows),
                   "tokens/s per gateway core: 1 s / the gateway's CPU per token, what one gateway process could carry "
                   "were it the bottleneck; tokens/s measured is bounded by the replica and clients where they saturate "
                   "the benchmark's own process",
                   "delay: per token, the client's read time minus the time the engine handed the token to the "
                   "replica's stream (both clocks in this process): replica outbox, both gRPC hops, the gateway; "
                   "gap: between consecutive reads on one stream"]),
        [*provenance.table_markdown(table), "", *provenance.table_markdown(detail), "", "![relay](relay.png)"]))
    for path in written:
        console.print(f"wrote {provenance.rel(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: asyncio.run(main())))
