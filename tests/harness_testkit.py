"""Test kit of the harness tests: a fake gateway on a real grpc.aio server, an in-process
harness on another, and helpers to drive Run streams and harness subprocesses.

The fake gateway keeps real Responses-style state (transcripts by response id), emits the
requested replay output as streamed events, and records every request it received.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from loopwire.common.auth import Authenticator, hash_key
from loopwire.common.grpc_server import make_server, service_channel
from loopwire.harness.config import HarnessConfig
from loopwire.harness.server import build
from loopwire.mesh import free_port, wait_healthy
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, harness_pb2, harness_pb2_grpc

REPO = Path(__file__).resolve().parents[1]


def call(name: str, args: str, call_id: str = "") -> common_pb2.FunctionCall:
    return common_pb2.FunctionCall(call_id=call_id, name=name, arguments=args)


def answer(text: str = "", *calls: common_pb2.FunctionCall) -> common_pb2.ReplayOutput:
    return common_pb2.ReplayOutput(text=text, function_calls=list(calls))


class FakeGateway(gateway_pb2_grpc.GatewayServiceServicer):
    """Plays the model: emits each request's `replay` output (or the next of `script`)."""

    def __init__(self) -> None:
        self.script: list[common_pb2.ReplayOutput] = []
        self.requests: list[gateway_pb2.CreateResponse] = []
        self.holds: list[gateway_pb2.HoldKv] = []  # HoldKv requests, in order
        self.metadata: list[dict[str, str]] = []
        self.streams = 0
        self.cancelled_streams = 0
        self.forget_next_delta = False
        self.unavailable_next = 0  # answer this many requests with a retryable UNAVAILABLE
        self.call_gap_s = 0.0  # generation time between two tool calls of one response
        self.first_token_delay_s = 0.0
        # Awaited before a response's first token / before each of its calls is emitted: a test holds
        # the "model" there until a condition it can observe (see `released`), instead of a fixed delay.
        self.before_output: Callable[[gateway_pb2.CreateResponse], Awaitable[None]] | None = None
        self.before_call: Callable[[common_pb2.FunctionCall], Awaitable[None]] | None = None
        self.prefill_progress: list[tuple[int, int]] = []  # (processed, total) sent before each response's text
        self.unsafe_output = False  # cut every response with a safety verdict
        # Tokens the "model" counts per prompt item (the usage it reports); None: 10 per item.
        self.item_tokens: Callable[[common_pb2.Item], int] | None = None
        self.context_length = 0  # what GetModel tells
        self.template_lays_out_tools = True
        self.transcripts: dict[str, list[common_pb2.Item]] = {}
        self.last_transcript: list[common_pb2.Item] = []
        self.call_done_us: dict[str, int] = {}
        self.completed_us: list[int] = []
        self._responses = 0

    async def GetModel(self, request, context):  # noqa: N802, ANN001, ANN201
        return gateway_pb2.GetModelResponse(name="fake", context_length=self.context_length, tool_call_format="hermes",
                                            template_lays_out_tools=self.template_lays_out_tools)

    async def Converse(self, request_iterator, context):  # noqa: N802
        self.streams += 1
        self.metadata.append(dict(context.invocation_metadata()))
        try:
            async for request in request_iterator:
                if request.WhichOneof("request") == "hold_kv":
                    self.holds.append(request.hold_kv)
                    known = request.hold_kv.response_id in self.transcripts
                    yield gateway_pb2.ConverseResponse(response_id=request.hold_kv.response_id, kv_held=gateway_pb2.KvHeld(
                        blocks=7 if known and request.hold_kv.retention_seconds else 0, replica_id="fake"))
                    continue
                if request.WhichOneof("request") != "create_response":
                    continue
                async for event in self._respond(request.create_response):
                    yield event
        except asyncio.CancelledError:
            self.cancelled_streams += 1
            raise

    async def _respond(self, req: gateway_pb2.CreateResponse) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        self.requests.append(req)
        if self.unavailable_next:
            self.unavailable_next -= 1
            yield gateway_pb2.ConverseResponse(failed=gateway_pb2.ResponseFailed(error=common_pb2.Error(
                code=common_pb2.ERROR_CODE_UNAVAILABLE, message="no healthy inference replica", retryable=True,
                retry_after_ms=10)))
            return
        if req.previous_response_id:
            if self.forget_next_delta or req.previous_response_id not in self.transcripts:
                self.forget_next_delta = False
                self.transcripts.clear()
                yield gateway_pb2.ConverseResponse(failed=gateway_pb2.ResponseFailed(error=common_pb2.Error(
                    code=common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND, message="unknown response id",
                    field="create_response.previous_response_id")))
                return
            held = self.transcripts[req.previous_response_id]
        else:
            held = []
        transcript = [*held, *req.input]
        self.last_transcript = transcript
        self._responses += 1
        rid = f"resp_{self._responses}"
        yield gateway_pb2.ConverseResponse(response_id=rid, created=gateway_pb2.ResponseCreated(response_id=rid))
        out = req.replay if req.HasField("replay") else self.script.pop(0)
        await asyncio.sleep(self.first_token_delay_s)
        if self.before_output is not None:
            await self.before_output(req)
        for processed, total in self.prefill_progress:
            yield gateway_pb2.ConverseResponse(response_id=rid, prefill_progress=common_pb2.PrefillProgress(
                processed_tokens=processed, total_tokens=total))
        for i in range(0, len(out.text), 7):
            yield gateway_pb2.ConverseResponse(response_id=rid, text_delta=gateway_pb2.TextDelta(text=out.text[i:i + 7]))
        output: list[common_pb2.Item] = []
        if out.text or not out.function_calls:
            output.append(common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=out.text)])))
        for i, c in enumerate(out.function_calls):
            if i and self.call_gap_s:
                await asyncio.sleep(self.call_gap_s)
            fc = common_pb2.FunctionCall(call_id=c.call_id or f"call_{rid}_{i}", name=c.name, arguments=c.arguments)
            if self.before_call is not None:
                await self.before_call(fc)
            yield gateway_pb2.ConverseResponse(response_id=rid, tool_call_started=gateway_pb2.ToolCallStarted(
                call_id=fc.call_id, name=fc.name, index=i))
            self.call_done_us[fc.call_id] = time.time_ns() // 1000
            yield gateway_pb2.ConverseResponse(response_id=rid, tool_call_done=gateway_pb2.ToolCallDone(call=fc, index=i))
            output.append(common_pb2.Item(function_call=fc))
        if self.unsafe_output:
            yield gateway_pb2.ConverseResponse(response_id=rid, safety=gateway_pb2.SafetyVerdict(
                stage=gateway_pb2.SAFETY_STAGE_OUTPUT, allowed=False, category="S2", detail="non-violent crime"))
        if not req.no_store:
            self.transcripts[rid] = [*transcript, *output]
        self.completed_us.append(time.time_ns() // 1000)
        yield gateway_pb2.ConverseResponse(response_id=rid, completed=gateway_pb2.ResponseCompleted(
            finish_reason=common_pb2.FINISH_REASON_TOOL_CALLS if out.function_calls else common_pb2.FINISH_REASON_STOP,
            usage=common_pb2.Usage(input_tokens=sum(map(self.item_tokens, transcript)) if self.item_tokens
                                   else 10 * len(transcript), cached_input_tokens=10 * len(held),
                                   output_tokens=len(out.text) + 1),
            timings=common_pb2.Timings(ttft_us=100, tokens_tokenized=10 * len(req.input)),
            output=output))


async def start_server(add, servicer) -> tuple[grpc.aio.Server, str]:  # noqa: ANN001
    server = make_server()
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@dataclass
class Harness:
    """An in-process harness on a real gRPC server, with its fake gateway."""

    stub: harness_pb2_grpc.HarnessServiceStub
    gateway: FakeGateway
    config: HarnessConfig
    service: object
    tmp: Path
    address: str = ""
    closers: list = field(default_factory=list)

    async def run(self, *requests: harness_pb2.RunRequest, timeout: float = 60) -> list[harness_pb2.RunResponse]:
        """Send the requests, half-close, and collect events until the harness ends the stream."""
        return [e async for e in self.stub.Run(iter(requests), timeout=timeout)]

    async def start(self, task: str = "do the task", **kwargs) -> list[harness_pb2.RunResponse]:  # noqa: ANN003
        return await self.run(harness_pb2.RunRequest(start=harness_pb2.StartTask(task=task, **kwargs)))

    async def session(self, session_id: str) -> harness_pb2.GetSessionResponse:
        return await self.stub.GetSession(harness_pb2.GetSessionRequest(session_id=session_id))

    async def watch(self, request: harness_pb2.RunRequest,
                    on_event: Callable[[harness_pb2.RunResponse], None], timeout: float = 60) -> list[harness_pb2.RunResponse]:
        """Like `run`, calling ``on_event`` with each event as it arrives (the run goes on meanwhile)."""
        events = []
        async for event in self.stub.Run(iter([request]), timeout=timeout):
            events.append(event)
            on_event(event)
        return events


@contextlib.asynccontextmanager
async def harness_env(tmp: Path, **config: object) -> AsyncIterator[Harness]:
    gateway = FakeGateway()
    gw_server, gw_addr = await start_server(gateway_pb2_grpc.add_GatewayServiceServicer_to_server, gateway)
    cfg = HarnessConfig(gateway=gw_addr, api_key="test-key", workspace_root=tmp / "workspaces",
                        shell_timeout=20, background_after=15)
    for k, v in config.items():
        setattr(cfg, k, v)
    service, store = build(cfg, tmp / "harness.db", two_tenant_authenticator(tmp))
    server, addr = await start_server(harness_pb2_grpc.add_HarnessServiceServicer_to_server, service)
    channel = service_channel(addr, TENANT_KEYS["t1"])  # every call as tenant t1, key "test-key"
    try:
        yield Harness(harness_pb2_grpc.HarnessServiceStub(channel), gateway, cfg, service, tmp, addr)
    finally:
        await channel.close()
        await server.stop(0)
        await gw_server.stop(0)
        store.close()


TENANT_KEYS = {"t1": "test-key", "t2": "other-tenant-key"}


def two_tenant_authenticator(tmp: Path) -> Authenticator:
    """Two tenants with one key each, in the gateway's auth file format; t1 may hold KV for an hour,
    t2 not at all (the default policy)."""
    path = tmp / "auth.json"
    tenants: dict = {t: {"key_sha256": [hash_key(k)]} for t, k in TENANT_KEYS.items()}
    tenants["t1"]["max_retention_seconds"] = 3600
    path.write_text(json.dumps({"tenants": tenants}))
    return Authenticator.from_file(path)


async def released(gate: asyncio.Event, within: float = 30.0) -> None:
    """Wait until the test opens ``gate``, at most ``within`` s (then go on: the test's assertions tell)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(gate.wait(), within)


async def until(condition: Callable[[], object], what: str, within: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {within:.0f} s waiting for {what}"
        await asyncio.sleep(0.02)


def after_file(name: str, command: str, within: float = 10.0) -> str:
    """A shell command that waits (at most ``within`` s) until the file ``name`` exists in its working
    directory, then runs ``command``: the test decides when it finishes, not a sleep."""
    return f"for i in $(seq {int(within * 100)}); do [ -e {name} ] && break; sleep 0.01; done; {command}"


def long_script(turns: int) -> list:
    """A session of ``turns`` shell calls with 400 lines of output each (compaction tests), then an answer."""
    return [answer("", call("shell", json.dumps({"command": f"seq 1 400 | sed 's/^/turn {i} line /'"}), f"c{i}"))
            for i in range(turns)] + [answer("finished")]


def kinds(events: list[harness_pb2.RunResponse]) -> list[str]:
    return [e.WhichOneof("event") for e in events]


def of(events: list[harness_pb2.RunResponse], kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]


# -- harness subprocesses (crash and restart tests) ----------------------------------------


class HarnessProcess:
    """The harness server as a child process (`loopwire harness`), so a test can SIGKILL it mid-run."""

    def __init__(self, state_dir: Path, gateway: str, *extra: str) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.log = (state_dir / "harness.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loopwire.cli", "harness", "--listen", self.address, "--gateway", gateway,
             "--state-dir", str(state_dir), "--insecure-dev", "--api-key", "test-key", *extra],
            cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})

    async def wait_ready(self, timeout: float = 60) -> None:
        await asyncio.to_thread(wait_healthy, self.address, timeout, self.proc)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()
