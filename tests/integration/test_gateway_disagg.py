"""Conditional disaggregation through the real path: gateway -> decode replica <- prefill replica.

Real gRPC servers on loopback: one ``--role prefill`` and one ``--role decode`` replica (the
decode one lists the prefill one in ``--peers``) behind a real gateway. A long first prompt is
prefilled on the prefill replica and its KV pulled; a short append is prefilled on the decode
replica itself; the tokens equal those of one ``both`` replica (DESIGN §3 invariant 4). The
reference engine computes its tokens from the KV (random-weight dummy model), so a wrong or
missing pulled block changes them; the simulated engine is the one the benchmark runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import grpc
import pytest

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.gateway.disagg import DisaggPolicy
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig, GatewayServicer
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

pytestmark = pytest.mark.timeout(180)

THRESHOLD = 128  # --max-local-prefill-length of these gateways
LONG_INSTRUCTIONS = "You are a careful engineer who reads the code before changing it. " * 30
OUTPUT_TOKENS = 10


def options(engine: str, replica_id: str, role: str) -> EngineOptions:
    if engine == "reference":
        return EngineOptions(engine="reference", model="dummy:0", kv_blocks=512, max_output_tokens=64,
                             replica_id=replica_id, role=role)
    return EngineOptions(engine="simulated", replica_id=replica_id, role=role, time_scale=0.0)


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


class Mesh:
    def __init__(self, stack: AsyncExitStack) -> None:
        self.stack = stack
        self.addresses: dict[str, str] = {}

    async def replica(self, opts: EngineOptions, peers: frozenset[str] = frozenset()) -> str:
        address, _ = await self.replica_server(opts, peers)
        return address

    async def replica_server(self, opts: EngineOptions, peers: frozenset[str] = frozenset()) -> tuple[str, grpc.aio.Server]:
        engine = build_engine(opts)
        server = grpc_server.make_server()
        add_servicer(server, engine, opts.role, "", peers)
        port = server.add_insecure_port("127.0.0.1:0")
        await engine.start()
        await server.start()
        self.stack.push_async_callback(engine.close)
        self.stack.push_async_callback(server.stop, 0)
        return f"127.0.0.1:{port}", server

    async def gateway(self, addresses: list[str], policy: DisaggPolicy,
                      poll_interval_s: float = 0.1) -> tuple[GatewayServicer, gateway_pb2_grpc.GatewayServiceStub]:
        gateway = await start_gateway(addresses, poll_interval_s=poll_interval_s, disagg=policy, model_timeout_s=10,
                                      authenticator=Authenticator.open(), config=GatewayConfig(allow_replay=True))
        self.stack.push_async_callback(gateway.close)
        return gateway.servicer, gateway.stub


@pytest.fixture
async def mesh() -> AsyncIterator[Mesh]:
    async with AsyncExitStack() as stack:
        yield Mesh(stack)


async def until_end(call: grpc.aio.StreamStreamCall) -> gateway_pb2.ConverseResponse:
    while True:
        event = await call.read()
        assert event is not grpc.aio.EOF
        if event.WhichOneof("event") == "failed":
            raise AssertionError(event.failed)
        if event.WhichOneof("event") == "completed":
            return event


def text_of(done: gateway_pb2.ConverseResponse) -> str:
    return "".join(p.text for item in done.completed.output for p in item.message.content)


async def two_turns(stub: gateway_pb2_grpc.GatewayServiceStub, after_first: Callable[[], None] = lambda: None,
                    replay: bool = False) -> list[gateway_pb2.ConverseResponse]:
    """A long first prompt, then a short second turn, greedy, on one Converse stream.

    Free generation ends at the token limit, so the second turn is a full prompt whose prefix the
    replica caches; replayed text ends its turn, so the second turn is an ``AppendPrompt``.
    """
    sampling = common_pb2.SamplingParams(temperature=0.0, max_output_tokens=0 if replay else OUTPUT_TOKENS)

    def turn(text: str) -> dict[str, Any]:
        return {"sampling": sampling, **({"replay": common_pb2.ReplayOutput(text=text)} if replay else {})}

    call = stub.Converse()
    await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        instructions=LONG_INSTRUCTIONS, input=[user("fix the failing test")], **turn("Let me read the test."))))
    first = await until_end(call)
    after_first()
    await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        previous_response_id=first.response_id, input=[user("go on")], **turn("Fixed."))))
    second = await until_end(call)
    await call.done_writing()
    return [first, second]


@pytest.mark.parametrize(("engine", "replay"), [("reference", False), ("simulated", False), ("simulated", True)])
async def test_long_prompt_goes_remote_short_append_stays_local_same_tokens(mesh: Mesh, engine: str,
                                                                           replay: bool) -> None:
    alone = await mesh.replica(options(engine, "alone", "both"))
    _, alone_stub = await mesh.gateway([alone], DisaggPolicy(THRESHOLD, 4))
    expected = await two_turns(alone_stub, replay=replay)

    pre = await mesh.replica(options(engine, "p", "prefill"))
    dec = await mesh.replica(options(engine, "d", "decode"), peers=frozenset({pre}))
    gateway, stub = await mesh.gateway([pre, dec], DisaggPolicy(THRESHOLD, 4))
    router = gateway.router
    decisions: list[int] = []
    got = await two_turns(stub, after_first=lambda: decisions.append(router.disagg.remote), replay=replay)
    if replay:
        assert gateway.metrics.append_sends == 1  # the second turn went as an append, and stayed local

    first, second = got
    assert first.completed.usage.input_tokens > THRESHOLD  # long: the rule sends it remote
    assert decisions == [1] and router.disagg.remote == 1  # the append (short) stayed local
    assert second.completed.usage.input_tokens - second.completed.usage.cached_input_tokens <= THRESHOLD
    # The decode replica never saw the first prompt, yet had its blocks cached: they were pulled.
    block = 16
    assert first.completed.usage.cached_input_tokens == first.completed.usage.input_tokens // block * block
    created = [r for r in router.replicas if r.address == dec]
    assert created and created[0].is_decode and created[0].sessions == 1  # the session lives on decode
    assert [text_of(e) for e in got] == [text_of(e) for e in expected]
    assert [e.completed.usage.output_tokens for e in got] == [e.completed.usage.output_tokens for e in expected]
    assert replay or [e.completed.usage.output_tokens for e in got] == [OUTPUT_TOKENS, OUTPUT_TOKENS]


async def test_full_prefill_queue_keeps_a_long_prompt_local(mesh: Mesh) -> None:
    """The second half of the rule: no prefill replica below the queue bound -> prefill locally."""
    pre = await mesh.replica(options("simulated", "p", "prefill"))
    dec = await mesh.replica(options("simulated", "d", "decode"), peers=frozenset({pre}))
    gateway, stub = await mesh.gateway([pre, dec], DisaggPolicy(THRESHOLD, max_prefill_queue=0))
    router = gateway.router
    first, _ = await two_turns(stub)
    assert router.disagg.remote == 0 and router.disagg.local_long == 1
    assert first.completed.usage.cached_input_tokens == 0  # prefilled on the decode replica itself


async def test_both_replicas_never_prefill_remotely(mesh: Mesh) -> None:
    pre = await mesh.replica(options("simulated", "p", "prefill"))
    both = await mesh.replica(options("simulated", "b", "both"), peers=frozenset({pre}))
    gateway, stub = await mesh.gateway([pre, both], DisaggPolicy(THRESHOLD, 4))
    router = gateway.router
    await two_turns(stub)
    assert router.disagg.remote == 0
    assert [r.sessions for r in router.replicas if r.address == both] == [1]  # not placed on the prefill one


async def test_a_failed_prefill_replica_falls_back_to_local_prefill(mesh: Mesh) -> None:
    """The prefill replica died and the router has not noticed yet: the Prefill call fails, the decode
    replica prefills the prompt itself, and the client never sees the failure."""
    pre, pre_server = await mesh.replica_server(options("simulated", "p", "prefill"))
    dec = await mesh.replica(options("simulated", "d", "decode"), peers=frozenset({pre}))
    gateway, stub = await mesh.gateway([pre, dec], DisaggPolicy(THRESHOLD, 4), poll_interval_s=30)
    await pre_server.stop(0)  # the next status poll is 30 s away: the router still lists it healthy
    assert [r.healthy for r in gateway.router.prefill_replicas()] == [True]
    first, second = await two_turns(stub, replay=True)
    assert gateway.router.disagg.failed == 1 and gateway.router.disagg.remote == 0
    assert first.completed.usage.cached_input_tokens == 0  # prefilled locally, nothing pulled
    assert text_of(first) == "Let me read the test." and text_of(second) == "Fixed."


async def test_a_decode_replica_that_refuses_the_pull_prefills_locally(mesh: Mesh) -> None:
    """A misconfigured decode replica (the prefill replica is not among its --peers) refuses the
    KV pull: the gateway resends the same request to it without the pull; the client sees no error."""
    pre = await mesh.replica(options("simulated", "p", "prefill"))
    dec = await mesh.replica(options("simulated", "d", "decode"))  # no peers
    gateway, stub = await mesh.gateway([pre, dec], DisaggPolicy(THRESHOLD, 4))
    first, second = await two_turns(stub, replay=True)
    assert first.WhichOneof("event") == "completed" and second.WhichOneof("event") == "completed"
    assert gateway.router.disagg.failed == 1
    assert first.completed.usage.cached_input_tokens == 0  # prefilled on the decode replica itself
    assert text_of(first) == "Let me read the test." and text_of(second) == "Fixed."
