"""A real gateway in front of real inference replicas (simulated engine), over gRPC.

Deltas reach the replica as appends, an unknown previous response is an in-stream
error, STATE_LOST is answered by a full resend, and a replica stopped mid-stream fails
over to another one without hanging.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
import pytest
from harness_testkit import until

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig, GatewayServicer
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.inference.service import InferenceServicer
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, inference_pb2_grpc

PROMPT = ChatPrompt(dummy_definition())


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


def create(**fields: object) -> gateway_pb2.ConverseRequest:
    return gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(**fields))


async def until_end(call) -> list[gateway_pb2.ConverseResponse]:
    events = []
    while True:
        event = await call.read()
        assert event is not grpc.aio.EOF
        events.append(event)
        if event.WhichOneof("event") in ("completed", "failed"):
            return events


class RefusesGenerate(InferenceServicer):
    """A replica that answers health, GetStatus and WatchCache but fails every Generate."""

    async def Generate(self, request_iterator, context):  # noqa: N802
        await context.abort(grpc.StatusCode.UNAVAILABLE, "generation backend is down")
        yield  # pragma: no cover - makes this an async generator like the real handler


@dataclass
class RealMesh:
    gateway: GatewayServicer
    stub: gateway_pb2_grpc.GatewayServiceStub
    replica_servers: list[grpc.aio.Server]
    engines: list
    closers: list


@pytest.fixture
async def real_mesh():
    meshes: list[RealMesh] = []

    async def make(n: int = 1, time_scale: float = 0.0, routing: str = "cache-aware",
                   refusing_generate: frozenset[int] = frozenset(), progress_interval_s: float = 0.25,
                   authenticator: Authenticator | None = None) -> RealMesh:
        servers, engines, addresses = [], [], []
        for i in range(n):
            engine = build_engine(EngineOptions(engine="simulated", replica_id=f"sim-{i}", time_scale=time_scale))
            server = grpc_server.make_server()
            if i in refusing_generate:  # healthy, polls and cache events answered; Generate never works
                inference_pb2_grpc.add_InferenceServiceServicer_to_server(RefusesGenerate(engine), server)
            else:
                add_servicer(server, engine, progress_interval_s=progress_interval_s)
            port = server.add_insecure_port("127.0.0.1:0")
            await engine.start()
            await server.start()
            servers.append(server)
            engines.append(engine)
            addresses.append(f"127.0.0.1:{port}")
        gw = await start_gateway(addresses, routing=routing, poll_interval_s=0.1, model_timeout_s=10,
                                 authenticator=authenticator or Authenticator.open(),
                                 config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
        mesh = RealMesh(gw.servicer, gw.stub, servers, engines, [gw.close])
        meshes.append(mesh)
        return mesh

    yield make
    for mesh in meshes:
        for close in mesh.closers:
            await close()
        for server in mesh.replica_servers:
            await server.stop(0)
        for engine in mesh.engines:
            await engine.close()


async def test_deltas_are_appends_and_hit_the_prefix_cache(real_mesh):
    mesh = await real_mesh()
    call = mesh.stub.Converse()
    await call.write(create(instructions="You are a careful engineer. " * 20, input=[user("fix the bug")],
                            replay=common_pb2.ReplayOutput(text="Let me look at the code first.")))
    first = await until_end(call)
    done = first[-1].completed
    assert done.output[0].message.content[0].text == "Let me look at the code first."
    await call.write(create(previous_response_id=first[0].response_id, input=[user("go on")],
                            replay=common_pb2.ReplayOutput(text="Done.")))
    second = await until_end(call)
    completed = second[-1].completed
    assert completed.finish_reason == common_pb2.FINISH_REASON_STOP
    # Forwarded: only what follows the first prompt and the ids the replica generated for it.
    instructions = "You are a careful engineer. " * 20
    held = len(PROMPT.encode_conversation(instructions, [], [user("fix the bug")], add_generation_prompt=True))
    held += len(PROMPT.output_ids("Let me look at the code first.", []))
    whole = PROMPT.encode_conversation(instructions, [], [user("fix the bug"), *done.output, user("go on")],
                                       add_generation_prompt=True)
    assert completed.timings.tokens_forwarded == len(whole) - held
    assert completed.usage.cached_input_tokens > 0
    assert mesh.gateway.metrics.append_sends == 1 and mesh.gateway.metrics.full_sends == 1
    await call.done_writing()


async def test_a_long_prefill_reports_its_progress_before_the_first_token(real_mesh):
    mesh = await real_mesh(progress_interval_s=0)  # every chunk: the simulated engine takes no wall time
    call = mesh.stub.Converse()
    await call.write(create(instructions="You are a careful engineer. " * 200, input=[user("fix the bug")],
                            replay=common_pb2.ReplayOutput(text="Looking.")))
    events = await until_end(call)
    await call.done_writing()
    kinds = [e.WhichOneof("event") for e in events]
    progress = [e.prefill_progress for e in events if e.WhichOneof("event") == "prefill_progress"]
    total = events[-1].completed.usage.input_tokens
    assert len(progress) >= total // 128 - 1  # a chunk of at most --prefill-chunk-tokens per step
    assert kinds.index("text_delta") > max(i for i, k in enumerate(kinds) if k == "prefill_progress")
    done = [p.processed_tokens for p in progress]
    assert done == sorted(set(done)) and done[-1] < total
    assert {p.total_tokens for p in progress} == {total}


async def test_count_tokens_is_the_prompt_converse_then_sends(real_mesh):
    mesh = await real_mesh()
    instructions = "You are a careful engineer. " * 5
    first = [user("fix the bug")]
    counted = await mesh.stub.CountTokens(gateway_pb2.CountTokensRequest(
        request=gateway_pb2.CreateResponse(instructions=instructions, input=first)))
    assert counted.input_tokens == len(PROMPT.encode_conversation(instructions, [], first, add_generation_prompt=True))
    call = mesh.stub.Converse()
    await call.write(create(instructions=instructions, input=first, replay=common_pb2.ReplayOutput(text="Looking.")))
    turn = await until_end(call)
    # A continuation counts the held conversation plus the new input: what the next turn's prompt is.
    follow = gateway_pb2.CreateResponse(previous_response_id=turn[0].response_id, input=[user("go on")])
    counted = await mesh.stub.CountTokens(gateway_pb2.CountTokensRequest(request=follow))
    whole = [*first, *turn[-1].completed.output, user("go on")]
    assert counted.input_tokens == len(PROMPT.encode_conversation(instructions, [], whole, add_generation_prompt=True))
    follow.replay.CopyFrom(common_pb2.ReplayOutput(text="Done."))
    await call.write(gateway_pb2.ConverseRequest(create_response=follow))  # counting claimed nothing
    second = await until_end(call)
    assert second[-1].completed.usage.input_tokens == counted.input_tokens
    await call.done_writing()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await mesh.stub.CountTokens(gateway_pb2.CountTokensRequest(request=gateway_pb2.CreateResponse(
            previous_response_id="resp_never", input=[user("x")])))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await mesh.stub.CountTokens(gateway_pb2.CountTokensRequest(request=gateway_pb2.CreateResponse(input=[
            common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id="c9", output="x"))])))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_unknown_previous_response_then_full_resend(real_mesh):
    mesh = await real_mesh()
    call = mesh.stub.Converse()
    await call.write(create(previous_response_id="resp_gone", input=[user("hi")]))
    failed = (await until_end(call))[-1].failed
    assert failed.error.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    await call.write(create(input=[user("hi")], replay=common_pb2.ReplayOutput(text="hello")))
    assert (await until_end(call))[-1].WhichOneof("event") == "completed"
    await call.done_writing()


async def test_state_lost_is_resent_in_full(real_mesh):
    mesh = await real_mesh()
    call = mesh.stub.Converse()
    await call.write(create(input=[user("one")], replay=common_pb2.ReplayOutput(text="A")))
    first = await until_end(call)
    # The gateway believes the replica holds only the prompt prefix (as after a replica restart
    # that kept the stream): its append is refused with STATE_LOST and it resends in full.
    (session,) = mesh.gateway.sessions.values()
    conversation = session.conversation
    prefix = next(n for n in range(1, len(conversation.ids)) if conversation.hash_at(n) is not None)  # the first prompt's
    session.link.held_length = prefix
    session.link.held_hash = conversation.hash_at(prefix)
    await call.write(create(previous_response_id=first[0].response_id, input=[user("two")],
                            replay=common_pb2.ReplayOutput(text="B")))
    second = await until_end(call)
    assert second[-1].WhichOneof("event") == "completed"
    assert mesh.gateway.metrics.state_lost_resends == 1
    await call.done_writing()


async def test_replica_stopped_mid_stream_fails_over(real_mesh):
    mesh = await real_mesh(n=2, time_scale=1.0, routing="round-robin")
    call = mesh.stub.Converse()
    text = "counting slowly " * 150
    await call.write(create(input=[user("count")], replay=common_pb2.ReplayOutput(text=text),
                            safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    created = (await call.read()).created
    first_delta = await call.read()
    assert first_delta.WhichOneof("event") == "text_delta"
    serving = next(i for i, r in enumerate(mesh.gateway.router.replicas) if r.in_flight)
    await mesh.replica_servers[serving].stop(0)
    events = await asyncio.wait_for(until_end(call), 60)
    released = first_delta.text_delta.text + "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")
    assert events[-1].WhichOneof("event") == "completed", events[-1]
    assert released == text
    assert mesh.gateway.metrics.failovers == 1 and created.replica_id
    await call.done_writing()


async def test_a_replica_lost_between_turns_is_routed_around_and_counted(real_mesh):
    """The session's stream dies while no generation runs: the next turn routes anew and completes."""
    mesh = await real_mesh(n=2, routing="round-robin")
    call = mesh.stub.Converse()
    await call.write(create(input=[user("one")], replay=common_pb2.ReplayOutput(text="A")))
    first = await until_end(call)
    (session,) = mesh.gateway.sessions.values()
    serving = mesh.gateway.router.replicas.index(session.link.replica)
    await mesh.replica_servers[serving].stop(0)
    await until(lambda: not session.link.alive, "the gateway to see the stream end")
    await call.write(create(previous_response_id=first[-1].response_id, input=[user("two")],
                            replay=common_pb2.ReplayOutput(text="B")))
    second = await asyncio.wait_for(until_end(call), 60)
    assert second[-1].WhichOneof("event") == "completed", second[-1]
    assert "".join(e.text_delta.text for e in second if e.WhichOneof("event") == "text_delta") == "B"
    assert mesh.gateway.metrics.relinks == 1
    assert session.link.replica is not mesh.gateway.router.replicas[serving]
    await call.done_writing()


def retaining(seconds: int) -> Authenticator:
    """The development tenant, allowed KV retention up to ``seconds``."""
    authenticator = Authenticator.open()
    authenticator.tenants["default"].policy.max_retention_seconds = seconds
    return authenticator


async def test_hold_kv_pins_a_stored_responses_blocks_on_its_replica_and_releases_them(real_mesh):
    mesh = await real_mesh(1, authenticator=retaining(3600))
    call = mesh.stub.Converse()
    await call.write(create(model="m", input=[user("please wait for my approval " * 40)]))
    done = (await until_end(call))[-1]
    assert done.WhichOneof("event") == "completed"
    rid = done.response_id
    blocks = mesh.engines[0].core.blocks

    async def hold(response_id: str, seconds: int) -> gateway_pb2.ConverseResponse:
        await call.write(gateway_pb2.ConverseRequest(hold_kv=gateway_pb2.HoldKv(response_id=response_id,
                                                                                 retention_seconds=seconds)))
        return await call.read()

    held = await hold(rid, 600)
    assert held.WhichOneof("event") == "kv_held" and held.response_id == rid
    assert held.kv_held.blocks > 10 and held.kv_held.replica_id == "sim-0"
    assert blocks.num_retentions == 1
    released = await hold(rid, 0)
    assert released.kv_held.blocks == 0 and blocks.num_retentions == 0
    unknown = await hold("resp_nope", 600)
    assert unknown.WhichOneof("event") == "failed"
    assert unknown.failed.error.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    assert unknown.failed.error.field == "hold_kv.response_id"
    too_long = await hold(rid, 10**6)
    assert too_long.failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
    # The stream still serves a delta afterwards.
    await call.write(create(previous_response_id=rid, input=[user("approved")]))
    assert (await until_end(call))[-1].WhichOneof("event") == "completed"
    call.cancel()


@pytest.mark.parametrize("ceiling", [0, 600])
async def test_hold_kv_past_the_tenants_max_retention_is_denied_and_pins_nothing(real_mesh, ceiling):
    mesh = await real_mesh(1, authenticator=retaining(ceiling))
    call = mesh.stub.Converse()
    await call.write(create(model="m", input=[user("please wait for my approval " * 40)]))
    rid = (await until_end(call))[-1].response_id
    blocks = mesh.engines[0].core.blocks
    await call.write(gateway_pb2.ConverseRequest(hold_kv=gateway_pb2.HoldKv(response_id=rid, retention_seconds=3600)))
    denied = await call.read()
    assert denied.WhichOneof("event") == "failed"
    assert denied.failed.error.code == common_pb2.ERROR_CODE_PERMISSION_DENIED
    assert denied.failed.error.field == "hold_kv.retention_seconds"
    assert f"at most {ceiling} s for tenant 'default'" in denied.failed.error.message
    assert blocks.num_retentions == 0  # nothing pinned
    # Within the ceiling (or a release) is answered as before.
    await call.write(gateway_pb2.ConverseRequest(hold_kv=gateway_pb2.HoldKv(response_id=rid, retention_seconds=ceiling)))
    answer = await call.read()
    assert answer.WhichOneof("event") == "kv_held" and blocks.num_retentions == (1 if ceiling else 0)
    call.cancel()


async def test_a_replica_that_answers_health_but_not_generate_is_failed_over(real_mesh):
    """Every new session lands on the broken replica first (round-robin starts there); each
    response still completes on the working one, and the client sees no error."""
    mesh = await real_mesh(n=2, routing="round-robin", refusing_generate=frozenset({0}))
    for n in range(4):
        call = mesh.stub.Converse()
        await call.write(create(input=[user(f"task {n}")], replay=common_pb2.ReplayOutput(text=f"done {n}")))
        events = await asyncio.wait_for(until_end(call), 60)
        assert events[-1].WhichOneof("event") == "completed", events[-1]
        assert "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta") == f"done {n}"
        call.cancel()
    assert mesh.gateway.metrics.failovers >= 1
