"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status
OpenAI uses, mapped from the gateway's gRPC statuses and in-stream ``Error`` codes.

The gateway stays the authority (auth, tenants, rate limits, validation); this module only
translates its answers, so a gRPC client and an HTTP client of one tenant get the same verdicts.
"""

from __future__ import annotations

import re
from typing import Any

import grpc

from loopwire.common import rpc_errors
from loopwire.v1 import common_pb2

Code = common_pb2.ErrorCode


class ApiError(Exception):
    """One request's failure as OpenAI reports it."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",  # noqa: A002 - OpenAI's name
                 param: str | None = None, code: str | None = None, retry_after_ms: int = 0,
                 transport: bool = False) -> None:
        super().__init__(message)
        # The Converse stream itself ended (auth, stream limit, gateway gone), not just this request.
        self.transport = transport
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after_ms = retry_after_ms
        # Where a WebSocket-mode error falls among its response's events (0: before any).
        self.sequence_number = 0

    def body(self) -> dict[str, Any]:
        """The HTTP error body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def event(self) -> dict[str, Any]:
        """The WebSocket-mode ``error`` event (the status travels in the event, not in a header)."""
        return {"type": "error", "status": self.status, "sequence_number": self.sequence_number, **self.body()}

    def headers(self) -> dict[str, str]:
        if self.retry_after_ms:
            return {"retry-after": str(max(1, -(-self.retry_after_ms // 1000))),
                    "retry-after-ms": str(self.retry_after_ms)}
        return {}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unknown_parameter(param: str) -> ApiError:
    return ApiError(400, f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")


def invalid_type(param: str, expected: str) -> ApiError:
    return ApiError(400, f"Invalid type for '{param}': expected {expected}.", param=param, code="invalid_type")


def not_found(response_id: str) -> ApiError:
    """One answer for another tenant's id, a deleted one and one never stored, so ids leak nothing."""
    return ApiError(404, f"No response with id '{response_id}' found.", param="response_id", code="not_found")


def unsupported(param: str, what: str) -> ApiError:
    return ApiError(400, f"'{param}': {what} is not supported by loopwire.", param=param,
                    code="unsupported_parameter")


def previous_not_found(response_id: str) -> ApiError:
    """400, as OpenAI (and its WebSocket mode) answers it: the request, not the URL, names the id."""
    return ApiError(400, f"Previous response with id '{response_id}' not found.", param="previous_response_id",
                    code="previous_response_not_found")


_FIELD_PREFIX = re.compile(r"^create_response\.?")
_ONEOF = re.compile(r"\.(message|function_call|function_call_output|tool_search_output|compaction_summary)(?=\.|$)")


def _param(field: str) -> str | None:
    """The gateway's field path ('create_response.input[3].function_call_output.call_id') as the
    OpenAI request's ('input[3].call_id')."""
    if not field:
        return None
    param = _ONEOF.sub("", _FIELD_PREFIX.sub("", field))
    return param.replace("sampling.", "") or None


def from_stream_error(error: common_pb2.Error, previous_response_id: str = "") -> ApiError:
    """An in-stream ``Error`` of the gateway as the OpenAI error of the request that caused it."""
    code, message, param = error.code, error.message, _param(error.field)
    if code == Code.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND:
        return previous_not_found(previous_response_id)
    if code == Code.ERROR_CODE_PERMISSION_DENIED and param == "previous_response_id":
        # Another tenant's response: answer as if it did not exist, so ids leak nothing.
        return previous_not_found(previous_response_id)
    if code == Code.ERROR_CODE_INVALID_ARGUMENT:
        return ApiError(400, message, param=param, code="invalid_value")
    if code == Code.ERROR_CODE_RESOURCE_EXHAUSTED:
        if error.retryable or error.reason == common_pb2.ERROR_REASON_RATE_LIMIT:
            return ApiError(429, message, type="rate_limit_exceeded", param=param, code="rate_limit_exceeded",
                            retry_after_ms=error.retry_after_ms)
        return ApiError(400, message, param=param, code="context_length_exceeded")
    if code == Code.ERROR_CODE_NOT_FOUND:
        return ApiError(404, message, param=param, code="not_found")
    if code == Code.ERROR_CODE_ALREADY_EXISTS:
        return ApiError(409, message, param=param, code="already_exists")
    if code == Code.ERROR_CODE_PERMISSION_DENIED:
        return ApiError(403, message, type="permission_error", param=param, code="permission_denied")
    if code == Code.ERROR_CODE_SAFETY_VIOLATION:
        return ApiError(400, message, param=param, code="content_filter")
    if code == Code.ERROR_CODE_FAILED_PRECONDITION:
        return ApiError(400, message, param=param, code="failed_precondition")
    if code == Code.ERROR_CODE_CANCELLED:
        return ApiError(499, message, type="cancelled", code="cancelled")
    if code in (Code.ERROR_CODE_UNAVAILABLE, Code.ERROR_CODE_STATE_LOST):
        return ApiError(503, message, type="server_error", code="unavailable", retry_after_ms=error.retry_after_ms)
    if code == Code.ERROR_CODE_DEADLINE_EXCEEDED:
        return ApiError(504, message, type="server_error", code="timeout")
    return ApiError(500, message or "internal error", type="server_error", code="server_error")


def from_rpc_error(e: grpc.aio.AioRpcError) -> ApiError:
    """A transport status of the Converse call (auth, stream limits, gateway down)."""
    error = _from_status(e)
    error.transport = True
    return error


def _from_status(e: grpc.aio.AioRpcError) -> ApiError:
    status, details = e.code(), e.details() or e.code().name
    if status == grpc.StatusCode.UNAUTHENTICATED:
        return ApiError(401, details, type="authentication_error", code="invalid_api_key")
    if status == grpc.StatusCode.PERMISSION_DENIED:
        return ApiError(403, details, type="permission_error", code="permission_denied")
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # The gateway's RetryInfo says when the stream limit frees a slot.
        return ApiError(429, details, type="rate_limit_exceeded", code="rate_limit_exceeded",
                        retry_after_ms=rpc_errors.failure_of(e).retry_after_ms or 1000)
    if status == grpc.StatusCode.INVALID_ARGUMENT:
        return ApiError(400, details, code="invalid_value")
    if status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return ApiError(503, f"the gateway is unavailable: {details}", type="server_error", code="unavailable")
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ApiError(504, details, type="server_error", code="timeout")
    return ApiError(500, details, type="server_error", code="server_error")
