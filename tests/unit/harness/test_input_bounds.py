"""Oversized input is refused on receipt: a task, instructions, an added user message or a
client-declared tool schema over the harness's bounds fails in-stream with INVALID_ARGUMENT
naming the limit, before the harness stores, counts or forwards any of it, and the stream goes
on serving. A message over --max-request-bytes is refused by gRPC before it is parsed."""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import pytest
from harness_testkit import TENANT_KEYS, FakeGateway, HarnessProcess, harness_env, kinds, of, start_server

from loopwire.common.errors import RequestError
from loopwire.common.grpc_server import service_channel
from loopwire.harness import validation
from loopwire.harness.config import HarnessConfig
from loopwire.v1 import common_pb2, gateway_pb2_grpc, harness_pb2, harness_pb2_grpc

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))  # the benchmarks' modules run as scripts
from isolation_harness_loads import oversized_task  # noqa: E402

pytestmark = pytest.mark.timeout(180)
R = harness_pb2.RunRequest
MB = 1 << 20


async def test_a_10_mb_task_is_refused_before_anything_is_stored_or_sent(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output]
        events = await h.run(R(start=harness_pb2.StartTask(task="x" * (10 * MB), session_id="big")),
                             R(start=harness_pb2.StartTask(task="then a small one")))
        failed = of(events, "failed")[0]
        assert failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert failed.error.field == "start.task"
        assert f"over the harness's limit of {MB} bytes (--max-input-bytes)" in failed.error.message
        assert kinds(events)[-1] == "completed"  # the stream went on serving
        # Nothing of the big one was stored or sent to the gateway.
        assert "big" not in [s.session_id for s in (await h.stub.ListSessions(harness_pb2.ListSessionsRequest())).sessions]
        assert [r.input[0].message.content[0].text for r in h.gateway.requests] == ["then a small one"]


async def test_the_bound_counts_utf8_bytes_and_is_a_flag(tmp_path):
    async with harness_env(tmp_path, max_input_bytes=1000) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output]
        events = await h.run(R(start=harness_pb2.StartTask(task="é" * 501)),  # 1002 bytes in 501 characters
                             R(start=harness_pb2.StartTask(task="t", instructions="i" * 1001)),
                             R(start=harness_pb2.StartTask(task="é" * 500)))
        assert [(f.error.field, f.error.message.split(",")[0]) for f in of(events, "failed")] == [
            ("start.task", "start.task: 1002 bytes"), ("start.instructions", "start.instructions: 1001 characters")]
        assert kinds(events)[-1] == "completed"


async def test_an_added_user_message_and_a_denial_reason_over_the_bound_are_refused(tmp_path):
    async with harness_env(tmp_path, max_input_bytes=4096) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output]
        sid = of(await h.start("first"), "started")[0].session_id
        items = len((await h.session(sid)).items)
        events = await h.run(R(user_message=harness_pb2.AddUserMessage(session_id=sid, text="m" * 5000)),
                             R(approval=harness_pb2.ApprovalDecision(approval_id="appr_x", reason="r" * 5000)))
        assert [(f.error.code, f.error.field) for f in of(events, "failed")] == [
            (common_pb2.ERROR_CODE_INVALID_ARGUMENT, "user_message.text"),
            (common_pb2.ERROR_CODE_INVALID_ARGUMENT, "approval.reason")]
        assert len((await h.session(sid)).items) == items and len(h.gateway.requests) == 1


@pytest.mark.parametrize(("parameters", "words"), [
    ("[" * 30_000 + "]" * 30_000, "nested deeper than 64 levels"),  # under 64 KiB, past json's recursion
    ('{"type": "object", "description": "' + "d" * (70 << 10) + '"}', "(--max-tool-schema-bytes)"),
    ("{not json", "not JSON"),
])
async def test_a_client_declared_tool_schema_over_the_bounds_is_refused(tmp_path, parameters, words):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output]
        replay = harness_pb2.ReplayScript(source="t", turns=[harness_pb2.ReplayTurn()], tools=[
            common_pb2.Tool(name="ok", parameters='{"type": "object"}'), common_pb2.Tool(name="bad", parameters=parameters)])
        events = await h.run(R(start=harness_pb2.StartTask(task="t", replay=replay)),
                             R(start=harness_pb2.StartTask(task="then a live one")))
        failed = of(events, "failed")[0]
        assert failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert failed.error.field == "start.replay.tools[1].parameters" and words in failed.error.message
        assert kinds(events)[-1] == "completed"


def test_bounds_measure_only_texts_that_could_be_over():
    limits = validation.Bounds(input_bytes=8, tool_schema_bytes=64)
    validation.bounds(R(start=harness_pb2.StartTask(task="é" * 4)), limits)  # 8 bytes: at the limit
    with pytest.raises(RequestError, match="9 bytes"):  # 5 characters
        validation.bounds(R(start=harness_pb2.StartTask(task="é" * 4 + "x")), limits)
    validation.tool_schema("p", "", 64)  # no parameters: the tool takes none
    with pytest.raises(RequestError, match="nested deeper than 64 levels"):
        validation.tool_schema("p", "[" * 65 + "]" * 65, 1000)
    validation.tool_schema("p", "[" * 64 + "]" * 64, 1000)


async def test_grpc_refuses_a_message_over_max_request_bytes_before_parsing_it(tmp_path):
    gateway = FakeGateway()
    server, address = await start_server(gateway_pb2_grpc.add_GatewayServiceServicer_to_server, gateway)
    harness = HarnessProcess(tmp_path, address, "--max-request-bytes", str(MB))
    try:
        await harness.wait_ready()
        async with service_channel(harness.address) as channel:
            stub = harness_pb2_grpc.HarnessServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                [e async for e in stub.Run(iter([R(start=harness_pb2.StartTask(task="x" * (2 * MB)))]), timeout=60)]
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert str(MB) in (refused.value.details() or "")
            await stub.ListSessions(harness_pb2.ListSessionsRequest(), timeout=30)  # and goes on serving
    finally:
        harness.kill()
        await server.stop(0)
    assert HarnessConfig().max_request_bytes == 4 * MB


async def test_the_isolation_benchmarks_load_gets_the_refusal_on_loopback_only(tmp_path):
    async with harness_env(tmp_path) as h:
        refusal = await oversized_task(h.address, TENANT_KEYS["t2"], task_bytes=2 * MB)
        assert (refusal.code, refusal.field, refusal.refused) == ("ERROR_CODE_INVALID_ARGUMENT", "start.task", True)
        assert refusal.latency_s > 0 and not h.gateway.requests
    with pytest.raises(ValueError, match="loopback"):
        await oversized_task("192.0.2.1:50051", "key")
