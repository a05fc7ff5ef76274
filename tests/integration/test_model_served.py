"""The model is what inference serves and the gateway obeys: GetModelInfo, digests, refusals."""

from __future__ import annotations

import grpc
import pytest

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.common.model_def import dummy_definition
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.router import Router
from loopwire.gateway.service import GatewayConfig
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2, inference_pb2_grpc


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


@pytest.fixture
async def replicas():
    """Simulated replicas serving the given model specs, on real gRPC servers."""
    started = []

    async def start(*specs: str) -> list[str]:
        addresses = []
        for i, spec in enumerate(specs):
            engine = build_engine(EngineOptions(engine="simulated", replica_id=f"r{i}", model=spec))
            server = grpc_server.make_server()
            add_servicer(server, engine)
            port = server.add_insecure_port("127.0.0.1:0")
            await engine.start()
            await server.start()
            started.append((server, engine))
            addresses.append(f"127.0.0.1:{port}")
        return addresses

    yield start
    for server, engine in started:
        await server.stop(0)
        await engine.close()


async def _gateway(addresses: list[str]):
    gateway = await start_gateway(addresses, poll_interval_s=0.05, model_timeout_s=10, authenticator=Authenticator.open(),
                                  config=GatewayConfig(allow_replay=True))
    return gateway.servicer, gateway.stub, [gateway.close]


async def _until_status(router: Router, n: int) -> None:
    import asyncio

    for _ in range(200):
        if all(r.status.tokenizer_digest for r in router.replicas[:n]):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("replicas never reported their digest")


async def test_model_info_over_grpc(replicas):
    (address,) = await replicas("dummy:0")
    async with grpc_server.service_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        info = (await stub.GetModelInfo(inference_pb2.GetModelInfoRequest())).model
        status = await stub.GetStatus(inference_pb2.GetStatusRequest())
    assert info.tokenizer_digest == dummy_definition().digest == status.tokenizer_digest
    assert info.engine == "simulated" and info.stop_token_ids == dummy_definition().stop_token_ids
    assert info.tool_call_format == "hermes" and "<|im_start|>" in info.special_tokens
    assert (info.engine_kind, info.tool_call_syntax, info.tokenizer_format) == (
        common_pb2.ENGINE_KIND_SIMULATED, common_pb2.TOOL_CALL_FORMAT_HERMES, common_pb2.TOKENIZER_FORMAT_TIKTOKEN)


async def test_gateway_refuses_a_replica_with_another_tokenizer(replicas):
    good, other = await replicas("dummy:0", "default")
    servicer, stub, closers = await _gateway([other])  # learns SmolLM2's definition from the replica
    try:
        servicer.router.model_digest = dummy_definition().digest  # ...but was built for another model
        await _until_status(servicer.router, 1)
        call = stub.Converse()
        await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
            input=[user("hi")], replay=common_pb2.ReplayOutput(text="hello"))))
        event = await call.read()
        assert event.WhichOneof("event") == "failed"
        error = event.failed.error
        assert error.code == common_pb2.ERROR_CODE_FAILED_PRECONDITION
        assert dummy_definition().digest[:16] in error.message
        assert servicer.router.replicas[0].status.tokenizer_digest[:16] in error.message
        await call.done_writing()
    finally:
        for close in closers:
            await close()


async def test_mixed_replicas_route_only_to_the_matching_one(replicas):
    addresses = await replicas("dummy:0", "default")
    servicer, stub, closers = await _gateway(addresses)
    try:
        await _until_status(servicer.router, 2)
        for _ in range(4):
            call = stub.Converse()
            await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
                input=[user("hi")], replay=common_pb2.ReplayOutput(text="hello there"))))
            events = []
            async for event in call:
                events.append(event)
                if event.WhichOneof("event") in ("completed", "failed"):
                    break
            assert events[-1].completed.output[0].message.content[0].text == "hello there"
            assert events[0].created.replica_id == "r0"
            call.cancel()
    finally:
        for close in closers:
            await close()


async def test_unknown_model_spec_is_a_clear_error():
    with pytest.raises(ValueError, match="no such file or directory"):
        build_engine(EngineOptions(engine="simulated", model="/nonexistent/model"))
    with pytest.raises(grpc.RpcError if False else ValueError):
        build_engine(EngineOptions(engine="trtllm", model=""))
