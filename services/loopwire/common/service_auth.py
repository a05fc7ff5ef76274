"""Service-to-service authentication: one shared service token.

Inference is called by gateways and by peer replicas only, never by clients, so it accepts
exactly one credential: ``authorization: Bearer <service token>``, compared in constant
time. ``loopwire up`` writes a fresh token (0600) into its state directory and gives every
service the file. Health checks and reflection stay open: they reveal nothing a caller could
use, and orchestrators probe health without credentials.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from loopwire.common import rpc_errors
from loopwire.common.auth import authorization_header, bearer_key, write_private_file
from loopwire.v1 import common_pb2

OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class ServiceAuthError(ValueError):
    """A token file that cannot be used (names the cause)."""


def create_token_file(path: str | Path) -> str:
    token = "lw-svc-" + secrets.token_urlsafe(32)
    write_private_file(path, token + "\n")
    return token


def read_token_file(path: str | Path) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ServiceAuthError(f"service token file {path}: {e.strerror}") from None
    if len(token) < 16:
        raise ServiceAuthError(f"service token file {path}: the token must be at least 16 characters")
    return token


def _refusal(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that ends the call UNAUTHENTICATED."""

    async def abort_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await rpc_errors.abort(context, grpc.StatusCode.UNAUTHENTICATED, message, common_pb2.ERROR_REASON_BAD_CREDENTIALS)

    async def abort_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await rpc_errors.refuse_stream(context, request, grpc.StatusCode.UNAUTHENTICATED, message,
                            common_pb2.ERROR_REASON_BAD_CREDENTIALS)
        return
        yield  # pragma: no cover - makes this an async generator

    kwargs = {"request_deserializer": handler.request_deserializer,
              "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(abort_unary, **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(abort_stream, **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(abort_unary, **kwargs)
    return grpc.stream_stream_rpc_method_handler(abort_stream, **kwargs)


class ServiceTokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every call but health and reflection unless it carries the service token."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(OPEN_PREFIXES):
            return handler
        presented = bearer_key(authorization_header(details.invocation_metadata)).encode()
        if not presented:
            return _refusal(handler, "missing 'authorization: Bearer <service token>': inference serves "
                                     "gateways and peer replicas only")
        if not hmac.compare_digest(presented, self._token):
            return _refusal(handler, "wrong service token")
        return handler


def _with_token(details: Any, token: str) -> Any:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    metadata.add("authorization", f"Bearer {token}")
    return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                      details.wait_for_ready)


class _UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self.token), request)


class _UnaryStream(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_token(details, self.token), request)


class _StreamUnary(grpc.aio.StreamUnaryClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_with_token(details, self.token), requests)


class _StreamStream(grpc.aio.StreamStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self.token = token

    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(_with_token(details, self.token), requests)


def client_interceptors(token: str) -> list[grpc.aio.ClientInterceptor]:
    """Interceptors that send the service token on every call of a channel ('' = none)."""
    if not token:
        return []
    return [_UnaryUnary(token), _UnaryStream(token), _StreamUnary(token), _StreamStream(token)]
