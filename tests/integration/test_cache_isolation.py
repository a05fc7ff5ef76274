"""Tenants share a replica but not its prefix cache: no tenant learns from cache hits what another sent."""

from __future__ import annotations

import json

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator, hash_key
from loopwire.common.hashing import block_hashes, salted_root
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

KEYS = {"alice": "key-alice-0123456789", "mallory": "key-mallory-0123456789"}


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


async def _ask(stub, key: str, secret: str) -> gateway_pb2.ResponseCompleted:
    call = stub.Converse(metadata=(("authorization", f"Bearer {key}"),))
    await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        instructions="You are a careful assistant. " * 20, input=[user(secret)],
        safety_mode=gateway_pb2.SAFETY_MODE_OFF, replay=common_pb2.ReplayOutput(text="noted"))))
    async for event in call:
        if event.WhichOneof("event") == "completed":
            call.cancel()
            return event.completed
        assert event.WhichOneof("event") != "failed", event
    raise AssertionError("no completion")


async def test_a_tenant_gets_no_cache_hits_from_another_tenants_prompt(tmp_path):
    engine = build_engine(EngineOptions(engine="simulated", model="dummy:0"))
    replica = grpc_server.make_server()
    add_servicer(replica, engine)
    address = f"127.0.0.1:{replica.add_insecure_port('127.0.0.1:0')}"
    await engine.start()
    await replica.start()
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"tenants": {t: {"key_sha256": [hash_key(k)]} for t, k in KEYS.items()}}))
    gateway = await start_gateway([address], poll_interval_s=0.05, model_timeout_s=10,
                                  authenticator=Authenticator.from_file(auth),
                                  config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    try:
        async with grpc_server.service_channel(gateway.address) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            secret = "my password is hunter2 and my bank PIN is 4921"
            first = await _ask(stub, KEYS["alice"], secret)
            assert first.usage.cached_input_tokens == 0
            again = await _ask(stub, KEYS["alice"], secret)  # a new session of the same tenant hits its cache
            assert again.usage.cached_input_tokens > 0
            probe = await _ask(stub, KEYS["mallory"], secret)  # the same prompt from another tenant: no hit
            assert probe.usage.cached_input_tokens == 0
    finally:
        await gateway.close()
        await replica.stop(0)
        await engine.close()


def test_salted_chains_differ_per_tenant():
    ids = list(range(64))
    alice, mallory = (block_hashes(ids, 16, salted_root(t)) for t in ("alice", "mallory"))
    assert alice != mallory and not set(alice) & set(mallory)
    assert block_hashes(ids, 16, salted_root("")) == block_hashes(ids, 16)  # no salt: the shared root
