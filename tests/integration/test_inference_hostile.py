"""Inference trusts nobody by default: credentials, peers, caps, capacity, and one final event per request."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_inference_service import Replica, Session, params, reference

from loopwire.common import grpc_server
from loopwire.common.service_auth import ServiceTokenInterceptor
from loopwire.inference import disaggregation
from loopwire.inference.server import add_servicer, build_engine
from loopwire.v1 import common_pb2, inference_pb2, inference_pb2_grpc

pytestmark = pytest.mark.timeout(120)
TOKEN = "lw-svc-test-token-0123456789"
PROMPT = list(range(1000, 1040))


async def _final(s: Session, rid: str) -> inference_pb2.GenerateResponse:
    _, final, _ = await s.until_done(rid)
    return final


async def test_every_rpc_needs_the_service_token_but_health_does_not() -> None:
    engine = build_engine(reference())
    server = grpc_server.make_server([ServiceTokenInterceptor(TOKEN)])
    add_servicer(server, engine, service_token=TOKEN)
    from grpc_health.v1 import health

    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{port}"
    try:
        for token in ("", "wrong-token-but-long-enough"):
            async with grpc_server.service_channel(address, token) as channel:
                stub = inference_pb2_grpc.InferenceServiceStub(channel)
                calls = [
                    stub.GetStatus(inference_pb2.GetStatusRequest()),
                    stub.GetModelInfo(inference_pb2.GetModelInfoRequest()),
                    stub.Prefill(inference_pb2.PrefillRequest(token_ids=PROMPT)),
                ]
                for call in calls:
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        await call
                    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
                for streaming in (
                    stub.PullKv(inference_pb2.PullKvRequest(kv_handle=b"x")),
                    stub.WatchCache(inference_pb2.WatchCacheRequest(include_existing=True)),
                    stub.Generate(iter([inference_pb2.GenerateRequest(start=inference_pb2.GenerationStart(
                        request_id="r", full=inference_pb2.FullPrompt(token_ids=PROMPT), params=params(4)))])),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as e:
                        async for _ in streaming:
                            pass
                    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
                health_reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
                assert health_reply.status == health_pb2.HealthCheckResponse.SERVING
        async with grpc_server.service_channel(address, TOKEN) as channel:
            status = await inference_pb2_grpc.InferenceServiceStub(channel).GetStatus(inference_pb2.GetStatusRequest())
            assert status.engine == "reference"
    finally:
        await server.stop(0)
        await engine.close()


async def test_kv_is_imported_only_from_configured_peers() -> None:
    """KV poisoning: a Generate naming a foreign kv_source is refused before anything is pulled."""
    async with Replica(reference(replica_id="a")) as attacker, Replica(reference(replica_id="v")) as victim:
        handle = await attacker.stub.Prefill(inference_pb2.PrefillRequest(token_ids=PROMPT))
        s = Session(victim.stub)
        await s.start(request_id="r", full=inference_pb2.FullPrompt(token_ids=PROMPT), params=params(4),
                      kv_handle=handle.kv_handle, kv_source=attacker.address)
        final = await _final(s, "r")
        assert final.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT and final.error.field == "start.kv_source"
        status = await victim.stub.GetStatus(inference_pb2.GetStatusRequest())
        assert status.prefix_cache_hit_tokens == 0 and status.kv_blocks_used == 0  # nothing was imported
        await s.close()


class _SilentPeer(inference_pb2_grpc.InferenceServiceServicer):
    async def PullKv(self, request, context):  # noqa: N802
        await asyncio.sleep(3600)
        yield inference_pb2.PullKvResponse()


async def test_a_silent_peer_costs_one_deadline_not_a_hang(monkeypatch) -> None:
    monkeypatch.setattr(disaggregation, "PULL_TIMEOUT_S", 1.0)
    server = grpc_server.make_server()
    inference_pb2_grpc.add_InferenceServiceServicer_to_server(_SilentPeer(), server)
    peer = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    try:
        async with Replica(reference()) as rep:
            rep.servicer.peers = frozenset({peer})
            s = Session(rep.stub)
            await s.start(request_id="r", full=inference_pb2.FullPrompt(token_ids=PROMPT), params=params(4),
                          kv_handle=b"h" * 16, kv_source=peer)
            final = await asyncio.wait_for(_final(s, "r"), 20)
            assert final.error.code == common_pb2.ERROR_CODE_STATE_LOST and "pull" in final.error.message
            await s.start(request_id="r2", full=inference_pb2.FullPrompt(token_ids=PROMPT), params=params(4))
            assert (await _final(s, "r2")).WhichOneof("event") == "finished"  # the stream still serves
            await s.close()
    finally:
        await server.stop(0)


@pytest.mark.parametrize(("fields", "field"), [
    ({"params": params(4, temperature=math.nan)}, "start.params.temperature"),
    ({"params": params(4, temperature=math.inf)}, "start.params.temperature"),
    ({"params": params(4), "priority": 1_000_000}, "start.priority"),
    ({"params": params(4), "retention_seconds": 10**9}, "start.retention_seconds"),
])
async def test_hostile_params_are_refused_in_stream(fields, field) -> None:
    async with Replica(reference()) as rep:
        s = Session(rep.stub)
        await s.start(request_id="r", full=inference_pb2.FullPrompt(token_ids=PROMPT), **fields)
        final = await _final(s, "r")
        assert final.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT and final.error.field == field
        await s.start(request_id="ok", full=inference_pb2.FullPrompt(token_ids=PROMPT), params=params(2))
        assert (await _final(s, "ok")).WhichOneof("event") == "finished"
        await s.close()


async def test_a_prefill_larger_than_the_cache_is_refused_at_once_beside_a_small_generate() -> None:
    async with Replica(reference(kv_blocks=64)) as rep:
        s = Session(rep.stub)
        await s.start(request_id="small", full=inference_pb2.FullPrompt(token_ids=PROMPT), params=params(4))
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await asyncio.wait_for(rep.stub.Prefill(inference_pb2.PrefillRequest(token_ids=[7] * 64 * 16 * 2)), 10)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await asyncio.wait_for(_final(s, "small"), 30)).WhichOneof("event") == "finished"
        await s.close()


async def test_an_unexpected_engine_failure_still_ends_with_one_final_event(monkeypatch) -> None:
    async with Replica(reference()) as rep:
        async def broken(req):  # an exception no handler expects
            raise KeyError("engine bug")
            yield  # pragma: no cover

        monkeypatch.setattr(rep.engine, "generate", broken)
        s = Session(rep.stub)
        await s.start(request_id="r", full=inference_pb2.FullPrompt(token_ids=PROMPT), params=params(4))
        final = await asyncio.wait_for(_final(s, "r"), 10)
        assert final.error.code == common_pb2.ERROR_CODE_INTERNAL and "KeyError" in final.error.message
        await s.close()
