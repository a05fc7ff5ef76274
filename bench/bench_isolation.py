"""No tenant stalls another (issue 36): tenant "canary"'s small requests, timed idle and beside
each heavy load of tenant "load", on this tree ("after") and on the commit before the work
("before", ``--baseline``), one after the other in the same run on the same machine.

Canaries (tenant "canary", one at a time, taking turns sample by sample):

- ``gateway TTFT``: a fresh Converse stream, a ~40-token user message, replayed output "ok";
  from sending the request to the first output event;
- ``api TTFT``: ``POST /v1/responses`` with ``"stream": true`` (replayed output) to the first
  ``response.output_text.delta``;
- ``CountTokens``: the gateway's unary count of the same small request;
- ``harness start``: ``HarnessService.Run`` with a small task (a one-turn replay), to the first
  event (``RunStarted``); the stream is then cancelled.

Loads (tenant "load", each in its own process, running while the canaries are measured, stopped at
the end of its cell; bounded in requests and time):

- ``prompt20k`` / ``prompt64k``: 3 concurrent Converse streams, each sending a 20k / 64k-token
  user message (real words from the recorded sessions, a fresh nonce first) over and over, full
  requests with ``no_store``, 1 output token;
- ``count64k``: 3 concurrent CountTokens of a 64k-token request;
- ``bodies``: 40 concurrent near-limit compressed bodies to the api (20 zstd, 20 gzip);
- ``frames``: 4 concurrent bodies of ~1.7 M empty zstd frames;
- ``headers``: 5 concurrent requests with 10,000 headers each, without a key;
- ``task10mb``: a 10 MB task to the harness, one after another.

Each cell: start the load, wait until every one of its workers sent its first request, take the
samples (spread over at least ``--cell-s`` seconds, so every phase of a slow load is covered),
stop the load, then wait until the canaries are back near idle (what the load left running
drains) before the next cell. Idle is measured at the start of each mode and at its end, pooled.
The ratio of a cell is its median over the same mode's idle median in the same run. Engines: ``simulated`` (the modelled H200, Llama 8B, paced in real time:
``--time-scale 1``) and ``reference`` (the real SmolLM2-135M on this CPU; its window is 8,192
tokens, so the gateway refuses the 20k / 64k prompts once it has tokenized them: still its load).

The baseline is checked out with ``git worktree add --detach`` into a temporary directory (removed
at the end, also on Ctrl-C) and its services run from there (``PYTHONPATH``), with this venv.

    .venv/bin/python bench/bench_isolation.py [--quick] [--engines simulated,reference] [--out DIR]

Writes isolation.md and isolation.png into ``--out`` (default .state/bench/). ``--quick``: the
simulated engine only, 5 samples per canary and cell, spread over 6 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import multiprocessing as mp
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from rich.console import Console
from rich.table import Table

from loopwire.common.auth import hash_key, write_private_file
from loopwire.common.grpc_server import CHANNEL_OPTIONS
from loopwire.common.recorded import load_session
from loopwire.harness import tenant_volumes
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, harness_pb2, harness_pb2_grpc

import interrupts
import provenance

console = Console() if sys.stdout.isatty() else Console(width=170)
MODES = ("before", "after")
ENGINES = ("simulated", "reference")
CANARIES = ("gateway TTFT", "api TTFT", "CountTokens", "harness start")
LOADS = ("prompt20k", "prompt64k", "count64k", "bodies", "frames", "headers", "task10mb")
LOAD_DESCRIPTIONS = {
    "prompt20k": "3 concurrent Converse streams, a 20k-token user message over and over",
    "prompt64k": "3 concurrent Converse streams, a 64k-token user message over and over",
    "count64k": "3 concurrent CountTokens of a 64k-token request",
    "bodies": "40 concurrent near-limit compressed bodies to the api (20 zstd + 20 gzip)",
    "frames": "4 concurrent bodies of ~1.7 M empty zstd frames to the api",
    "headers": "5 concurrent requests of 10,000 headers each, no key",
    "task10mb": "a 10 MB task to the harness, one after another",
}
GOAL = 2.0  # every canary within 2x its idle median
CANARY_TEXT = ("Please look at the failing test in the parser module, tell me which assertion fails first and why, "
               "and suggest the smallest change to the code that makes it pass again. Request {n}.")
SAMPLE_TIMEOUT_S = 120.0
WARM_UP = 5  # rounds of canaries before the idle ones count
SETTLE_S = 60.0  # at most this long for the canaries to come back near idle after a load
LOAD_MAX_S = 900.0  # a load stops by itself after this long, whatever happens to this process
LOAD_MAX_REQUESTS = 100_000  # per worker


def tenants_config(path: Path) -> dict[str, str]:
    """Two tenants with generous limits (as ``create_dev_config``'s), so no canary or load is
    rate limited: isolation must come from the services, not from a quota."""
    keys = {name: f"lw-{name}-" + secrets.token_urlsafe(24) for name in ("canary", "load")}
    spec = {"requests_per_minute": 600_000, "tokens_per_minute": 10_000_000_000, "concurrent_streams": 256,
            "max_retention_seconds": 900}
    config = {"tenants": {name: {"key_sha256": [hash_key(key)], **spec} for name, key in keys.items()}}
    write_private_file(path, json.dumps(config, indent=2) + "\n")
    return keys


def metadata(key: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {key}"),)


def user_message(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER,
                                                      content=[common_pb2.ContentPart(text=text)]))


# -- the prompt text: real words from the recorded sessions ----------------------------------


def session_text(paths: list[Path], chars: int) -> tuple[str, list[tuple[Path, int]]]:
    """At least ``chars`` characters of what the recorded sessions say (tasks, turns, tool outputs),
    and which sessions it came from."""
    parts: list[str] = []
    used: list[tuple[Path, int]] = []
    size = 0
    while size < chars:
        for path in paths:
            session = load_session(path)
            used.append((path, len(session.turns)))
            for piece in [session.task, *(t.text for t in session.turns),
                          *(o.output for t in session.turns for o in t.tool_outputs)]:
                parts.append(piece)
                size += len(piece) + 2
                if size >= chars:
                    break
            if size >= chars:
                break
    return "\n\n".join(parts)[:chars], list(dict.fromkeys(used))


def count_tokens(address: str, key: str, text: str) -> int:
    with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        reply = gateway_pb2_grpc.GatewayServiceStub(channel).CountTokens(
            gateway_pb2.CountTokensRequest(request=gateway_pb2.CreateResponse(input=[user_message(text)])),
            metadata=metadata(key), timeout=120)
    return int(reply.input_tokens)


def prompt_texts(address: str, key: str, paths: list[Path]) -> tuple[dict[int, str], dict[int, int], list]:
    """Texts of 20k and 64k tokens of the served model's tokenizer: calibrated with the gateway's own
    count of a sample (small enough for any window), then checked (where the gateway counts them)."""
    sample, _ = session_text(paths, 12_000)
    base = count_tokens(address, key, "x")
    per_char = (count_tokens(address, key, sample) - base) / len(sample)
    texts, counted = {}, {}
    used: list[tuple[Path, int]] = []
    for tokens in (20_000, 64_000):
        chars = int(tokens / per_char)
        for _ in range(4):  # the words' mix changes along the sessions: scale to the count, within 2 %
            texts[tokens], used = session_text(paths, chars)
            try:
                counted[tokens] = count_tokens(address, key, texts[tokens]) - base
            except grpc.RpcError:  # a gateway that counts nothing past its window: the sample's rate
                counted[tokens] = 0
                break
            if abs(counted[tokens] - tokens) <= 0.02 * tokens:
                break
            chars = int(chars * tokens / counted[tokens])
    return texts, counted, used


# -- loads: each in its own process ----------------------------------------------------------


@dataclass
class LoadStats:
    requests: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    busy_s: float = 0.0  # summed request latencies
    errors: list[str] = field(default_factory=list)

    def record(self, outcome: str, seconds: float, error: str = "") -> None:
        self.requests += 1
        self.outcomes[outcome] += 1
        self.busy_s += seconds
        if error and len(self.errors) < 3:
            self.errors.append(error[:160])


def load_process(kind: str, spec: dict[str, Any], stop: Any, ready: Any, out: Any) -> None:
    """The entry point of a load's process: run until ``stop`` (or the bounds), then report."""
    stats = LoadStats()
    try:
        asyncio.run(_run_load(kind, spec, stop, ready, stats))
    finally:
        out.put(stats)


async def _run_load(kind: str, spec: dict[str, Any], stop: Any, ready: Any, stats: LoadStats) -> None:
    workers, started = _workers(kind, spec, stats)
    deadline = time.monotonic() + spec.get("max_s", LOAD_MAX_S)
    tasks = [asyncio.create_task(w) for w in workers]
    try:
        while not stop.is_set() and time.monotonic() < deadline and not all(t.done() for t in tasks):
            if started() >= len(workers):
                ready.set()
            await asyncio.sleep(0.02)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _workers(kind: str, spec: dict[str, Any], stats: LoadStats) -> tuple[list[Any], Callable[[], int]]:
    sent: list[int] = []

    def first_sent() -> None:  # a worker's first request is on its way
        sent.append(1)

    key = spec["key"]
    if kind in ("prompt20k", "prompt64k"):
        text = spec["texts"][20_000 if kind == "prompt20k" else 64_000]
        workers = [_converse_worker(spec["gateway"], key, text, stats, first_sent) for _ in range(3)]
    elif kind == "count64k":
        workers = [_count_worker(spec["gateway"], key, spec["texts"][64_000], stats, first_sent) for _ in range(3)]
    elif kind == "task10mb":
        workers = [_task_worker(spec["harness"], key, stats, first_sent)]
    else:
        workers = _http_workers(kind, f"http://{spec['api']}", key, stats, first_sent)
    return workers, lambda: len(sent)


async def _converse_worker(address: str, key: str, text: str, stats: LoadStats, first_sent: Callable[[], None]) -> None:
    requests: asyncio.Queue[gateway_pb2.ConverseRequest | None] = asyncio.Queue()

    async def sending() -> Any:
        while (request := await requests.get()) is not None:
            yield request

    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        call = gateway_pb2_grpc.GatewayServiceStub(channel).Converse(sending(), metadata=metadata(key))
        try:
            for n in range(LOAD_MAX_REQUESTS):
                create = gateway_pb2.CreateResponse(
                    input=[user_message(f"{uuid.uuid4().hex}\n{text}")], no_store=True,
                    sampling=common_pb2.SamplingParams(max_output_tokens=1))
                t0 = time.perf_counter()
                await requests.put(gateway_pb2.ConverseRequest(create_response=create))
                if n == 0:
                    first_sent()
                while True:
                    event = await call.read()
                    if event is grpc.aio.EOF:
                        stats.record("stream ended", time.perf_counter() - t0)
                        return
                    kind = event.WhichOneof("event")
                    if kind == "completed":
                        stats.record("completed", time.perf_counter() - t0)
                        break
                    if kind == "failed":
                        error = event.failed.error
                        stats.record(common_pb2.ErrorCode.Name(error.code), time.perf_counter() - t0, error.message)
                        break
        except grpc.aio.AioRpcError as e:
            stats.record(e.code().name, 0.0, e.details() or "")
        finally:
            call.cancel()


async def _count_worker(address: str, key: str, text: str, stats: LoadStats, first_sent: Callable[[], None]) -> None:
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        for n in range(LOAD_MAX_REQUESTS):
            request = gateway_pb2.CountTokensRequest(request=gateway_pb2.CreateResponse(
                input=[user_message(f"{uuid.uuid4().hex}\n{text}")]))
            t0 = time.perf_counter()
            call = stub.CountTokens(request, metadata=metadata(key), timeout=SAMPLE_TIMEOUT_S)
            if n == 0:
                first_sent()
            try:
                await call
                stats.record("OK", time.perf_counter() - t0)
            except grpc.aio.AioRpcError as e:
                stats.record(e.code().name, time.perf_counter() - t0, e.details() or "")


async def _task_worker(address: str, key: str, stats: LoadStats, first_sent: Callable[[], None]) -> None:
    import isolation_harness_loads

    for n in range(LOAD_MAX_REQUESTS):
        if n == 0:
            first_sent()
        refusal = await isolation_harness_loads.oversized_task(address, key, timeout_s=SAMPLE_TIMEOUT_S)
        stats.record(refusal.code, refusal.latency_s, refusal.message)


def _http_workers(kind: str, url: str, key: str, stats: LoadStats, first_sent: Callable[[], None]) -> list[Any]:
    import isolation_http_loads as http_loads

    exchange = http_loads.exchange

    async def counted(*args: Any, **kwargs: Any) -> bytes:
        # The module's one way onto the wire: the load's first request marks it started (this
        # process only: the load runs in a process of its own), and each answer is tallied.
        first_sent()
        t0 = time.perf_counter()
        reply = await exchange(*args, **kwargs)
        stats.record(f"HTTP {http_loads.statuses(reply)[0]}", time.perf_counter() - t0)
        return reply

    http_loads.exchange = counted
    rounds, duration_s = LOAD_MAX_REQUESTS, LOAD_MAX_S  # until stopped
    if kind == "bodies":
        return [http_loads.compressed_bodies(url, key, encoding=e, concurrency=20, rounds=rounds, duration_s=duration_s)
                for e in ("zstd", "gzip")]
    if kind == "frames":
        return [http_loads.empty_zstd_frames(url, key, bodies=4, rounds=rounds, duration_s=duration_s)]
    if kind == "headers":
        return [http_loads.header_flood(url, concurrency=5, rounds=rounds, duration_s=duration_s)]
    raise ValueError(f"unknown load {kind!r}")


class RunningLoad:
    """A load in its own (spawned) process, started on entry and stopped on exit."""

    def __init__(self, kind: str, spec: dict[str, Any]) -> None:
        self.kind = kind
        ctx = mp.get_context("spawn")
        self.stop, self.ready, self.out = ctx.Event(), ctx.Event(), ctx.Queue()
        self.process = ctx.Process(target=load_process, args=(kind, spec, self.stop, self.ready, self.out),
                                   name=f"load-{kind}", daemon=True)
        self.stats = LoadStats()
        self.ready_s = 0.0

    def __enter__(self) -> RunningLoad:
        t0 = time.monotonic()
        self.process.start()
        while not self.ready.wait(0.1):
            if not self.process.is_alive():
                raise RuntimeError(f"load {self.kind} exited before it started (code {self.process.exitcode})")
            if time.monotonic() - t0 > 180:
                raise RuntimeError(f"load {self.kind} did not start in 180 s")
        self.ready_s = time.monotonic() - t0
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        with contextlib.suppress(Exception):
            self.stats = self.out.get(timeout=20)
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


# -- canaries -------------------------------------------------------------------------------


class CanaryFailed(Exception):
    pass


class CanaryTimedOut(CanaryFailed):
    """No answer within ``SAMPLE_TIMEOUT_S``: counted at the time it waited (a lower bound)."""


def rpc_failed(what: str, e: grpc.RpcError) -> CanaryFailed:
    kind = CanaryTimedOut if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED else CanaryFailed
    return kind(f"{what}: {e.code().name} {e.details()}")


class Canaries:
    """Tenant canary's four small requests against one mesh, each timed in seconds."""

    def __init__(self, mesh: Any, key: str) -> None:
        self.key = key
        self.api = mesh.api
        self.gateway_channel = grpc.insecure_channel(mesh.gateway, options=CHANNEL_OPTIONS)
        self.gateway = gateway_pb2_grpc.GatewayServiceStub(self.gateway_channel)
        self.harness_channel = grpc.insecure_channel(mesh.harness, options=CHANNEL_OPTIONS)
        self.harness = harness_pb2_grpc.HarnessServiceStub(self.harness_channel)
        self.n = 0

    def close(self) -> None:
        self.gateway_channel.close()
        self.harness_channel.close()

    def text(self) -> str:
        self.n += 1
        return CANARY_TEXT.format(n=self.n)

    def sample(self, canary: str) -> float:
        return {"gateway TTFT": self.gateway_ttft, "api TTFT": self.api_ttft, "CountTokens": self.count,
                "harness start": self.harness_start}[canary]()

    def gateway_ttft(self) -> float:
        create = gateway_pb2.CreateResponse(input=[user_message(self.text())], no_store=True,
                                            replay=common_pb2.ReplayOutput(text="ok"))
        requests: Any = _Requests()
        t0 = time.perf_counter()
        requests.put(gateway_pb2.ConverseRequest(create_response=create))
        call = self.gateway.Converse(iter(requests), metadata=metadata(self.key), timeout=SAMPLE_TIMEOUT_S)
        first = 0.0
        try:
            for event in call:
                kind = event.WhichOneof("event")
                if not first and kind in ("text_delta", "tool_call_started"):
                    first = time.perf_counter() - t0
                if kind == "failed":
                    raise CanaryFailed(f"gateway: {common_pb2.ErrorCode.Name(event.failed.error.code)} "
                                       f"{event.failed.error.message}")
                if kind == "completed":
                    break
        except grpc.RpcError as e:
            raise rpc_failed("gateway", e) from None
        finally:
            requests.close()
            call.cancel()
        if not first:
            raise CanaryFailed("gateway: completed without output")
        return first

    def api_ttft(self) -> float:
        body = {"model": "loopwire", "input": self.text(), "stream": True, "store": False,
                "loopwire_replay": {"text": "ok"}}
        host, port = self.api.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=SAMPLE_TIMEOUT_S)
        try:
            t0 = time.perf_counter()
            conn.request("POST", "/v1/responses", json.dumps(body),
                         {"content-type": "application/json", "authorization": f"Bearer {self.key}"})
            reply = conn.getresponse()
            if reply.status != 200:
                raise CanaryFailed(f"api: HTTP {reply.status} {reply.read()[:200]!r}")
            for line in reply:
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "response.output_text.delta":
                    return time.perf_counter() - t0
                if event["type"] in ("error", "response.failed", "response.completed"):
                    raise CanaryFailed(f"api: {event['type']} before any output text")
            raise CanaryFailed("api: the stream ended before any output text")
        except OSError as e:
            raise (CanaryTimedOut if isinstance(e, TimeoutError) else CanaryFailed)(f"api: {e!r}") from None
        finally:
            conn.close()

    def count(self) -> float:
        request = gateway_pb2.CountTokensRequest(request=gateway_pb2.CreateResponse(input=[user_message(self.text())]))
        t0 = time.perf_counter()
        try:
            self.gateway.CountTokens(request, metadata=metadata(self.key), timeout=SAMPLE_TIMEOUT_S)
        except grpc.RpcError as e:
            raise rpc_failed("CountTokens", e) from None
        return time.perf_counter() - t0

    def harness_start(self) -> float:
        script = harness_pb2.ReplayScript(source="isolation canary", turns=[
            harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(text="ok"))])
        start = harness_pb2.StartTask(task=self.text(), replay=script, max_turns=1,
                                      session_id=f"canary-{uuid.uuid4().hex[:12]}")
        requests: Any = _Requests()
        t0 = time.perf_counter()
        requests.put(harness_pb2.RunRequest(start=start))
        call = self.harness.Run(iter(requests), metadata=metadata(self.key), timeout=SAMPLE_TIMEOUT_S)
        try:
            event = next(call)
            elapsed = time.perf_counter() - t0
            if event.WhichOneof("event") != "started":
                raise CanaryFailed(f"harness: first event {event.WhichOneof('event')}: {event}"[:200])
            return elapsed
        except grpc.RpcError as e:
            raise rpc_failed("harness", e) from None
        finally:
            requests.close()
            call.cancel()  # the run stops (INTERRUPTED); the canary is its start


class _Requests:
    """A request stream kept open until closed (a half-closed stream could end the exchange early)."""

    def __init__(self) -> None:
        import queue

        self.queue: queue.Queue[Any] = queue.Queue()

    def put(self, item: Any) -> None:
        self.queue.put(item)

    def close(self) -> None:
        self.queue.put(None)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.queue.get, None)


# -- cells ----------------------------------------------------------------------------------


@dataclass
class Cell:
    samples: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CANARIES})
    failures: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CANARIES})
    timed_out: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CANARIES})
    load: LoadStats | None = None
    ready_s: float = 0.0
    settle_s: float = 0.0
    drift: dict[str, float] = field(default_factory=dict)  # idle: median at the end ÷ at the start


def p(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (NaN when there are none)."""
    return float(np.percentile(values, q * 100)) if values else float("nan")


def measure(canaries: Canaries, samples: int, spread_s: float = 0.0, max_s: float = float("inf")) -> Cell:
    """``samples`` of each canary, one at a time, the canaries taking turns; round ``i`` starts no
    sooner than ``i * spread_s / samples`` in, so a cell covers every phase of a slow load, and no
    round starts after ``max_s`` (a load that stalls the canaries for minutes gets fewer samples)."""
    cell = Cell()
    t0 = time.monotonic()
    for i in range(samples):
        if (wait := t0 + i * spread_s / samples - time.monotonic()) > 0:
            time.sleep(wait)
        if i and time.monotonic() - t0 > max_s:
            break
        order = CANARIES[i % len(CANARIES):] + CANARIES[: i % len(CANARIES)]
        for canary in order:
            started = time.perf_counter()
            try:
                cell.samples[canary].append(canaries.sample(canary))
            except CanaryTimedOut as e:
                cell.samples[canary].append(time.perf_counter() - started)
                cell.timed_out[canary].append(str(e))
            except CanaryFailed as e:
                cell.failures[canary].append(str(e))
    return cell


def pooled(*cells: Cell) -> Cell:
    out = Cell()
    for cell in cells:
        for canary in CANARIES:
            out.samples[canary] += cell.samples[canary]
            out.failures[canary] += cell.failures[canary]
            out.timed_out[canary] += cell.timed_out[canary]
    return out


def settle(canaries: Canaries, idle: Cell) -> float:
    """Wait until what a load left running has drained: every canary within 3x its idle median
    (plus 5 ms), or ``SETTLE_S``. Returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < SETTLE_S:
        quiet = True
        for canary in CANARIES:
            try:
                quiet &= canaries.sample(canary) <= 3 * p(idle.samples[canary], 0.5) + 0.005
            except CanaryFailed:
                quiet = False
        if quiet:
            break
    return time.monotonic() - t0


def start(state: Path, env: dict[str, str], extra_args: dict[str, list[str]], attempts: int = 3) -> Any:
    """``start_mesh``, tried again when a service is not healthy in time (a busy machine, a port
    taken meanwhile); each failure shows the end of that attempt's service logs."""
    for attempt in range(1, attempts + 1):
        state_dir = state / f"attempt{attempt}"
        try:
            return interrupts.start_mesh(state_dir, api=True, env=env, extra_args=extra_args)
        except (TimeoutError, RuntimeError) as e:
            console.print(f"[yellow]the mesh did not start ({e}); attempt {attempt} of {attempts}[/]")
            for log in sorted((state_dir / "logs").glob("*.log")):
                tail = log.read_text(errors="replace").splitlines()[-5:]
                console.print(f"  {log.name}: " + "\n    ".join(tail), markup=False)
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def run_mode(mode: str, engine: str, args: argparse.Namespace, auth: Path, keys: dict[str, str],
             env: dict[str, str], texts: dict[str, Any]) -> dict[str, Cell]:
    """Start one mesh (this tree or the baseline), time the canaries idle and beside each load."""
    inference = (["--engine", "simulated", "--time-scale", f"{args.time_scale:g}"] if engine == "simulated"
                 else ["--engine", "reference", "--model", args.model])
    auth_args = ["--auth-config", str(auth)]
    cells: dict[str, Cell] = {}
    with tempfile.TemporaryDirectory(prefix=f"loopwire-bench-isolation-{mode}-") as state:
        mesh = start(Path(state), env, {"inference": inference, "gateway": auth_args, "api": auth_args,
                                        "harness": auth_args})
        canaries = Canaries(mesh, keys["canary"])
        try:
            if not texts:
                texts.update(zip(("texts", "counted", "used"),
                                 prompt_texts(mesh.gateway, keys["load"], args.sessions), strict=True))
            measure(canaries, WARM_UP)  # connections, first-call setup, the first sessions' storage
            idle_start = measure(canaries, args.samples, args.cell_s)
            cells["idle"] = idle_start
            console.print(f"  {engine} {mode} idle: " + ", ".join(
                f"{c} {p(idle_start.samples[c], 0.5) * 1e3:.1f} ms" for c in CANARIES))
            spec = {"key": keys["load"], "gateway": mesh.gateway, "api": mesh.api, "harness": mesh.harness,
                    "texts": texts["texts"]}
            for kind in args.loads:
                with RunningLoad(kind, spec) as load:
                    cell = measure(canaries, args.samples, args.cell_s, args.cell_max_s)
                cell.load, cell.ready_s = load.stats, load.ready_s
                cell.settle_s = settle(canaries, idle_start)
                cells[kind] = cell
                console.print(f"  {engine} {mode} {kind}: " + ", ".join(
                    f"{c} {ratio(cells, kind, c):.1f}x" for c in CANARIES)
                    + f"; load {cell.load.requests} requests {dict(cell.load.outcomes)}; settled in "
                    f"{cell.settle_s:.1f} s")
            # Idle again at the end, pooled with the first: the machine's own drift over the mode
            # counts against no load in particular.
            idle_end = measure(canaries, args.samples, args.cell_s)
            cells["idle"] = pooled(idle_start, idle_end)
            cells["idle"].drift = {c: p(idle_end.samples[c], 0.5) / p(idle_start.samples[c], 0.5) for c in CANARIES}
        finally:
            canaries.close()
            interrupts.stop(mesh)
            tenant_volumes.unmount_below(state)  # the harness's tenant volumes outlive it, by design
    return cells


def ratio(cells: dict[str, Cell], kind: str, canary: str) -> float:
    return p(cells[kind].samples[canary], 0.5) / p(cells["idle"].samples[canary], 0.5)


# -- the baseline ---------------------------------------------------------------------------


@contextlib.contextmanager
def baseline_tree(rev: str) -> Iterator[tuple[Path, str]]:
    """The baseline commit checked out in a temporary worktree (removed on the way out)."""
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=provenance.ROOT,
                           capture_output=True, text=True)
    if found.returncode:
        raise SystemExit(f"--baseline {rev}: no such commit in this checkout (the 'before' mode runs it)")
    commit = found.stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="loopwire-bench-isolation-baseline-"))
    tree = tmp / "tree"
    added = subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=provenance.ROOT,
                           capture_output=True, text=True)
    if added.returncode:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"git worktree add {rev} failed: {added.stderr.strip()}")
    try:
        yield tree, commit
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=provenance.ROOT,
                       capture_output=True, text=True)
        subprocess.run(["git", "worktree", "prune"], cwd=provenance.ROOT, capture_output=True, text=True)
        shutil.rmtree(tmp, ignore_errors=True)


def check_imports(env: dict[str, str], expected: Path) -> str:
    """Where ``loopwire`` comes from for a service started with ``env``; refuses a mismatch."""
    where = subprocess.run([sys.executable, "-c", "import loopwire; print(loopwire.__file__)"],
                           env={**os.environ, **env}, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(expected.resolve()):
        raise SystemExit(f"the services would import loopwire from {where}, not from {expected}")
    return where


# -- reporting ------------------------------------------------------------------------------


def ms(s: float) -> str:
    return "—" if s != s else f"{s * 1e3:,.1f}"


def fmt_ratio(r: float) -> str:
    if r != r:
        return "—"
    text = f"{r:.1f}x" if r >= 9.95 else f"{r:.2f}x"
    return f"[bold red]{text} !![/]" if r > GOAL else text


def table(engine: str, results: dict[str, dict[str, Cell]], args: argparse.Namespace) -> Table:
    t = Table(title=f"{engine}: canary of tenant canary beside each load of tenant load "
                    f"(median of {args.samples}; ratio: loaded median ÷ idle median, same mode and run; "
                    f"!! over {GOAL:g}x)")
    for col in ("load", "canary", "before p50 ms", "before p90 ms", "before ratio", "after p50 ms", "after p90 ms",
                "after ratio"):
        t.add_column(col, justify="left" if col in ("load", "canary") else "right")
    for kind in ("idle", *args.loads):
        for canary in CANARIES:
            row = [kind, canary]
            for mode in MODES:
                cell = results[mode][kind]
                values = cell.samples[canary]
                notes = [f"n={len(values)}"] if len(values) < args.samples else []
                notes += [f"{len(cell.timed_out[canary])} timed out"] if cell.timed_out[canary] else []
                notes += [f"{len(cell.failures[canary])} failed"] if cell.failures[canary] else []
                row += [ms(p(values, 0.5)) + (f" ({', '.join(notes)})" if notes else ""), ms(p(values, 0.9)),
                        "1.00x" if kind == "idle" else fmt_ratio(ratio(results[mode], kind, canary))]
            t.add_row(*row)
    return t


def load_table(engine: str, results: dict[str, dict[str, Cell]], args: argparse.Namespace) -> Table:
    t = Table(title=f"{engine}: what each load did during its cell")
    for col in ("load", "mode", "started in s", "requests", "answers", "mean s per request", "settled in s",
                "first error"):
        t.add_column(col, justify="right" if col in ("started in s", "requests", "mean s per request",
                                                       "settled in s") else "left")
    for kind in args.loads:
        for mode in MODES:
            cell = results[mode][kind]
            stats = cell.load or LoadStats()
            t.add_row(kind, mode, f"{cell.ready_s:.1f}", str(stats.requests),
                      ", ".join(f"{k} {v}" for k, v in stats.outcomes.most_common()),
                      f"{stats.busy_s / stats.requests:.2f}" if stats.requests else "—", f"{cell.settle_s:.1f}",
                      (stats.errors[0] if stats.errors else "")[:100])
    return t


def failures(all_results: dict[str, dict[str, dict[str, Cell]]]) -> list[str]:
    out = []
    for engine, results in all_results.items():
        for mode, cells in results.items():
            for kind, cell in cells.items():
                for canary in CANARIES:
                    for what, errors in (("failed", cell.failures[canary]), ("timed out", cell.timed_out[canary])):
                        if errors:
                            out.append(f"- {engine} {mode} {kind} {canary}: {len(errors)} {what}, e.g. "
                                       f"{errors[0][:200]}")
    return out


def goal_line(all_results: dict[str, dict[str, dict[str, Cell]]], loads: list[str]) -> list[str]:
    lines = []
    for mode in MODES:
        ratios = [(ratio(results[mode], kind, c), engine, kind, c) for engine, results in all_results.items()
                  for kind in loads for c in CANARIES]
        over = [r for r in ratios if not r[0] <= GOAL]
        worst = max(ratios, key=lambda r: r[0] if r[0] == r[0] else float("inf"))
        lines.append(f"- {mode}: {len(ratios) - len(over)} of {len(ratios)} ratios within {GOAL:g}x idle; worst "
                     f"{worst[0]:.1f}x ({worst[1]}, {worst[2]}, {worst[3]})"
                     + (f"; over {GOAL:g}x: " + ", ".join(f"{e} {k} {c} {r:.1f}x" for r, e, k, c in over)
                        if over else ""))
    return lines


def plot(all_results: dict[str, dict[str, dict[str, Cell]]], loads: list[str], data: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = list(all_results)
    fig, axes = plt.subplots(len(engines), 1, figsize=(max(9, 1.1 * len(loads) * len(CANARIES) / 2), 4.4 * len(engines)),
                             squeeze=False)
    labels = [f"{kind}\n{c}" for kind in loads for c in CANARIES]
    x = np.arange(len(labels))
    for ax, engine in zip(axes[:, 0], engines, strict=True):
        for i, (mode, color) in enumerate((("before", "tab:red"), ("after", "tab:green"))):
            values = [ratio(all_results[engine][mode], kind, c) for kind in loads for c in CANARIES]
            bars = ax.bar(x + (i - 0.5) * 0.4, values, 0.4, color=color, label=mode)
            ax.bar_label(bars, [(f"{v:.1f}x" if v < 10 else f"{v:.0f}x") if v > GOAL else "" for v in values], fontsize=6, padding=1)
        ax.axhline(GOAL, color="0.2", linestyle="--", linewidth=1, label=f"goal: {GOAL:g}x idle")
        ax.set_yscale("log")
        ax.set_ylabel("canary median ÷ idle median (log)")
        ax.set_xticks(x, labels, fontsize=6.5, rotation=90)
        ax.set_title(f"{engine}: another tenant's canaries beside each load, before vs after", fontsize=10)
        ax.grid(axis="y", alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    provenance.stamp(fig, data)
    return fig


def write_results(args: argparse.Namespace, all_results: dict[str, dict[str, dict[str, Cell]]],
                  prompts: dict[str, dict[str, Any]], commit: str, imports: dict[str, str], wall: float) -> None:
    """The tables on stdout, isolation.md and isolation.png for the engines measured so far."""
    engines = list(all_results)
    tables = []
    for engine in engines:
        tables += [table(engine, all_results[engine], args), load_table(engine, all_results[engine], args)]
    for t in tables:
        console.print(t)
    goal = goal_line(all_results, args.loads)
    console.print("\n".join(goal))
    used = next(iter(prompts.values()))["used"]
    counted = "; ".join(f"{e}: " + ", ".join(f"{k // 1000}k prompt {v:,} tokens" if v else
                                             f"{k // 1000}k prompt not counted (over the window)"
                                             for k, v in prompts[e]["counted"].items()) for e in engines)
    header = provenance.provenance(
        provenance.describe_sessions(used, note="their words make the 20k- and 64k-token prompts"),
        engine=", ".join(
            f"simulated (`--engine simulated --time-scale {args.time_scale:g}`: H200, Llama 8B, paced in real time)"
            if e == "simulated" else f"reference ({args.model}: SmolLM2-135M on this CPU, window 8,192 tokens)"
            for e in engines),
        cost_model=provenance.cost_model("h200", "8b") if "simulated" in engines else "",
        notes=[f"before: baseline {args.baseline} ({commit[:12]}), checked out in a temporary git worktree, its "
               f"services importing loopwire from there ({provenance.rel(imports['before']).split('/services/')[-1]} "
               "under the worktree's services/); after: this tree; the same venv, one after the other, never at "
               "the same time (order alternating per engine)",
               f"tokens of the long prompts, as the gateway counted them: {counted}",
               f"{args.samples} samples per canary and cell; real time of the run {wall:,.0f} s"])
    loads_text = [f"- `{k}`: {LOAD_DESCRIPTIONS[k]}" for k in args.loads]
    body = ["Two tenants on one mesh (gateway, api, harness, one inference replica). The canaries of tenant "
            "`canary` run one at a time: gateway TTFT (a fresh Converse stream, ~40-token message, replayed "
            "output, to the first output event), api TTFT (`POST /v1/responses` streaming, to the first "
            "`response.output_text.delta`), `CountTokens` of the same request, and a harness start (`Run`, a "
            "small task, to `RunStarted`). Each load of tenant `load` runs in a process of its own while the "
            "canaries are measured:", "", *loads_text, "",
            "Ratio: the cell's median ÷ the idle median of the same mode in the same run; **goal: every ratio "
            f"≤ {GOAL:g}x idle** (!! marks one over it). In a cell, n=k: fewer samples than asked (no round "
            f"starts after {args.cell_max_s:g} s of a cell); timed out: no answer in {SAMPLE_TIMEOUT_S:g} s, counted "
            "at that time; failed: left out.", "", *goal, "",
            "On the reference engine (window 8,192 tokens) the gateway refuses the 20k and 64k prompts once it "
            "has tokenized them: what they cost the gateway is still the load.", ""]
    for t in tables:
        body += [*provenance.table_markdown(t), ""]
    body += ["Idle is measured at the start of each mode and again at its end, and the two pooled; how much the "
             "machine itself drifted over a mode (idle median at the end ÷ at the start):", "",
             *(f"- {e} {m}: " + ", ".join(f"{c} {d:.2f}x" for c, d in all_results[e][m]["idle"].drift.items())
               for e in engines for m in MODES), ""]
    if fails := failures(all_results):
        body += [f"Canary samples that failed (left out of the percentiles) or timed out (after {SAMPLE_TIMEOUT_S:g} s; "
                 "counted at the time waited, a lower bound):", "", *fails, ""]
    body += ["![isolation](isolation.png)"]
    png = provenance.save_figure(plot(all_results, args.loads, f"isolation, {', '.join(engines)}"), args.out,
                                 "isolation")
    md = provenance.write_markdown(args.out, "isolation", "No tenant stalls another: canaries beside heavy loads",
                                   header, body)
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="the simulated engine only, 5 samples (unless given)")
    parser.add_argument("--samples", type=int, default=12, help="samples per canary and cell (default: 12; --quick: 5)")
    parser.add_argument("--cell-s", type=float, default=15.0,
                        help="each cell's samples spread over at least this many seconds (default: 15; --quick: 6)")
    parser.add_argument("--cell-max-s", type=float, default=150.0,
                        help="no new round of canaries after this many seconds of a cell (default: %(default)s)")
    parser.add_argument("--engines", default="", help="comma-separated, of simulated,reference "
                                                      "(default: both; --quick: simulated)")
    parser.add_argument("--loads", default=",".join(LOADS), help=f"comma-separated, of {','.join(LOADS)} (default: all)")
    parser.add_argument("--baseline", default="e8f7bdf", help="the commit measured as 'before' (default: %(default)s)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="the simulated engine's real seconds per modelled second (default: %(default)s)")
    parser.add_argument("--model", default="default", help="the reference engine's model (default: SmolLM2-135M)")
    parser.add_argument("--data", default=str(provenance.DATA_SESSIONS),
                        help="recorded sessions whose words make the long prompts (directory or file)")
    provenance.add_out_argument(parser)
    args = parser.parse_args(argv[1:])
    if args.quick and args.samples == parser.get_default("samples"):
        args.samples = 5
    if args.quick and args.cell_s == parser.get_default("cell_s"):
        args.cell_s = 6.0
    engines = [e for e in (args.engines or ("simulated" if args.quick else ",".join(ENGINES))).split(",") if e]
    args.loads = [k for k in args.loads.split(",") if k]
    for name, given, known in (("engine", engines, ENGINES), ("load", args.loads, LOADS)):
        if unknown := [g for g in given if g not in known]:
            parser.error(f"unknown {name}(s) {', '.join(unknown)}: choose from {', '.join(known)}")
    args.sessions = provenance.session_files(args.data)
    if not args.sessions:
        parser.error(f"no recorded sessions under {args.data}")
    all_results: dict[str, dict[str, dict[str, Cell]]] = {}
    prompts: dict[str, dict[str, Any]] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loopwire-bench-isolation-") as tmp, \
            baseline_tree(args.baseline) as (tree, commit):
        auth = Path(tmp) / "auth.json"
        keys = tenants_config(auth)
        envs = {"before": {"PYTHONPATH": str(tree / "services")}, "after": {}}
        imports = {"before": check_imports(envs["before"], tree / "services"),
                   "after": check_imports(envs["after"], provenance.ROOT / "services")}
        for i, engine in enumerate(engines):
            prompts[engine] = {}
            all_results[engine] = {}
            for mode in (MODES if i % 2 == 0 else MODES[::-1]):  # alternate who goes first
                console.print(f"[bold]{engine}, {mode}[/] ({'baseline ' + commit[:12] if mode == 'before' else 'this tree'})")
                all_results[engine][mode] = run_mode(mode, engine, args, auth, keys, envs[mode], prompts[engine])
            # Written after each engine, so a later failure keeps what was measured.
            write_results(args, all_results, prompts, commit, imports, time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: main(sys.argv)))
