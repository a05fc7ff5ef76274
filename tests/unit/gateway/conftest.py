"""The ``make_mesh`` fixture: a gateway on a real grpc.aio server in front of fake replicas."""

from __future__ import annotations

import pytest

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.gateway.router import Router
from loopwire.gateway.safety import LexiconClassifier, SafetyClassifier
from loopwire.gateway.service import GatewayConfig, GatewayServicer
from loopwire.v1 import gateway_pb2_grpc

from .gateway_fakes import MODEL, FakeReplica, Mesh, start_replica


@pytest.fixture
async def make_mesh():
    meshes: list[Mesh] = []

    async def make(
        replicas: list[FakeReplica] | None = None,
        classifier: SafetyClassifier | None = None,
        config: GatewayConfig | None = None,
        auth: Authenticator | None = None,
        routing: str = "cache-aware",
    ) -> Mesh:
        replicas = replicas or [FakeReplica()]
        servers, addresses = [], []
        for r in replicas:
            server, address = await start_replica(r)
            servers.append(server)
            addresses.append(address)
        router = Router(addresses, routing, poll_interval_s=0.05)
        await router.start()
        servicer = GatewayServicer(
            MODEL, router, auth or Authenticator.open(), classifier or LexiconClassifier(), config or GatewayConfig(allow_replay=True)
        )
        server = grpc_server.make_server()
        gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        channel = grpc_server.insecure_channel(f"127.0.0.1:{port}")
        mesh = Mesh(servicer, replicas, gateway_pb2_grpc.GatewayServiceStub(channel), [server, *servers], channel)
        meshes.append(mesh)
        return mesh

    yield make
    for mesh in meshes:
        assert mesh.channel is not None
        await mesh.channel.close()
        for server in mesh.servers:
            await server.stop(0)
        await mesh.servicer.router.close()
