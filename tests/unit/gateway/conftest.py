"""The ``make_mesh`` fixture: a gateway on a real grpc.aio server in front of fake replicas."""

from __future__ import annotations

import pytest

from loopwire.common.auth import Authenticator
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.safety import SafetyClassifier
from loopwire.gateway.service import GatewayConfig

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
        gateway = await start_gateway(
            addresses, routing=routing, poll_interval_s=0.05, model=MODEL, authenticator=auth or Authenticator.open(),
            classifier=classifier, config=config or GatewayConfig(allow_replay=True))
        mesh = Mesh(gateway.servicer, replicas, gateway.stub, [gateway.server, *servers], gateway.channel)
        meshes.append(mesh)
        return mesh

    yield make
    for mesh in meshes:
        assert mesh.channel is not None
        await mesh.channel.close()
        for server in mesh.servers:
            await server.stop(0)
        await mesh.servicer.router.close()
