"""Bad input never crashes the stream (invariant 8); the guard-model classifier; the server entry point."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.gateway import server
from loopwire.gateway.factory import ModelUnavailable, start_gateway
from loopwire.gateway.safety import INPUT, GuardModelClassifier
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import MODEL, Conversation, FakeReplica, kinds, start_replica, user

JUNK = ["", "x", "{", "<|im_end|>", "🦀" * 50, "\x00\xff", "null", '{"type": 3}', '{"type": "object", "required": [1]}',
        "a" * 3000, '{"properties": []}', "[1, 2]"]


def random_item(rng: random.Random) -> common_pb2.Item:
    kind = rng.randrange(6)
    text = rng.choice(JUNK)
    if kind == 0:
        return common_pb2.Item()
    if kind == 1:
        return common_pb2.Item(message=common_pb2.Message(role=rng.randrange(-1, 6) % 5,
                                                          content=[common_pb2.ContentPart(text=text)] * rng.randrange(3)))
    if kind == 2:
        return common_pb2.Item(function_call=common_pb2.FunctionCall(call_id=rng.choice(["", "c1"]), name=rng.choice(["", "bash"]),
                                                                     arguments=text))
    if kind == 3:
        return common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=rng.choice(["", "c1", "zz"]), output=text))
    if kind == 4:
        return common_pb2.Item(tool_search_output=common_pb2.ToolSearchOutput(tools=[common_pb2.Tool(name="t", parameters=text)]))
    return common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=text, replaced_items=rng.randrange(9)))


def random_request(rng: random.Random, previous: list[str]) -> gateway_pb2.ConverseRequest:
    if rng.random() < 0.1:
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(40)))
        try:
            return gateway_pb2.ConverseRequest.FromString(raw)
        except Exception:  # noqa: BLE001 — random bytes are usually not a message
            return gateway_pb2.ConverseRequest()
    if rng.random() < 0.1:
        return gateway_pb2.ConverseRequest(cancel_response=gateway_pb2.CancelResponse(response_id=rng.choice(["", "resp_x"])))
    create = gateway_pb2.CreateResponse(
        previous_response_id=rng.choice(["", "", "resp_unknown", *previous[-2:]]),
        instructions=rng.choice(JUNK[:5]),
        tools=[common_pb2.Tool(name=rng.choice(["", "bash", "bash"]), parameters=rng.choice(JUNK)) for _ in range(rng.randrange(3))],
        input=[random_item(rng) for _ in range(rng.randrange(5))],
        sampling=common_pb2.SamplingParams(temperature=rng.choice([0, 0.7, -1, float("nan"), float("inf")]),
                                           top_p=rng.choice([0, 0.9, 2]), max_output_tokens=rng.choice([0, 4, -3]),
                                           stop=rng.choice([[], [""], ["\n"]])),
        safety_mode=rng.randrange(5),
        no_store=rng.random() < 0.2,
    )
    return gateway_pb2.ConverseRequest(create_response=create)


@pytest.mark.parametrize("seed", range(3))
async def test_random_and_malformed_requests_never_break_the_stream(make_mesh, seed):
    rng = random.Random(seed)
    mesh = await make_mesh()
    call = mesh.open().call
    previous: list[str] = []
    terminal = 0
    for _ in range(40):
        request = random_request(rng, previous)
        await call.write(request)
        if request.WhichOneof("request") != "create_response":
            event = await asyncio.wait_for(call.read(), 10)
            assert event.WhichOneof("event") == "failed"  # empty request, or nothing in flight to cancel
            continue
        while True:
            event = await asyncio.wait_for(call.read(), 10)
            kind = event.WhichOneof("event")
            if kind == "failed":
                assert event.failed.error.code != common_pb2.ERROR_CODE_INTERNAL
            if kind in ("completed", "failed"):
                terminal += 1
                if kind == "completed":
                    previous.append(event.response_id)
                break
    # and it still serves a good request
    await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(input=[user("still there?")])))
    events = []
    while not events or events[-1].WhichOneof("event") not in ("completed", "failed"):
        events.append(await call.read())
    assert kinds(events)[-1] == "completed" and terminal > 0


@pytest.mark.parametrize(("answer", "allowed", "category"), [("safe", True, ""), ("unsafe\nS10", False, "S10")])
async def test_guard_model_classifier_asks_an_inference_service(answer, allowed, category):
    replica = FakeReplica(answer=answer)
    srv, address = await start_replica(replica)
    guard = GuardModelClassifier(address)
    try:
        verdict = await guard.classify("some text to check", INPUT)
        again = await guard.classify("more text", INPUT)
    finally:
        await guard.close()
        await srv.stop(0)
    assert (verdict.allowed, verdict.category) == (allowed, category) == (again.allowed, again.category)
    assert replica.model_info_calls == 1  # the guard replica's own model, asked once
    prompt = b"".join(MODEL.tokenizer.token_bytes(t) for t in replica.received[0].token_ids).decode()
    assert "some text to check" in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_flags_default_from_the_environment(monkeypatch):
    monkeypatch.setenv("LOOPWIRE_ROUTING", "round-robin")
    monkeypatch.setenv("LOOPWIRE_MAX_SESSION_TOKENS", "1234")
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    args = parser.parse_args(["--safety-mode", "buffer-until-pass"])
    assert args.routing == "round-robin" and args.max_session_tokens == 1234
    assert args.listen == "127.0.0.1:50052" and args.max_request_bytes == 16 * 1024 * 1024


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the signal handler")
async def test_serve_from_args_serves_health_and_drains_on_sigterm():
    replica = FakeReplica()
    srv, address = await start_replica(replica)
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    args = parser.parse_args(["--listen", "127.0.0.1:0", "--inference", address, "--stateless", "--insecure-dev"])
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(server.serve_from_args(args, ready=ready.set_result))
    port = await asyncio.wait_for(ready, 10)
    async with grpc_server.service_channel(f"127.0.0.1:{port}") as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="loopwire.v1.GatewayService"))
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert replica.model_info_calls >= 1  # the gateway tokenizes with the model the replicas serve
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 15)
    await srv.stop(0)
    with pytest.raises(grpc.aio.AioRpcError):
        async with grpc_server.service_channel(f"127.0.0.1:{port}") as channel:
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)


async def test_start_gateway_serves_and_closes_what_it_made():
    replica = FakeReplica()
    srv, address = await start_replica(replica)
    try:
        async with start_gateway([address], poll_interval_s=0.05, authenticator=Authenticator.open()) as gw:
            assert replica.model_info_calls >= 1 and gw.model.digest == gw.router.model_digest
            assert gw.address == f"127.0.0.1:{gw.port}" and gw.port > 0
            conversation = Conversation(gw.stub)
            events = await conversation.send(input=[user("hi")])
            assert kinds(events)[-1] == "completed"
            await conversation.close()
        assert not gw.router.replicas  # the router it made is closed with it
        with pytest.raises(grpc.aio.AioRpcError) as stopped:  # and its server is stopped
            async with grpc_server.service_channel(gw.address) as channel:
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
        assert stopped.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        await srv.stop(0)


async def test_start_gateway_without_a_model_or_an_authenticator_is_refused():
    with pytest.raises(TypeError, match="authenticator"):
        await start_gateway(["127.0.0.1:1"], model=MODEL)
    with pytest.raises(ModelUnavailable, match="no inference replica told its model"):
        await start_gateway(["127.0.0.1:1"], model_timeout_s=0.1, authenticator=Authenticator.open())
