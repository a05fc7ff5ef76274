"""Undecodable requests get INVALID_ARGUMENT, never INTERNAL, and the server keeps serving.

gRPC Python answers a request its deserializer cannot parse with INTERNAL ("Exception
deserializing request"), which tells a client its bytes were fine and the server broke. This
interceptor wraps every handler's deserializer: a message that does not parse becomes a marker,
and the call ends with INVALID_ARGUMENT naming the method, before any service code sees it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from loopwire.common import rpc_errors
from loopwire.v1 import common_pb2


class _Undecodable:
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as e:  # noqa: BLE001 - DecodeError, RuntimeWarning-as-error, RecursionError...
            return _Undecodable(f"{type(e).__name__}: {e}"[:200])

    return parse


async def _refuse(context: grpc.aio.ServicerContext, method: str, bad: _Undecodable) -> None:
    await rpc_errors.abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                           f"{method}: the request is not a valid message ({bad.reason})",
                           common_pb2.ERROR_REASON_MALFORMED_MESSAGE)


def _checked_stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, method: str) -> AsyncIterator[Any]:
    async def gen() -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, _Undecodable):
                await _refuse(context, method, request)
            yield request

    return gen()


class DecodeGuardInterceptor(grpc.aio.ServerInterceptor):
    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method
        kwargs = {"request_deserializer": _safe(handler.request_deserializer),
                  "response_serializer": handler.response_serializer}
        if handler.unary_unary:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if isinstance(request, _Undecodable):
                    await _refuse(context, method, request)
                return await inner_uu(request, context)

            return grpc.unary_unary_rpc_method_handler(unary_unary, **kwargs)
        if handler.unary_stream:
            inner_us = handler.unary_stream

            async def unary_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                if isinstance(request, _Undecodable):
                    await _refuse(context, method, request)
                async for response in inner_us(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(unary_stream, **kwargs)
        if handler.stream_unary:
            inner_su = handler.stream_unary

            async def stream_unary(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
                return await inner_su(_checked_stream(requests, context, method), context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, **kwargs)
        inner_ss = handler.stream_stream

        async def stream_stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for response in inner_ss(_checked_stream(requests, context, method), context):
                yield response

        return grpc.stream_stream_rpc_method_handler(stream_stream, **kwargs)
