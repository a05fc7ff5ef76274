"""Raw bytes at every RPC of every service: malformed wire format and hostile-but-valid messages.

Each service runs in-process on a real gRPC server; a generic channel (identity serializers)
sends bytes the generated stubs never would. The contract (DESIGN §3 invariant 8): no crash,
no hang, undecodable bytes answered INVALID_ARGUMENT, never INTERNAL or UNKNOWN, and the
server answers the next valid request.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common import grpc_server, rpc_errors
from loopwire.common.auth import Authenticator
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.harness.config import HarnessConfig
from loopwire.harness.server import build as build_harness
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import (
    common_pb2,
    gateway_pb2,
    harness_pb2,
    harness_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
)

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

# Malformed wire format whatever the message: every one must be refused as undecodable.
MALFORMED = {
    "truncated length-delimited field": b"\x0a\x10abc",
    "truncated varint": b"\x08\x80",
    "overlong varint": b"\x08" + b"\xff" * 11,
    "huge declared length": b"\x0a\xff\xff\xff\xff\x07abc",
    "reserved wire type 7": b"\x0f",
}
ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.DEADLINE_EXCEEDED}  # the last only for streams the test itself stops


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def invalid_utf8(message: Descriptor, depth: int = 0) -> bytes | None:
    """The message with one of its string fields (reached through message fields) holding bytes
    that are not UTF-8, or None when it has no string field."""
    for f in message.fields:
        if f.type == FieldDescriptor.TYPE_STRING:
            return _field(f.number, b"\xff\xfe\xc3")
    for f in message.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE and depth < 4:
            inner = invalid_utf8(f.message_type, depth + 1)
            if inner is not None:
                return _field(f.number, inner)
    return None


class Mesh:
    """Inference (reference, dummy model), gateway and harness in this process, each on its own server."""

    async def start(self, tmp: Path) -> Mesh:
        self.engine = build_engine(EngineOptions(model="dummy:0", kv_blocks=256, max_output_tokens=64))
        inference = grpc_server.make_server()
        add_servicer(inference, self.engine)
        self.inference = f"127.0.0.1:{inference.add_insecure_port('127.0.0.1:0')}"
        await inference.start()
        gateway = await start_gateway([self.inference], poll_interval_s=0.2, model_timeout_s=10,
                                      authenticator=Authenticator.open(), config=GatewayConfig(allow_replay=True))
        self.router = gateway.router
        self.gateway = gateway.address
        config = HarnessConfig(gateway=self.gateway, workspace_root=tmp / "workspaces", shell_timeout=5)
        service, self.store = build_harness(config, tmp / "harness.db", Authenticator.open())
        harness = grpc_server.make_server()
        harness_pb2_grpc.add_HarnessServiceServicer_to_server(service, harness)
        self.harness = f"127.0.0.1:{harness.add_insecure_port('127.0.0.1:0')}"
        await harness.start()
        self.servers = [harness, gateway.server, inference]
        return self

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop(0)
        await self.router.close()
        await self.engine.close()
        self.store.close()

    def targets(self) -> list[tuple[str, object]]:
        return [(self.harness, harness_pb2), (self.gateway, gateway_pb2), (self.inference, inference_pb2)]


def methods() -> list[tuple[int, str, bool, bool]]:
    out = []
    for index, module in enumerate((harness_pb2, gateway_pb2, inference_pb2)):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                out.append((index, f"/{service.full_name}/{m.name}", m.client_streaming, m.server_streaming))
    return out


async def call_raw(address: str, method: str, client_streaming: bool, server_streaming: bool,
                   payload: bytes) -> tuple[grpc.StatusCode, rpc_errors.RpcFailure]:
    """One call with raw bytes; returns its status code and rich details (streams are read until
    they end or 3 s pass)."""
    async with grpc.aio.insecure_channel(address) as channel:
        if not client_streaming and not server_streaming:
            call = channel.unary_unary(method)(payload, timeout=10)
        elif not client_streaming:
            call = channel.unary_stream(method)(payload, timeout=3)
        elif not server_streaming:
            call = channel.stream_unary(method)(iter([payload]), timeout=10)
        else:
            call = channel.stream_stream(method)(iter([payload]), timeout=3)
        try:
            if server_streaming:
                async for _ in call:
                    pass
            else:
                await call
        except grpc.aio.AioRpcError as e:
            return e.code(), rpc_errors.failure_of(e)
        return grpc.StatusCode.OK, rpc_errors.RpcFailure()


async def still_serving(mesh: Mesh) -> None:
    async with grpc.aio.insecure_channel(mesh.inference) as ch:
        await inference_pb2_grpc.InferenceServiceStub(ch).GetStatus(inference_pb2.GetStatusRequest(), timeout=10)
    async with grpc.aio.insecure_channel(mesh.harness) as ch:
        await harness_pb2_grpc.HarnessServiceStub(ch).ListSessions(harness_pb2.ListSessionsRequest(), timeout=10)


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    loop = asyncio.new_event_loop()
    m = loop.run_until_complete(Mesh().start(tmp_path_factory.mktemp("fuzz")))
    yield m, loop
    loop.run_until_complete(m.stop())
    loop.close()


@pytest.mark.parametrize(("service", "method", "cs", "ss"), methods(), ids=[m[1] for m in methods()])
def test_malformed_bytes_are_invalid_argument(mesh, service, method, cs, ss) -> None:
    m, loop = mesh
    address = m.targets()[service][0]
    module = (harness_pb2, gateway_pb2, inference_pb2)[service]
    service_name, method_name = method.strip("/").split("/")
    request = module.DESCRIPTOR.services_by_name[service_name.split(".")[-1]].methods_by_name[method_name].input_type
    cases = dict(MALFORMED)
    if (bad := invalid_utf8(request)) is not None:
        cases["a string field that is not UTF-8"] = bad
    for name, payload in cases.items():
        code, failure = loop.run_until_complete(asyncio.wait_for(call_raw(address, method, cs, ss, payload), 30))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, f"{method} answered {code.name} to {name}"
        assert failure.reason == common_pb2.ERROR_REASON_MALFORMED_MESSAGE, f"{method}: {failure} to {name}"
    loop.run_until_complete(still_serving(m))


@pytest.mark.parametrize(("service", "method", "cs", "ss"), methods(), ids=[m[1] for m in methods()])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=512))
def test_random_bytes_never_crash_or_hang(mesh, service, method, cs, ss, payload) -> None:
    m, loop = mesh
    address = m.targets()[service][0]
    code, _ = loop.run_until_complete(asyncio.wait_for(call_raw(address, method, cs, ss, payload), 30))
    assert code in ALLOWED, f"{method} answered {code.name} to {payload!r}"
