"""KV hints around a tool pause, through a real gateway to a real replica (simulated engine with a
host tier and a small device pool), over gRPC.

A pause hint lets the paused session's blocks leave the device first, for the host tier (an
active session's stay); the resume hint brings them back before the next request, which then
finds them on the device (no onload inside it), and GetStatus counts the copies. Another tenant
can never move them, and a pause longer than the tenant's retention ceiling is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from harness_testkit import until

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator, hash_key
from loopwire.common.hashing import block_hashes, salted_root
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, inference_pb2, inference_pb2_grpc

KEYS = {"a": "tenant-a-key", "b": "tenant-b-key"}
PAUSE = common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_PAUSE, expected_pause_ms=60_000, reason="command")
RESUME = common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_RESUME)


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER,
                                                      content=[common_pb2.ContentPart(text=text)]))


def create(**fields: object) -> gateway_pb2.ConverseRequest:
    fields.setdefault("sampling", common_pb2.SamplingParams(max_output_tokens=4))
    return gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(**fields))


def hint(response_id: str, h: common_pb2.KvHint, seconds: int = 0) -> gateway_pb2.ConverseRequest:
    return gateway_pb2.ConverseRequest(hold_kv=gateway_pb2.HoldKv(response_id=response_id, retention_seconds=seconds,
                                                                  hint=h))


def bearer(tenant: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS[tenant]}"),)


async def until_end(call) -> gateway_pb2.ConverseResponse:
    while True:
        event = await call.read()
        assert event is not grpc.aio.EOF
        if event.WhichOneof("event") in ("completed", "failed"):
            return event


@dataclass
class Mesh:
    stub: gateway_pb2_grpc.GatewayServiceStub
    replica: inference_pb2_grpc.InferenceServiceStub
    engine: object

    @property
    def blocks(self):
        return self.engine.core.blocks  # type: ignore[attr-defined]

    async def turn(self, call, text: str, previous: str = "") -> gateway_pb2.ConverseResponse:
        await call.write(create(model="m", input=[user(text)], previous_response_id=previous))
        done = await until_end(call)
        assert done.WhichOneof("event") == "completed", done
        return done

    def on_device(self) -> set[int]:
        return set(self.blocks._by_hash)

    def in_host(self) -> set[int]:
        return set(self.blocks.host.blocks)


@pytest.fixture
async def mesh(tmp_path: Path):
    closers = []

    async def make(ceiling_a: int = 3600, ceiling_b: int = 3600, kv_blocks: int = 64) -> Mesh:
        engine = build_engine(EngineOptions(engine="simulated", replica_id="sim-0", kv_blocks=kv_blocks,
                                            host_kv_bytes=1 << 34))
        server = grpc_server.make_server()
        add_servicer(server, engine)
        port = server.add_insecure_port("127.0.0.1:0")
        await engine.start()
        await server.start()
        auth = tmp_path / "auth.json"
        auth.write_text(json.dumps({"tenants": {
            "a": {"key_sha256": [hash_key(KEYS["a"])], "max_retention_seconds": ceiling_a},
            "b": {"key_sha256": [hash_key(KEYS["b"])], "max_retention_seconds": ceiling_b}}}))
        gw = await start_gateway([f"127.0.0.1:{port}"], poll_interval_s=0.1, model_timeout_s=10,
                                 authenticator=Authenticator.from_file(auth),
                                 config=GatewayConfig(safety_mode=gateway_pb2.SAFETY_MODE_OFF))
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")

        async def close() -> None:
            await channel.close()
            await gw.close()
            await server.stop(0)
            await engine.close()
        closers.append(close)
        return Mesh(gw.stub, inference_pb2_grpc.InferenceServiceStub(channel), engine)

    yield make
    for close in closers:
        await close()


async def test_a_paused_session_leaves_the_device_first_and_is_back_before_its_next_request(mesh):
    m = await mesh()
    active = m.stub.Converse(metadata=bearer("a"))
    paused = m.stub.Converse(metadata=bearer("a"))
    await m.turn(active, "alpha beta gamma delta " * 50)  # used before the paused one: LRU would evict it first
    active.cancel()  # its stream closed: cached, unpinned, older than the paused session's blocks
    await until(lambda: m.blocks.num_parked == 0, "the closed stream's blocks let go")
    active_blocks = m.on_device()
    rid = (await m.turn(paused, "please run the whole test suite now " * 30)).response_id
    paused_blocks = m.on_device() - active_blocks
    assert len(paused_blocks) > 8

    await paused.write(hint(rid, PAUSE, 600))
    answer = await paused.read()
    assert answer.WhichOneof("event") == "kv_held" and answer.response_id == rid
    assert answer.kv_held.hinted_blocks >= len(paused_blocks) and answer.kv_held.replica_id == "sim-0"
    status = await m.replica.GetStatus(inference_pb2.GetStatusRequest())
    assert status.kv_hint_demoted_blocks >= len(paused_blocks)

    pressure = m.stub.Converse(metadata=bearer("a"))  # another session needs most of the device
    await m.turn(pressure, "zeta eta theta iota " * 150)
    assert paused_blocks & m.in_host(), "the paused session's blocks went to the host tier"
    assert active_blocks <= m.on_device() | m.in_host()
    assert active_blocks & m.on_device() == active_blocks, "the older session's blocks stayed on the device"

    pressure.cancel()  # that session ends: its blocks may make room
    await until(lambda: m.blocks.num_parked == 0, "the ended stream's blocks let go")
    host_hits_before = m.blocks.host_hit_tokens
    await paused.write(hint(rid, RESUME))
    resumed = await paused.read()
    assert resumed.WhichOneof("event") == "kv_held" and resumed.kv_held.hinted_blocks > 0
    status = await m.replica.GetStatus(inference_pb2.GetStatusRequest())
    assert status.kv_hint_onloaded_blocks == resumed.kv_held.hinted_blocks
    assert not (paused_blocks & m.in_host()), "every paused block is back on the device"

    done = await m.turn(paused, "the tests passed", previous=rid)
    assert done.completed.usage.cached_input_tokens >= len(paused_blocks) * m.blocks.block_size
    assert m.blocks.host_hit_tokens == host_hits_before, "nothing was copied inside the request"
    paused.cancel()


async def test_a_release_ends_the_pause_so_a_cancelled_sessions_blocks_are_ordinary_again(mesh):
    """A session cancelled while paused (waiting for an approval) is released with a plain HoldKv
    of 0 s: its pause ends too, instead of keeping its blocks ahead of others' to the ceiling."""
    m = await mesh()
    call = m.stub.Converse(metadata=bearer("a"))
    rid = (await m.turn(call, "please wait for my approval " * 30)).response_id
    await call.write(hint(rid, common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_PAUSE, reason="approval"), 600))
    assert (await call.read()).kv_held.hinted_blocks > 0
    assert m.blocks.num_paused == 1 and any(b.demoted for b in m.blocks.blocks)
    other = m.stub.Converse(metadata=bearer("b"))  # another tenant's release of the same id ends nothing
    await other.write(gateway_pb2.ConverseRequest(hold_kv=gateway_pb2.HoldKv(response_id=rid)))
    assert (await other.read()).WhichOneof("event") == "failed"
    assert m.blocks.num_paused == 1
    await call.write(gateway_pb2.ConverseRequest(hold_kv=gateway_pb2.HoldKv(response_id=rid)))
    assert (await call.read()).WhichOneof("event") == "kv_held"
    assert m.blocks.num_paused == 0 and not any(b.demoted for b in m.blocks.blocks)
    call.cancel()
    other.cancel()


async def test_another_tenant_can_never_move_a_sessions_blocks(mesh):
    m = await mesh()
    a = m.stub.Converse(metadata=bearer("a"))
    rid = (await m.turn(a, "tenant a's private session text " * 30)).response_id
    before = [(b.hash, b.priority, b.demoted, m.blocks.is_evictable(b.block_id)) for b in m.blocks.blocks]

    b = m.stub.Converse(metadata=bearer("b"))  # tenant b names a's response: unknown to b
    for h in (PAUSE, RESUME):
        await b.write(hint(rid, h, 600))
        refused = await b.read()
        assert refused.WhichOneof("event") == "failed"
        assert refused.failed.error.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND

    # Straight to the replica with a's own hashes but b's salt: the chain is not b's, nothing moves.
    hashes = [bl.hash for bl in m.blocks.blocks if bl.hash and bl.parent == salted_root("a")]
    assert hashes
    chain = []
    parent = salted_root("a")
    while (nxt := next((bl for bl in m.blocks.blocks if bl.hash and bl.parent == parent), None)) is not None:
        chain.append(nxt.hash)
        parent = nxt.hash
    for h in (PAUSE, RESUME):
        reply = await m.replica.HoldPrefix(inference_pb2.HoldPrefixRequest(
            hold_id=rid, cache_salt="b", block_hashes=chain, retention_seconds=600, hint=h))
        assert reply.hinted_blocks == 0
    assert [(bl.hash, bl.priority, bl.demoted, m.blocks.is_evictable(bl.block_id)) for bl in m.blocks.blocks] == before
    status = await m.replica.GetStatus(inference_pb2.GetStatusRequest())
    assert status.kv_hint_demoted_blocks == status.kv_hint_onloaded_blocks == 0
    # With a's salt the same request is a's own hint.
    reply = await m.replica.HoldPrefix(inference_pb2.HoldPrefixRequest(
        hold_id=rid, cache_salt="a", block_hashes=chain, retention_seconds=600, hint=PAUSE))
    assert reply.hinted_blocks == len(chain)
    a.cancel()
    b.cancel()


@pytest.mark.parametrize("ceiling", [0, 30])
async def test_a_pause_past_the_tenants_retention_ceiling_is_refused_and_moves_nothing(mesh, ceiling):
    m = await mesh(ceiling_a=ceiling)
    a = m.stub.Converse(metadata=bearer("a"))
    rid = (await m.turn(a, "a session waiting on a long build " * 30)).response_id
    await a.write(hint(rid, PAUSE, 600))
    denied = await a.read()
    assert denied.WhichOneof("event") == "failed"
    assert denied.failed.error.code == common_pb2.ERROR_CODE_PERMISSION_DENIED
    assert denied.failed.error.field == "hold_kv.retention_seconds"
    assert f"at most {ceiling} s" in denied.failed.error.message
    assert m.blocks.hint_demoted_blocks == 0 and m.blocks.num_paused == 0
    await a.write(hint(rid, PAUSE, ceiling))  # at the ceiling: a pause of 0 s is no pause
    answer = await a.read()
    if ceiling:
        assert answer.WhichOneof("event") == "kv_held" and answer.kv_held.hinted_blocks > 0
        assert m.blocks.num_paused == 1
    else:
        assert answer.failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert m.blocks.num_paused == 0
    a.cancel()


async def test_bad_hints_are_invalid_argument_and_the_stream_goes_on(mesh):
    m = await mesh()
    a = m.stub.Converse(metadata=bearer("a"))
    rid = (await m.turn(a, "hello there " * 20)).response_id
    for bad, field in [(common_pb2.KvHint(), "hold_kv.hint.phase"),
                       (common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_PAUSE, priority=101), "hold_kv.hint.priority"),
                       (common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_PAUSE, reason="x" * 65), "hold_kv.hint.reason")]:
        await a.write(hint(rid, bad, 60))
        answer = await a.read()
        assert answer.failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert answer.failed.error.field == field
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await m.replica.HoldPrefix(inference_pb2.HoldPrefixRequest(hold_id="x", cache_salt="a", hint=PAUSE))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "retention_seconds" in (e.value.details() or "")
    await m.turn(a, "still here", previous=rid)
    a.cancel()


def test_the_hashes_a_hint_names_are_the_tenants_own() -> None:
    """The same tokens hash to different chains for different salts: a's chain never starts at b's root."""
    tokens = list(range(64))
    assert block_hashes(tokens, 16, salted_root("a"))[0] != block_hashes(tokens, 16, salted_root("b"))[0]
