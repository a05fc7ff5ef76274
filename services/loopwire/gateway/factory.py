"""One way to build a gateway: Router + GatewayServicer on a gRPC server.

``loopwire gateway`` (gateway/server.py), the tests and the benchmarks all build it here::

    async with start_gateway(["127.0.0.1:50053"], authenticator=Authenticator.open()) as gw:
        await gw.stub.Converse(...)

    gw = await start_gateway(addresses, authenticator=..., config=GatewayConfig(allow_replay=True))
    ...
    await gw.close()

The router is made and started here, the model asked of the replicas unless given, and the
servicer put on a server from :func:`grpc_server.make_server`. With ``listen`` (the default,
any free loopback port) the server is bound (TLS when this process has TLS files) and started;
with ``listen=None`` it is left for the caller to bind and start: ``grpc_server.serve`` does,
adding health, reflection and the SIGTERM drain, as the CLI does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from types import TracebackType
from typing import Any

import grpc

from loopwire.common import grpc_server, tls
from loopwire.common.auth import Authenticator
from loopwire.common.model_def import ModelDefinition, ModelError
from loopwire.gateway.disagg import DisaggPolicy
from loopwire.gateway.discovery import DnsName
from loopwire.gateway.router import DISCOVERY_INTERVAL_S, DRAIN_TIMEOUT_S, Router
from loopwire.gateway.safety import GuardModelClassifier, LexiconClassifier, SafetyClassifier
from loopwire.gateway.service import GatewayConfig, GatewayServicer
from loopwire.v1 import gateway_pb2, gateway_pb2_grpc

log = logging.getLogger("loopwire.gateway")

SERVICE_NAME = gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name

# Builds the servicer once the model is known (a subclass, or one whose flags are read late).
MakeServicer = Callable[[ModelDefinition, Router], GatewayServicer]


class ModelUnavailable(RuntimeError):
    """No replica told its model in time, or the model it told cannot be used."""


class Gateway:
    """A built gateway: its servicer (and through it the router), its server, and once it
    listens, its port, its address and a stub on a channel to it (opened on first use)."""

    def __init__(self, servicer: GatewayServicer, server: grpc.aio.Server) -> None:
        self.servicer = servicer
        self.server = server
        self.host = "127.0.0.1"
        self.port = 0  # 0 until it listens
        self._channel: grpc.aio.Channel | None = None
        self._stub: gateway_pb2_grpc.GatewayServiceStub | None = None
        self._upstreams_closed = False

    @property
    def router(self) -> Router:
        return self.servicer.router

    @property
    def model(self) -> ModelDefinition:
        return self.servicer.model

    @property
    def address(self) -> str:
        """host:port to dial (a wildcard listen address is dialled on loopback)."""
        if not self.port:
            raise RuntimeError("the gateway is not listening")
        return f"{self.host}:{self.port}"

    @property
    def channel(self) -> grpc.aio.Channel:
        """A channel to this gateway (``grpc_server.service_channel``), closed with it."""
        if self._channel is None:
            self._channel = grpc_server.service_channel(self.address)
        return self._channel

    @property
    def stub(self) -> gateway_pb2_grpc.GatewayServiceStub:
        if self._stub is None:
            self._stub = gateway_pb2_grpc.GatewayServiceStub(self.channel)
        return self._stub

    async def listen(self, address: str = "127.0.0.1:0") -> int:
        """Bind ``address`` (port 0: any free port) and start serving; the port."""
        try:
            port = tls.add_port(self.server, address)
        except RuntimeError:
            port = 0
        if port == 0:
            raise RuntimeError(f"cannot listen on {address}")
        await self.server.start()
        host = address.rpartition(":")[0]
        self.host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
        self.port = port
        return port

    async def close_upstreams(self) -> None:
        """Close what the gateway calls: the router (its replica channels and polls) and a
        guard-model classifier. After the server stopped (``grpc_server.serve`` stops it)."""
        if self._upstreams_closed:
            return
        self._upstreams_closed = True
        await self.router.close()
        if isinstance(self.servicer.classifier, GuardModelClassifier):
            await self.servicer.classifier.close()
        self.servicer.work.shutdown()

    async def close(self, grace: float | None = 0) -> None:
        """Close the channel to it, stop the server (``grace`` seconds for open streams), then
        close the upstreams. Idempotent."""
        if self._channel is not None:
            await self._channel.close()
            self._channel, self._stub = None, None
        await self.server.stop(grace)
        await self.close_upstreams()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class _Starting(Awaitable[Gateway]):
    """What :func:`start_gateway` returns: await it, or use it as ``async with``."""

    def __init__(self, start: Callable[[], Awaitable[Gateway]]) -> None:
        self._start = start
        self._gateway: Gateway | None = None

    def __await__(self) -> Generator[Any, None, Gateway]:
        return self._start().__await__()

    async def __aenter__(self) -> Gateway:
        self._gateway = await self._start()
        return self._gateway

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._gateway is not None:
            await self._gateway.close()


async def fetch_model(router: Router, timeout_s: float = 60.0) -> ModelDefinition:
    """The model the replicas serve (the first to answer), as the gateway tokenizes with it."""
    try:
        model = ModelDefinition.from_proto(await router.fetch_model(timeout_s=timeout_s))
    except (RuntimeError, ModelError) as e:
        raise ModelUnavailable(str(e)) from e
    log.info("gateway tokenizes for model %s (%s, tokenizer digest %s)", model.name, model.source, model.digest[:16])
    return model


def start_gateway(
    replicas: Sequence[str] | DnsName,
    *,
    routing: str = "cache-aware",
    routing_seed: int = 0,
    model: ModelDefinition | None = None,
    authenticator: Authenticator | None = None,
    classifier: SafetyClassifier | None = None,
    config: GatewayConfig | None = None,
    make_servicer: MakeServicer | None = None,
    listen: str | None = "127.0.0.1:0",
    service_token: str = "",
    poll_interval_s: float | None = None,
    discovery_interval_s: float = DISCOVERY_INTERVAL_S,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    disagg: DisaggPolicy | None = None,
    model_timeout_s: float = 60.0,
    interceptors: Iterable[grpc.aio.ServerInterceptor] = (),
) -> _Starting:
    """A gateway in front of ``replicas`` (addresses, or a DNS name re-resolved every
    ``discovery_interval_s``), routed by ``routing`` (its cache-aware ties broken by a hash
    seeded with ``routing_seed``).

    ``model``: the model to tokenize with; by default asked of the replicas (up to
    ``model_timeout_s``; :class:`ModelUnavailable` when none tells it). The servicer is
    ``GatewayServicer(model, router, authenticator, classifier or LexiconClassifier(), config)``;
    ``authenticator`` is required (``Authenticator.open()`` for none), unless ``make_servicer``
    builds the servicer instead (then ``authenticator``, ``classifier`` and ``config`` are not
    taken). ``listen``: see the module's docstring. On any failure what was made is closed.
    The gateway owns its router and classifier: :meth:`Gateway.close` closes them.
    """
    if make_servicer is not None and any(x is not None for x in (authenticator, classifier, config)):
        raise TypeError("start_gateway: make_servicer builds the servicer; pass its authenticator, classifier "
                        "and config to it")
    if make_servicer is None and authenticator is None:
        raise TypeError("start_gateway: an authenticator is required (Authenticator.open() for no auth)")
    router_options: dict[str, Any] = {}
    if poll_interval_s is not None:
        router_options["poll_interval_s"] = poll_interval_s

    async def start() -> Gateway:
        router = Router(replicas, routing, service_token=service_token, discovery_interval_s=discovery_interval_s,
                        drain_timeout_s=drain_timeout_s, disagg=disagg, seed=routing_seed, **router_options)
        gateway: Gateway | None = None
        try:
            known = model if model is not None else await fetch_model(router, model_timeout_s)
            if make_servicer is not None:
                servicer = make_servicer(known, router)
            else:
                assert authenticator is not None
                servicer = GatewayServicer(known, router, authenticator, classifier or LexiconClassifier(), config)
            await router.start()
            server = grpc_server.make_server(interceptors)
            gateway_pb2_grpc.add_GatewayServiceServicer_to_server(servicer, server)
            gateway = Gateway(servicer, server)
            if listen is not None:
                await gateway.listen(listen)
            return gateway
        except BaseException:
            if gateway is not None:
                await gateway.close()
            else:
                await router.close()
            raise

    return _Starting(start)
