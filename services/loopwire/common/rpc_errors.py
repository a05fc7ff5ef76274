"""Failures of a whole RPC in the standard rich form: google.rpc.ErrorInfo and RetryInfo.

An in-stream failure is a ``loopwire.v1.Error`` event (errors.py). When a whole call fails
(authentication, a stream limit, a malformed message, a refused unary request) the gRPC status
carries, in its details, an ``ErrorInfo`` (domain ``loopwire.v1``, reason the ``ErrorReason``
name without its prefix) and, when a retry may succeed, a ``RetryInfo`` with the suggested
delay. Every gRPC library can read them (Go's ``status.FromError(err).Details()``, grpcurl
prints them), so no client parses a custom trailer or a message.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from loopwire.v1 import common_pb2

DOMAIN = "loopwire.v1"
Reason = common_pb2.ErrorReason
UNSPECIFIED = common_pb2.ERROR_REASON_UNSPECIFIED
_PREFIX = "ERROR_REASON_"


def reason_name(reason: common_pb2.ErrorReason.ValueType) -> str:
    """The ErrorInfo reason of an ``ErrorReason`` value, e.g. ``STREAM_LIMIT``."""
    return Reason.Name(reason).removeprefix(_PREFIX)


def rich_status(code: grpc.StatusCode, message: str, reason: common_pb2.ErrorReason.ValueType = UNSPECIFIED,
                *, retry_after_ms: int = 0) -> grpc.Status:
    """The status of a failed call, with ErrorInfo when there is a reason and RetryInfo when
    there is a delay to suggest."""
    details = []
    if reason:
        details.append(error_details_pb2.ErrorInfo(reason=reason_name(reason), domain=DOMAIN))
    if retry_after_ms > 0:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(retry_after_ms)
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    packed = []
    for detail in details:
        box = any_pb2.Any()
        box.Pack(detail)
        packed.append(box)
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=packed)
    return rpc_status.to_status(status)


async def abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str,
                reason: common_pb2.ErrorReason.ValueType = UNSPECIFIED, *, retry_after_ms: int = 0) -> NoReturn:
    """End the call with ``code`` and the rich details (raises, as ``context.abort`` does)."""
    await context.abort_with_status(rich_status(code, message, reason, retry_after_ms=retry_after_ms))
    raise AssertionError("unreachable: abort_with_status raises")


def set_status(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str,
               reason: common_pb2.ErrorReason.ValueType = UNSPECIFIED, *, retry_after_ms: int = 0) -> None:
    """Set the call's final status and details without raising (a handler that returns after)."""
    status = rich_status(code, message, reason, retry_after_ms=retry_after_ms)
    context.set_code(status.code)
    context.set_details(status.details)
    context.set_trailing_metadata(status.trailing_metadata)


async def refuse_stream(context: grpc.aio.ServicerContext, requests: object, code: grpc.StatusCode,
                        details: str, reason: common_pb2.ErrorReason.ValueType = UNSPECIFIED) -> None:
    """End a client-streaming call with ``code``: read what the client already sent (bounded)
    first, because closing a stream the client is still writing makes gRPC report INTERNAL to
    it now and then ("Internal error from Core") instead of the real status."""
    set_status(context, code, details, reason)

    async def drain() -> None:
        n = 0
        async for _ in requests:  # type: ignore[attr-defined]
            n += 1
            if n >= 8:
                return

    if requests is not None and hasattr(requests, "__aiter__"):
        with contextlib.suppress(asyncio.TimeoutError, grpc.aio.AioRpcError, asyncio.CancelledError):
            await asyncio.wait_for(drain(), 1.0)


@dataclass(frozen=True)
class RpcFailure:
    """What the rich details of a failed call say (empty when the server sent none)."""

    reason: common_pb2.ErrorReason.ValueType = UNSPECIFIED
    retry_after_ms: int = 0


def failure_of(error: grpc.RpcError) -> RpcFailure:
    """Read ErrorInfo and RetryInfo from a failed call; details of another domain are ignored."""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:  # details that contradict the status: trust neither
        return RpcFailure()
    if status is None:
        return RpcFailure()
    reason: common_pb2.ErrorReason.ValueType = UNSPECIFIED
    retry_after_ms = 0
    for box in status.details:
        if box.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            box.Unpack(info)
            if info.domain == DOMAIN and _PREFIX + info.reason in Reason.keys():
                reason = Reason.Value(_PREFIX + info.reason)
        elif box.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            box.Unpack(retry)
            retry_after_ms = max(0, retry.retry_delay.ToMilliseconds())
    return RpcFailure(reason, retry_after_ms)
