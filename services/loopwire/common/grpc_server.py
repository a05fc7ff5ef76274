"""Serving helpers every service shares: health, reflection, graceful SIGTERM drain."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from loopwire.common import gc_tuning, service_auth, telemetry, tls
from loopwire.common.decode_guard import DecodeGuardInterceptor

log = logging.getLogger("loopwire.server")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_permit_without_calls", 1),
]
# A second server on a busy port must fail, not share it (SO_REUSEPORT would split the traffic).
# Clients ping every 30 s (keepalive above); a server left at gRPC's defaults allows a ping only
# every 5 minutes without data and, after two "strikes", closes the connection with GOAWAY,
# which ends every stream on it at once (seen as batches of CANCELLED streams under load).
SERVER_OPTIONS = [
    *CHANNEL_OPTIONS,
    ("grpc.so_reuseport", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
]


def make_server(interceptors: Iterable[grpc.aio.ServerInterceptor] = (),
                max_receive_bytes: int = MAX_MESSAGE_BYTES) -> grpc.aio.Server:
    """A server that continues the caller's trace (W3C traceparent in metadata); a request message
    over ``max_receive_bytes`` is refused by gRPC (RESOURCE_EXHAUSTED) before it is parsed."""
    options = [o for o in SERVER_OPTIONS if o[0] != "grpc.max_receive_message_length"]
    return grpc.aio.server(interceptors=[DecodeGuardInterceptor(), *telemetry.server_interceptors(), *interceptors],
                           options=[*options, ("grpc.max_receive_message_length", max_receive_bytes)])


def service_channel(target: str, service_token: str = "") -> grpc.aio.Channel:
    """A channel to another service: mutual TLS when this process has TLS files (plaintext
    otherwise), the current trace propagated, and the service token if given."""
    return tls.channel(
        target, options=CHANNEL_OPTIONS,
        interceptors=[*telemetry.client_interceptors(), *service_auth.client_interceptors(service_token)])



class _MethodAwarePool:
    """grpcio-reflection cannot resolve method symbols (grpcurl `describe Service.Method`): look
    them up through their service."""

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> object:
        return getattr(self._pool, name)

    def FindFileContainingSymbol(self, symbol: str) -> object:  # noqa: N802 - the pool's own name
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            return self._pool.FindServiceByName(symbol.rpartition(".")[0]).file


async def serve(
    server: grpc.aio.Server,
    address: str,
    service_names: list[str],
    *,
    drain_seconds: float = 10.0,
    on_stop: Callable[[], Awaitable[None]] | None = None,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Add health + reflection, listen, and run until SIGTERM/SIGINT, then drain.

    On a signal the health status turns NOT_SERVING (routers stop sending), new RPCs are
    refused and in-flight streams get ``drain_seconds`` to finish.
    """
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME],
        server,
        pool=_MethodAwarePool(descriptor_pool.Default()),  # type: ignore[arg-type]
    )
    try:
        port = tls.add_port(server, address)
    except RuntimeError:
        port = 0
    if port == 0:
        raise SystemExit(f"cannot listen on {address}: the port is in use by another process, or the host is not "
                         "an address of this machine")
    await server.start()
    gc_tuning.tune_for_serving()
    for name in ["", *service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("listening on %s (port %d): %s", address, port, ", ".join(service_names))
    if ready:
        ready(port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    waiter = asyncio.ensure_future(server.wait_for_termination())
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait([waiter, stopper], return_when=asyncio.FIRST_COMPLETED)
    if stop.is_set():
        log.info("stopping: draining in-flight streams for up to %.0fs", drain_seconds)
        await health_servicer.enter_graceful_shutdown()
        await server.stop(drain_seconds)
    if on_stop:
        await on_stop()
    telemetry.shutdown()
    waiter.cancel()
    stopper.cancel()
    log.info("stopped")
