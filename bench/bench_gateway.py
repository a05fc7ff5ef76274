"""Gateway benchmark: what the stateful protocol, concurrent safety and cache-aware
routing save, each measured against the naive way through the same binary.

1. Per turn of real recorded sessions: stateful deltas (``previous_response_id``) vs a
   stateless full resend (``--stateless``): bytes received, tokens tokenized, and the CPU the
   gateway process spent on the turn (the gateway runs in a process of its own; the stopwatch
   around its synchronous sections is shown as the part of it that it is).
2. TTFT with the safety input check serial vs concurrent with prefill (a guard-model
   classifier served by a simulated replica, both running in modelled real time).
3. Routing over 4 simulated replicas with 32 concurrent sessions: prefix-cache hit rate
   and load imbalance (max/mean prefill tokens) for cache-aware, round-robin and
   least-loaded, with sticky streams and with a new stream every turn.
4. Gateway process CPU per stateful turn by context length (1k, 4k, 16k, 30k tokens), with the
   chat template rendered over the whole conversation every turn (before) vs only the new
   messages (after), for the default model (SmolLM2) and the dummy one (cl100k, ChatML).
Run: .venv/bin/python bench/bench_gateway.py [--traces DIR] [--quick] [--out DIR]
Outputs are replays of recorded sessions (labelled as such); the engines are simulated.
``--traces`` defaults to the bundled ``data/sessions`` (``--quick``: its first 4 sessions).
Writes gateway.md + gateway.png (parts 1 and 2), gateway_routing.md + gateway_routing.png
(part 3) and gateway_cpu.md + gateway_cpu.png (part 4) into ``--out`` (default .state/bench/).

How the gateway's CPU is measured: the gateway runs alone in a child process; around each
turn the benchmark asks it for its process CPU time (``time.process_time_ns``: every thread,
gRPC's included). The cost of asking (calibrated) and the CPU the idle gateway spends anyway
(health polls, measured over a quiet second, times the turn's wall time) are subtracted.
Turns run one at a time, so nothing else runs in that process meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no transport chatter between the tables
import grpc  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common import gc_tuning, grpc_server  # noqa: E402
from loopwire.common.auth import Authenticator  # noqa: E402
from loopwire.common.model_def import load_definition  # noqa: E402
from loopwire.common.recorded import RecordedSession, load_session, user_item  # noqa: E402
from loopwire.gateway.config import BaselineSwitches  # noqa: E402
from loopwire.gateway.factory import start_gateway  # noqa: E402
from loopwire.gateway.safety import GuardModelClassifier, SafetyClassifier  # noqa: E402
from loopwire.gateway.service import GatewayConfig, GatewayServicer  # noqa: E402
from loopwire.inference.server import EngineOptions, add_servicer, build_engine  # noqa: E402
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console(width=140)
QUICK_SESSIONS = 4


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
    n: int, time_scale: float, kv_blocks: int = 0, prefix: str = "sim", gpu: str = "h200", params: str = "8b",
    model: str = "",
) -> tuple[list[str], list]:
    addresses, closers = [], []
    for i in range(n):
        engine = build_engine(EngineOptions(engine="simulated", replica_id=f"{prefix}-{i}", time_scale=time_scale,
                                            kv_blocks=kv_blocks, max_output_tokens=8192, gpu=gpu, model_params=params,
                                            model=model))
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
    gateway = await start_gateway(addresses, routing=routing, poll_interval_s=0.1, authenticator=Authenticator.open(),
                                  classifier=classifier,
                                  config=config or GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    closers.append(gateway.close)
    return Mesh(gateway.stub, gateway.servicer, addresses, closers)


# -- a gateway in a process of its own, for its CPU -------------------------------------------


def _gateway_main(addresses: list[str], config: GatewayConfig, conn: multiprocessing.connection.Connection) -> None:
    """The child: a gateway as ``loopwire gateway`` builds it, answering CPU probes on ``conn``."""
    logging.basicConfig(level=logging.ERROR)

    async def serve() -> None:
        gateway = await start_gateway(addresses, authenticator=Authenticator.open(), config=config)
        gc_tuning.tune_for_serving()  # as every loopwire server is once built
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def answer() -> None:
            try:
                while conn.recv() == "cpu":
                    conn.send(time.process_time_ns())
            except EOFError:
                pass
            loop.call_soon_threadsafe(stopped.set)

        threading.Thread(target=answer, daemon=True).start()
        conn.send(gateway.port)
        await stopped.wait()
        await gateway.close()

    asyncio.run(serve())


def stop_child(conn: Connection, process: multiprocessing.process.BaseProcess) -> None:
    """Ask a benchmark's child process to stop over its pipe; kill it if it has not within 10 s."""
    try:
        conn.send("stop")
    except OSError:
        pass
    process.join(10)
    if process.is_alive():
        process.kill()
        process.join()


class GatewayProcess:
    """A gateway in a child process, and its process CPU time on request."""

    def __init__(self, addresses: list[str], config: GatewayConfig) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_gateway_main, args=(addresses, config, child), daemon=True)
        self.process.start()
        self.port = 0
        self.probe_ns = 0
        self.idle_ns_per_s = 0.0

    async def started(self) -> None:
        for _ in range(1200):
            if self.conn.poll():
                self.port = self.conn.recv()
                return
            if not self.process.is_alive():
                break
            await asyncio.sleep(0.05)
        raise RuntimeError("the gateway process did not start")

    def cpu_ns(self) -> int:
        self.conn.send("cpu")
        return self.conn.recv()

    async def calibrate(self, quiet_s: float = 1.0) -> None:
        """What one probe costs the gateway, and what it spends idle per second (health polls)."""
        pairs = []
        for _ in range(50):
            a = self.cpu_ns()
            pairs.append(self.cpu_ns() - a)
        self.probe_ns = int(statistics.median(pairs))
        a, t = self.cpu_ns(), time.perf_counter()
        await asyncio.sleep(quiet_s)
        self.idle_ns_per_s = max(0.0, (self.cpu_ns() - a - self.probe_ns) / (time.perf_counter() - t))

    def turn_cpu_us(self, cpu_before: int, wall_s: float) -> int:
        """The process CPU of the turn that started at ``cpu_before`` and took ``wall_s``."""
        spent = self.cpu_ns() - cpu_before - self.probe_ns - self.idle_ns_per_s * wall_s
        return max(0, int(spent // 1000))

    def close(self) -> None:
        stop_child(self.conn, self.process)


@dataclass
class ProcessMesh:
    """Simulated replicas in this process, the gateway in its own."""

    stub: gateway_pb2_grpc.GatewayServiceStub
    gateway: GatewayProcess
    closers: list = field(default_factory=list)

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


async def start_process_mesh(config: GatewayConfig, model: str = "") -> ProcessMesh:
    addresses, closers = await start_replicas(1, 0.0, model=model)
    gateway = GatewayProcess(addresses, config)
    closers.append(_closer(gateway.close))
    try:
        await gateway.started()
        await gateway.calibrate()
    except BaseException:
        for close in reversed(closers):
            await close()
        raise
    channel = grpc_server.service_channel(f"127.0.0.1:{gateway.port}")
    closers.append(channel.close)
    return ProcessMesh(gateway_pb2_grpc.GatewayServiceStub(channel), gateway, closers)


def _closer(close: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        close()
    return run


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
    cpu_us: int = 0  # process CPU of the gateway for this turn (0: not measured)


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
    gateway: GatewayProcess | None = None,
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
        cpu_before = gateway.cpu_ns() if gateway else 0
        sent = time.perf_counter()
        await call.write(gateway_pb2.ConverseRequest(create_response=request))
        events, ttft = await read_response(call, sent)
        cpu_us = gateway.turn_cpu_us(cpu_before, time.perf_counter() - sent) if gateway else 0
        done = events[-1].completed
        previous = events[0].response_id
        replica = next((e.created.replica_id for e in events if e.WhichOneof("event") == "created"), "")
        t = done.timings
        results.append(TurnResult(i, t.bytes_received, t.tokens_tokenized, t.gateway_overhead_us, ttft, replica,
                                  done.usage.input_tokens, done.usage.cached_input_tokens, cpu_us))
        new_items = list(turn.followups)
        items += [*done.output, *new_items]
        if progress:
            progress()
    await call.done_writing()
    return results


def load_sessions(directory: Path) -> list[tuple[Path, RecordedSession]]:
    sessions = []
    for path in provenance.session_files(directory):
        try:
            sessions.append((path, load_session(path)))
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
            mesh = await start_process_mesh(GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF,
                                                        baseline=BaselineSwitches(stateless=stateless)))
            try:
                results[name] = [
                    await replay_session(mesh.stub, s, stateless=stateless, max_turns=max_turns,
                                         progress=lambda: progress.advance(task), gateway=mesh.gateway)
                    for s in sessions
                ]
            finally:
                await mesh.close()
    return results


def report_protocol(results: dict[str, list[list[TurnResult]]], data: str) -> tuple[Table, object]:
    table = Table(title="1. Per-turn gateway work over recorded sessions (replayed): stateful deltas vs stateless "
                        "resend")
    for col in ("way", "turns", "bytes received", "tokens tokenized", "gateway process CPU ms",
                "of which stopwatch (sync sections) ms", "process CPU µs/turn (last 10%)"):
        table.add_column(col, justify="right")
    totals = {}
    for name, runs in results.items():
        flat = [t for run in runs for t in run]
        tail = [t for run in runs for t in run[int(len(run) * 0.9):]]
        totals[name] = (sum(t.bytes_received for t in flat), sum(t.tokens_tokenized for t in flat),
                        sum(t.cpu_us for t in flat), sum(t.gateway_us for t in flat))
        table.add_row(name, str(len(flat)), f"{totals[name][0]:,}", f"{totals[name][1]:,}",
                      f"{totals[name][2] / 1000:,.1f}", f"{totals[name][3] / 1000:,.1f}",
                      f"{statistics.mean(t.cpu_us for t in tail):,.0f}")
    a, b = totals["stateless"], totals["stateful"]
    table.add_row("stateless / stateful", "", f"{a[0] / max(1, b[0]):.1f}×", f"{a[1] / max(1, b[1]):.1f}×",
                  f"{a[2] / max(1, b[2]):.1f}×", f"{a[3] / max(1, b[3]):.1f}×", "", style="bold")
    console.print(table)

    fig, axes = plt.subplots(1, 3, figsize=(16, 5.4))
    colours = {"stateful": "tab:green", "stateless": "tab:red"}
    for name, runs in results.items():
        for ax, attr, label in zip(axes, ("bytes_received", "tokens_tokenized", "cpu_us"),
                                   ("bytes received by the gateway", "tokens tokenized",
                                    "gateway process CPU (µs)"),
                                   strict=True):
            # One line per session (a mean over sessions would dip wherever a long session ends).
            for k, run in enumerate(runs):
                ax.plot([t.turn + 1 for t in run], [max(getattr(t, attr), 1) for t in run],
                        color=colours[name], alpha=0.25, linewidth=0.8,
                        label=f"{name}: one line per session" if k == 0 and ax is axes[0] else None)
            # The median over the sessions that reach each turn, while at least half of them do.
            reach = sorted((len(r) for r in runs), reverse=True)[len(runs) // 2] if len(runs) > 1 else len(runs[0])
            median = [statistics.median(getattr(r[i], attr) for r in runs if len(r) > i) for i in range(reach)]
            ax.plot(range(1, reach + 1), [max(v, 1) for v in median], color=colours[name], linewidth=2.2,
                    label=f"{name}: median over sessions" if ax is axes[0] else None)
            ax.set_xlabel("turn (1-based)")
            ax.set_ylabel(f"{label} per turn (log scale)")
            ax.set_yscale("log")
            ax.set_xlim(left=1)
            ax.grid(alpha=0.3, which="major")
    fig.suptitle(f"Gateway work per turn: stateful deltas vs stateless full resend ({data}, replayed; "
                 "simulated engine)", fontsize=10)
    fig.legend(loc="upper center", bbox_to_anchor=(0.5, 0.945), ncol=4, fontsize=8, frameon=False,
               title="medians over the sessions that reach the turn, while at least half of them do", title_fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return table, fig


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
                                        config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF,
                                                                      baseline=BaselineSwitches(safety_serial=serial)))
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


def report_safety(ttfts: dict[str, list[float]]) -> Table:
    table = Table(title="2. TTFT with a guard-model input check (simulated: 70B on B200 serving, 8B guard on H200; "
                        "modelled real time)")
    for col in ("safety check", "turns", "TTFT mean ms", "TTFT p50 ms", "TTFT p90 ms"):
        table.add_column(col, justify="right")
    for name, values in ttfts.items():
        values = sorted(values)
        table.add_row(name, str(len(values)), f"{statistics.mean(values) * 1000:.1f}",
                      f"{values[len(values) // 2] * 1000:.1f}", f"{values[int(len(values) * 0.9)] * 1000:.1f}")
    s, c = statistics.mean(ttfts["serial"]), statistics.mean(ttfts["concurrent"])
    table.add_row("serial / concurrent", "", f"{s / c:.2f}×", "", "", style="bold")
    console.print(table)
    return table


# -- 3. routing -----------------------------------------------------------------------------


def replica_loads(turns: list[TurnResult], replicas: int) -> list[int]:
    """Prompt tokens each simulated replica (sim-0 ...) had to prefill: its routed load."""
    prefill: defaultdict[str, int] = defaultdict(int)
    for t in turns:
        prefill[t.replica] += t.input_tokens - t.cached_tokens
    return [prefill.get(f"sim-{i}", 0) for i in range(replicas)]


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
            loads = replica_loads(flat, 4)
            hit = sum(t.cached_tokens for t in flat) / max(1, sum(t.input_tokens for t in flat))
            rows.append((policy, "sticky stream" if sticky else "new stream per turn", hit,
                         max(loads) / max(1e-9, statistics.mean(loads)), sum(loads),
                         statistics.mean(t.ttft_s for t in flat)))
    return rows


def report_routing(rows: list[tuple], n_sessions: int, turns: int, data: str,
                   time_scale: float) -> tuple[Table, object]:
    table = Table(title=f"3. Routing over 4 simulated replicas, {n_sessions} concurrent replayed sessions, "
                        f"first {turns} turns each")
    for col in ("policy", "streams", "prefix-cache hit rate", "load imbalance (max/mean prefill)", "tokens prefilled",
                f"TTFT mean ms (wall, time scale {time_scale:g})"):
        table.add_column(col, justify="right")
    for policy, mode, hit, imbalance, prefilled, ttft in rows:
        table.add_row(policy, mode, f"{hit:.1%}", f"{imbalance:.2f}", f"{prefilled:,}", f"{ttft * 1000:.1f}")
    console.print(table)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    labels = [f"{p}\n{m.replace('new stream per turn', 'new stream/turn')}" for p, m, *_ in rows]
    colours = ["tab:green" if p == "cache-aware" else "tab:blue" if p == "round-robin" else "tab:purple"
               for p, *_ in rows]
    for ax, values, fmt, ylabel, title in (
        (axes[0], [r[2] * 100 for r in rows], "{:.1f}%", "prefix-cache hit rate (% of input tokens)",
         "prefix-cache hit rate"),
        (axes[1], [r[3] for r in rows], "{:.2f}", "max ÷ mean prefill tokens per replica (1 = even)",
         "load imbalance"),
        (axes[2], [r[5] * 1000 for r in rows], "{:.0f}", f"mean TTFT (wall ms; replicas at time scale {time_scale:g})",
         "mean time to first token"),
    ):
        bars = ax.bar(range(len(rows)), values, color=colours)
        ax.bar_label(bars, labels=[fmt.format(v) for v in values], fontsize=7)
        ax.set_xticks(range(len(rows)), labels, fontsize=7, rotation=30, ha="right", rotation_mode="anchor")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.set_ylim(0, max(values) * 1.15 or 1)
    axes[1].axhline(1, color="0.4", linestyle="--", linewidth=0.8)
    fig.suptitle(f"Routing over 4 simulated replicas (H200 + Llama 8B): {data}", fontsize=10)
    fig.tight_layout()
    return table, fig


# -- 4. gateway CPU per stateful turn by context length --------------------------------------

CONTEXT_BUCKETS = (1_000, 4_000, 16_000, 30_000)
CPU_MODELS = (("default", "SmolLM2-135M-Instruct"), ("dummy:0", "dummy (cl100k, ChatML)"))
CPU_MODES = (("before: full render", False), ("after: new messages only", True))
WARMUP_TURNS = 20  # past the template's first windowed renderings, which are checked against full ones
LONG_OUTPUT_WORDS = 400
BASH = common_pb2.Tool(name="bash", description="Run a shell command",
                       parameters='{"type": "object", "properties": {"command": {"type": "string"}}}')


@dataclass
class CpuTurn:
    context: int  # prompt tokens of the turn
    cpu_us: int  # gateway process CPU
    stopwatch_us: int  # the part in the gateway's synchronous sections
    output_tokens: int
    tokenize_us: int  # the part spent rendering and tokenizing the conversation (thread CPU)


def source_lines() -> list[str]:
    """Real text for tool outputs: this project's own source, line by line."""
    lines = []
    for path in sorted((provenance.ROOT / "services" / "loopwire").rglob("*.py")):
        lines += path.read_text(encoding="utf-8").splitlines(keepends=True)
    return lines


class _Session:
    """One agent session on a Converse stream: tool calls answered with slices of the corpus."""

    def __init__(self, stub: gateway_pb2_grpc.GatewayServiceStub, corpus: list[str], offset: int) -> None:
        self.call = stub.Converse()
        self.corpus = corpus
        self.line = offset
        self.calls = 0
        self.previous = ""

    def output(self, lines: int) -> str:
        text = "".join(self.corpus[(self.line + i) % len(self.corpus)] for i in range(lines))
        self.line += lines
        return text

    def next_call(self) -> common_pb2.FunctionCall:
        self.calls += 1
        return common_pb2.FunctionCall(call_id=f"call_{self.calls}", name="bash",
                                       arguments=f'{{"command": "sed -n {self.line},{self.line + 8}p file.py"}}')

    async def start(self, tokenizer: object, context_tokens: int) -> None:
        """A full first request holding a history of about ``context_tokens`` tokens."""
        items = [user_item("Fix the failing test in this repository.")]
        tokens = 0
        while tokens < context_tokens - 400:
            call = self.next_call()
            out = self.output(40)
            tokens += len(tokenizer.encode(out)) + 40  # type: ignore[attr-defined]
            items += [common_pb2.Item(function_call=call), common_pb2.Item(
                function_call_output=common_pb2.FunctionCallOutput(call_id=call.call_id, output=out))]
        request = gateway_pb2.CreateResponse(instructions="You are a careful software engineer.", tools=[BASH],
                                             input=items, safety_mode=gateway_pb2.SAFETY_MODE_OFF)
        await self._send(request, None, "Looking.")

    async def turn(self, gateway: GatewayProcess | None, text: str = "Next.") -> CpuTurn:
        """One stateful turn: the last call's short output in, a replayed call (and ``text``) out."""
        request = gateway_pb2.CreateResponse(
            previous_response_id=self.previous, safety_mode=gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT,
            input=[common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(
                call_id=f"call_{self.calls}", output=self.output(2)))])
        return await self._send(request, gateway, text)

    async def _send(self, request: gateway_pb2.CreateResponse, gateway: GatewayProcess | None, text: str) -> CpuTurn:
        request.replay.CopyFrom(common_pb2.ReplayOutput(text=text, function_calls=[self.next_call()]))
        request.sampling.CopyFrom(common_pb2.SamplingParams(speculative_decoding=False))
        cpu_before = gateway.cpu_ns() if gateway else 0
        sent = time.perf_counter()
        await self.call.write(gateway_pb2.ConverseRequest(create_response=request))
        events, _ = await read_response(self.call, sent)
        cpu_us = gateway.turn_cpu_us(cpu_before, time.perf_counter() - sent) if gateway else 0
        done = events[-1].completed
        self.previous = events[0].response_id
        return CpuTurn(done.usage.input_tokens, cpu_us, done.timings.gateway_overhead_us, done.usage.output_tokens,
                       done.timings.tokenize_us)

    async def close(self) -> None:
        await self.call.done_writing()


async def bench_cpu(turns: int) -> dict[tuple[str, str], dict[int | str, list[CpuTurn]]]:
    """Per model and way: the measured turns at each context bucket, and ("long") turns with long outputs."""
    corpus = source_lines()
    results: dict[tuple[str, str], dict[int | str, list[CpuTurn]]] = {}
    long_text = " ".join(["word"] * LONG_OUTPUT_WORDS)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("gateway CPU by context length",
                                 total=len(CPU_MODELS) * len(CPU_MODES) * (len(CONTEXT_BUCKETS) + 1))
        for spec, _ in CPU_MODELS:
            tokenizer = load_definition(spec).tokenizer
            for mode, incremental in CPU_MODES:
                mesh = await start_process_mesh(GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF,
                                                                baseline=BaselineSwitches(full_render=not incremental)), model=spec)
                got: dict[int | str, list[CpuTurn]] = {}
                results[(spec, mode)] = got
                try:
                    warm = _Session(mesh.stub, corpus, 0)
                    await warm.start(tokenizer, 500)
                    for _ in range(WARMUP_TURNS):
                        await warm.turn(None)
                    await warm.close()
                    for k, bucket in enumerate(CONTEXT_BUCKETS):
                        session = _Session(mesh.stub, corpus, 997 * (k + 1))
                        await session.start(tokenizer, bucket)
                        await session.turn(None)  # the replica now holds the prefix: appends from here
                        got[bucket] = [await session.turn(mesh.gateway) for _ in range(turns)]
                        await session.close()
                        progress.advance(task)
                    session = _Session(mesh.stub, corpus, 1)
                    await session.start(tokenizer, CONTEXT_BUCKETS[0])
                    await session.turn(None)
                    got["long"] = [await session.turn(mesh.gateway, long_text) for _ in range(turns)]
                    await session.close()
                    progress.advance(task)
                finally:
                    await mesh.close()
    return results


def _relay_us_per_token(runs: dict[int | str, list[CpuTurn]]) -> float:
    """CPU per relayed output token: long-output turns vs short ones at the smallest context."""
    short, long = runs[CONTEXT_BUCKETS[0]], runs["long"]
    d_cpu = statistics.median(t.cpu_us for t in long) - statistics.median(t.cpu_us for t in short)
    d_tokens = statistics.median(t.output_tokens for t in long) - statistics.median(t.output_tokens for t in short)
    return max(0.0, d_cpu / max(1, d_tokens))


def report_cpu(results: dict[tuple[str, str], dict[int | str, list[CpuTurn]]], turns: int) -> tuple[Table, object]:
    before, after = (m for m, _ in CPU_MODES)
    table = Table(title=f"4. Gateway process CPU per stateful turn by context length (median of {turns} turns; "
                        "simulated engine)")
    for col in ("model", "context tokens", "before: full render ms", "after: new messages only ms",
                "before / after", "render+tokenize part: before ms", "after ms", "after: stopwatch part ms",
                "after: relay part ms", "after: beyond relay ms"):
        table.add_column(col, justify="right")
    fig, axes = plt.subplots(1, len(CPU_MODELS), figsize=(13, 4.8), squeeze=False)
    for ax, (spec, label) in zip(axes[0], CPU_MODELS, strict=True):
        runs_b, runs_a = results[(spec, before)], results[(spec, after)]
        slope = _relay_us_per_token(runs_a)
        xs, ys_b, ys_a, ys_sw, ys_beyond, ys_tb, ys_ta = [], [], [], [], [], [], []
        for bucket in CONTEXT_BUCKETS:
            b, a = runs_b[bucket], runs_a[bucket]
            cpu_b = statistics.median(t.cpu_us for t in b) / 1000
            cpu_a = statistics.median(t.cpu_us for t in a) / 1000
            sw_a = statistics.median(t.stopwatch_us for t in a) / 1000
            tok_b = statistics.median(t.tokenize_us for t in b) / 1000
            tok_a = statistics.median(t.tokenize_us for t in a) / 1000
            relay = slope * statistics.median(t.output_tokens for t in a) / 1000
            context = int(statistics.median(t.context for t in a))
            table.add_row(label, f"{context:,}", f"{cpu_b:.2f}", f"{cpu_a:.2f}", f"{cpu_b / max(cpu_a, 1e-9):.1f}×",
                          f"{tok_b:.2f}", f"{tok_a:.2f}", f"{sw_a:.2f}", f"{relay:.2f}", f"{max(0.0, cpu_a - relay):.2f}")
            ys_tb.append(tok_b)
            ys_ta.append(tok_a)
            xs.append(context)
            ys_b.append(cpu_b)
            ys_a.append(cpu_a)
            ys_sw.append(sw_a)
            ys_beyond.append(max(0.0, cpu_a - relay))
        table.add_row(label, "relay cost", "", f"{slope:.1f} µs per output token", "", "", "", "", "", "", style="dim")
        ax.plot(xs, ys_b, "o-", color="tab:red", label="before: full template render every turn")
        ax.plot(xs, ys_a, "o-", color="tab:green", label="after: only the new messages rendered")
        ax.plot(xs, ys_beyond, "o:", color="tab:green", alpha=0.6, label="after, beyond relaying output tokens")
        ax.plot(xs, ys_sw, "s--", color="0.4", label="after: stopwatch part (sync sections)")
        ax.plot(xs, ys_tb, "^--", color="tab:red", alpha=0.6, label="before: render+tokenize part")
        ax.plot(xs, ys_ta, "^--", color="tab:green", alpha=0.6, label="after: render+tokenize part")
        ax.axhline(1.0, color="0.6", linewidth=0.8, linestyle="--")
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x / 1000:.1f}k" for x in xs])
        ax.minorticks_off()
        ax.set_xlabel("context length at the turn (prompt tokens, log scale)")
        ax.set_ylabel("gateway process CPU per turn (ms)")
        ax.set_ylim(bottom=0)
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    console.print(table)
    fig.suptitle(f"Gateway process CPU per stateful turn by context length (median of {turns} turns per point; "
                 "a short tool output in, a ~30-token call out)", fontsize=10)
    fig.tight_layout()
    return table, fig


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=provenance.DATA_SESSIONS,
                        help="recorded sessions (default: data/sessions)")
    parser.add_argument("--quick", action="store_true",
                        help=f"the first {QUICK_SESSIONS} sessions, fewer turns, 8 sessions in the routing part")
    parser.add_argument("--max-turns", type=int, default=0, help="turns per session in part 1 (0: all)")
    parser.add_argument("--sessions", type=int, default=32, help="concurrent sessions in the routing part")
    parser.add_argument("--time-scale", type=float, default=0.25,
                        help="routing part: real seconds per modelled second of the simulated replicas")
    parser.add_argument("--parts", default="1,2,3,4", help="which parts to run (default: 1,2,3,4)")
    parser.add_argument("--cpu-turns", type=int, default=0,
                        help="part 4: measured turns per context bucket (default: 20; --quick: 8)")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    loaded = load_sessions(args.traces)
    if args.quick:
        loaded = loaded[:QUICK_SESSIONS]
    if not loaded:
        raise SystemExit(f"no recorded sessions under {args.traces}")
    sessions = [s for _, s in loaded]
    max_turns = args.max_turns or (10 if args.quick else 0)
    safety_turns = 2 if args.quick else 4
    n_sessions = 8 if args.quick else args.sessions
    routing_turns = 4 if args.quick else 8

    def used(subset: list[tuple[Path, RecordedSession]], limit: int) -> list[tuple[Path, int]]:
        return [(p, min(len(s.turns), limit) if limit else len(s.turns)) for p, s in subset]

    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    written: list[Path] = []
    engine = ("simulated (the real scheduler and KV block manager, step times from the cost model); gateway, "
              "router and replicas in this process on real gRPC servers")
    process_engine = ("simulated (the real scheduler and KV block manager, step times from the cost model) at time "
                      "scale 0, in the benchmark's process; the gateway alone in a child process (its CPU measured "
                      "with time.process_time_ns around each turn, minus the calibrated cost of asking and its idle "
                      "CPU over the turn's wall time)")
    out = args.out
    console.print(f"{len(sessions)} recorded sessions from {provenance.rel(args.traces)}/ "
                  "(outputs replayed; engines simulated)")
    if parts & {"1", "2"}:
        part1 = used(loaded, max_turns)
        short1 = provenance.short_data(part1, f"first {max_turns} of each" if max_turns else "every turn")
        body: list[str] = []
        data: list[str] = []
        fig1 = None
        if "1" in parts:
            protocol_table, fig1 = report_protocol(await bench_protocol(sessions, max_turns), short1)
            body += [*provenance.table_markdown(protocol_table), ""]
            note1 = "every turn" if not max_turns else f"first {max_turns} turns of each"
            data.append(f"part 1: {provenance.describe_sessions(part1, note=note1)}")
        if "2" in parts:
            safety_table = report_safety(await bench_safety(sessions[:3], safety_turns))
            body += [*provenance.table_markdown(safety_table), ""]
            note2 = f"first {safety_turns} turns of each"
            data.append(f"part 2: {provenance.describe_sessions(used(loaded[:3], safety_turns), note=note2)}")
        if fig1 is not None:
            provenance.stamp(fig1, short1)
            written.append(provenance.save_figure(fig1, out, "gateway", dpi=110))
            body.append("![gateway](gateway.png)")
        written.append(provenance.write_markdown(
            out, "gateway", "Gateway benchmark: stateful protocol and concurrent safety check",
            provenance.provenance(
                data,
                engine="part 1: " + process_engine + "; part 2: " + engine + ", in modelled real time (time scale 1)",
                cost_model="part 1: " + provenance.cost_model("h200", "8b") + "; part 2: served model "
                           + provenance.cost_model("b200", "70b") + ", guard " + provenance.cost_model("h200", "8b")),
            body))
    if "3" in parts:
        routing_rows = await bench_routing(sessions, n_sessions, routing_turns, args.time_scale)
        routed = loaded[:n_sessions]
        replayed = sum(min(len(sessions[i % len(sessions)].turns), routing_turns) for i in range(n_sessions))
        short3 = (f"{n_sessions} concurrent replays of {len(routed)} recorded sessions from "
                  f"{provenance.rel(args.traces)}, first {routing_turns} turns each ({replayed} turns)")
        routing_table, routing_fig = report_routing(routing_rows, n_sessions, routing_turns, short3, args.time_scale)
        cycled = f"; {n_sessions} concurrent replays cycling over these" if n_sessions > len(routed) else ""
        provenance.stamp(routing_fig, short3)
        written.append(provenance.save_figure(routing_fig, out, "gateway_routing", dpi=110))
        written.append(provenance.write_markdown(
            out, "gateway_routing", "Gateway benchmark: routing over 4 replicas",
            provenance.provenance(
                f"{provenance.describe_sessions(used(routed, routing_turns), note=f'first {routing_turns} turns of each')}"
                f"{cycled} (each replay's task prefixed with its number, so no two share a prompt)",
                engine=engine + f"; 4 replicas at time scale {args.time_scale:g} (real seconds per modelled second)",
                cost_model=provenance.cost_model("h200", "8b")),
            [*provenance.table_markdown(routing_table), "", "![gateway routing](gateway_routing.png)"]))
    if "4" in parts:
        cpu_turns = args.cpu_turns or (8 if args.quick else 20)
        cpu_table, cpu_fig = report_cpu(await bench_cpu(cpu_turns), cpu_turns)
        short4 = (f"synthetic agent sessions (tool outputs: lines of services/loopwire/*.py), "
                  f"{cpu_turns} measured turns per point")
        provenance.stamp(cpu_fig, short4)
        written.append(provenance.save_figure(cpu_fig, out, "gateway_cpu", dpi=110))
        written.append(provenance.write_markdown(
            out, "gateway_cpu", "Gateway benchmark: process CPU per stateful turn by context length",
            provenance.provenance(
                f"synthetic agent sessions: a full first request holding a history of about N tokens (bash calls and "
                f"their outputs, 40 lines of this project's services/loopwire/*.py each), then {cpu_turns} measured "
                "stateful turns, each a 2-line tool output in and a replayed call of about 30 tokens out; relay cost "
                f"from {cpu_turns} turns with a {LONG_OUTPUT_WORDS}-word output at the smallest context; "
                f"{WARMUP_TURNS} unmeasured turns first in each gateway process",
                engine=process_engine + "; safety stream-then-cut with the lexicon classifier",
                notes=["before: GatewayConfig(baseline=BaselineSwitches(full_render=True)), the whole conversation rendered by the chat "
                       "template on every append (the former behaviour); after: only the new messages rendered "
                       "(gateway/template_window.py)",
                       "models: model_def.load_definition('default') (SmolLM2-135M-Instruct: its tokenizer and chat "
                       "template) and 'dummy:0' (cl100k, ChatML); the simulated engine serves the same definition",
                       "relay part: CPU per output token (long-output vs short-output turns) times the turn's output "
                       "tokens; beyond relay: the rest"]),
            [*provenance.table_markdown(cpu_table), "", "![gateway CPU](gateway_cpu.png)"]))
    for path in written:
        console.print(f"wrote {provenance.rel(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: asyncio.run(main())))
