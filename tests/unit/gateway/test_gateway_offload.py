"""A request's heavy work never runs on the gateway's event loop, and a schema too deep for any
tier is a bad request (not an internal error) on both Converse and CountTokens."""

from __future__ import annotations

import json
import threading

import grpc
import pytest
from harness_testkit import until

from loopwire.common.auth import Authenticator
from loopwire.common.json_limits import MAX_JSON_DEPTH
from loopwire.gateway import conversation as conversation_module
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.safety import LexiconClassifier, Verdict
from loopwire.gateway.service import GatewayConfig
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import MODEL, Conversation, FakeReplica, kinds, last, start_replica, user


class RecordingClassifier(LexiconClassifier):
    """The lexicon, noting which thread classified each window and how long it was."""

    def __init__(self) -> None:
        super().__init__({"S1": ["forbidden phrase"]})
        self.calls: list[tuple[int, int]] = []

    def classify_now(self, text: str) -> Verdict:
        self.calls.append((threading.get_ident(), len(text)))
        return super().classify_now(text)


WINDOW, OVERLAP = 4096, 64


async def test_a_long_input_is_classified_in_windows_off_the_event_loop(make_mesh) -> None:
    classifier = RecordingClassifier()
    config = GatewayConfig(allow_replay=True, safety_input_window_chars=WINDOW, safety_overlap_chars=OVERLAP,
                           work_inline_bytes=1024)
    mesh = await make_mesh(classifier=classifier, config=config)
    loop_thread = threading.get_ident()
    conv = Conversation(mesh.stub)
    text = "x" * (10 * WINDOW)
    events = await conv.send(input=[user(text)], replay=common_pb2.ReplayOutput(text="ok"))
    assert kinds(events)[-1] == "completed"
    windows = [(thread, n) for thread, n in classifier.calls if n > 1000]
    assert len(windows) == 10
    assert all(thread != loop_thread for thread, _ in windows)
    assert all(n <= WINDOW + OVERLAP for _, n in windows)
    # A phrase across a window's edge is seen: each window starts OVERLAP characters early.
    straddling = "y" * (WINDOW - 8) + "forbidden phrase" + "y" * WINDOW
    events = await conv.send(input=[user(straddling)], replay=common_pb2.ReplayOutput(text="ok"))
    assert last(events, "failed").error.code == common_pb2.ERROR_CODE_SAFETY_VIOLATION
    await conv.close()


def _deep_schema(levels: int) -> str:
    return '{"type": "object", "properties": {"a": ' * levels + '{"type": "string"}' + "}}" * levels


@pytest.mark.parametrize("levels", [MAX_JSON_DEPTH, 100_000])
async def test_a_too_deep_tool_schema_is_invalid_argument_everywhere(make_mesh, levels: int) -> None:
    mesh = await make_mesh()
    tool = common_pb2.Tool(name="deep", description="d", parameters=_deep_schema(levels))
    request = gateway_pb2.CreateResponse(input=[user("hi")], tools=[tool])
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await mesh.stub.CountTokens(gateway_pb2.CountTokensRequest(request=request))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in (refused.value.details() or "")
    conv = Conversation(mesh.stub)
    failed = last(await conv.send(input=[user("hi")], tools=[tool]), "failed")
    assert failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
    assert f"nested deeper than {MAX_JSON_DEPTH} levels" in failed.error.message
    # The stream serves on: a schema within the bound goes through.
    fine = common_pb2.Tool(name="fine", description="d", parameters=_deep_schema(MAX_JSON_DEPTH // 2 - 1))
    json.loads(fine.parameters)
    events = await conv.send(input=[user("hi")], tools=[fine], replay=common_pb2.ReplayOutput(text="ok"))
    assert kinds(events)[-1] == "completed"
    await conv.close()


async def test_a_call_with_too_deep_arguments_is_invalid_argument(make_mesh) -> None:
    mesh = await make_mesh()
    deep = "[" * 100_000 + "]" * 100_000
    call = common_pb2.Item(function_call=common_pb2.FunctionCall(call_id="c1", name="bash", arguments=deep))
    conv = Conversation(mesh.stub)
    failed = last(await conv.send(input=[user("hi"), call]), "failed")
    assert failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
    assert failed.error.field == "create_response.input[1].function_call.arguments"
    await conv.close()


async def test_closing_a_generate_stream_formats_no_traceback(monkeypatch) -> None:
    """With a service token the replica channel has interceptors, and gRPC then writes a stream's
    requests from a task of its own: cancelling the call while that task still writes the
    half-close made gRPC format a traceback on the event loop, once per stream."""
    formatted: list[str] = []
    monkeypatch.setattr(grpc.aio._call.traceback, "format_exc", lambda: formatted.append("tb") or "")
    server, address = await start_replica(FakeReplica())
    gateway = await start_gateway([address], poll_interval_s=0.05, model=MODEL, authenticator=Authenticator.open(),
                                  config=GatewayConfig(allow_replay=True), service_token="token")
    try:
        for _ in range(3):
            conv = Conversation(gateway.stub)
            assert kinds(await conv.send(input=[user("hi")], replay=common_pb2.ReplayOutput(text="ok")))[-1] == "completed"
            await conv.close()
            assert await conv.call.read() is grpc.aio.EOF
        (replica,) = gateway.router.replicas
        await until(lambda: replica.sessions == 0 and not gateway.servicer.sessions, "every Generate stream closed")
    finally:
        await gateway.close()
        await server.stop(0)
    assert formatted == []


async def test_a_long_prompts_block_hashes_are_computed_off_the_event_loop(make_mesh, monkeypatch) -> None:
    """The router asks the prompt's chained block hashes; a long new prompt's are hashed on the pool."""
    hashed: list[tuple[int, int]] = []  # (thread, ids hashed)
    real = conversation_module.block_hashes

    def recording(ids, block_size, parent):  # noqa: ANN001, ANN202
        hashed.append((threading.get_ident(), len(ids)))
        return real(ids, block_size, parent)

    monkeypatch.setattr(conversation_module, "block_hashes", recording)
    mesh = await make_mesh(config=GatewayConfig(allow_replay=True, work_inline_bytes=1024))
    loop_thread = threading.get_ident()
    conv = Conversation(mesh.stub)
    events = await conv.send(input=[user("word " * 20_000)], replay=common_pb2.ReplayOutput(text="ok"))
    assert kinds(events)[-1] == "completed"
    long_hashes = [thread for thread, n in hashed if n > 1000]
    assert long_hashes and all(thread != loop_thread for thread in long_hashes)
    await conv.close()
