"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status
OpenAI uses, mapped from the gateway's gRPC statuses and in-stream ``Error`` codes by the one
error policy (``loopwire.common.errors``).

The gateway stays the authority (auth, tenants, rate limits, validation); this module only
translates its answers, so a gRPC client and an HTTP client of one tenant get the same verdicts.
"""

from __future__ import annotations

import re
from typing import Any

import grpc

from loopwire.common import errors
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
    """An in-stream ``Error`` of the gateway as the OpenAI error of the request that caused it:
    the row of its reason (else its code) in the one error policy (common/errors.py)."""
    code, message, param = error.code, error.message, _param(error.field)
    if code == Code.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND:
        return previous_not_found(previous_response_id)
    if code == Code.ERROR_CODE_PERMISSION_DENIED and param == "previous_response_id":
        # Another tenant's response: answer as if it did not exist, so ids leak nothing.
        return previous_not_found(previous_response_id)
    reason = error.reason
    if code == Code.ERROR_CODE_RESOURCE_EXHAUSTED and error.retryable and not reason:
        reason = common_pb2.ERROR_REASON_RATE_LIMIT  # a limit that lifts in time, from a gateway without reasons
    return _api_error(errors.policy(code, reason), message, param, error.retry_after_ms)


def from_rpc_error(e: grpc.aio.AioRpcError) -> ApiError:
    """A transport status of the Converse call (auth, stream limits, gateway down)."""
    details = e.details() or e.code().name
    error = errors.from_call(e, details)
    policy = errors.policy(error.code, error.reason)
    if policy.http_status == 503:
        details = f"the gateway is unavailable: {details}"
    # A refused stream's RetryInfo says when the stream limit frees a slot; 1 s when it says nothing.
    wait_ms = (error.retry_after_ms or 1000) if policy.http_status == 429 else 0
    api_error = _api_error(policy, details, None, wait_ms)
    api_error.transport = True
    return api_error


def _api_error(policy: errors.Policy, message: str, param: str | None, retry_after_ms: int) -> ApiError:
    # A failure on the server's side names no field of the request, and suggests no delay
    # unless it is one that passes (a rate limit, a replica away).
    server_side = policy.http_status >= 499
    return ApiError(policy.http_status, message or ("internal error" if policy.http_status == 500 else ""),
                    type=policy.openai_type, param=None if server_side else param, code=policy.openai_code,
                    retry_after_ms=retry_after_ms if policy.http_status in (429, 503) else 0)
