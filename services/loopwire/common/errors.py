"""One error policy for every tier (DESIGN §2): in-stream errors and how each kind is reported.

One bad request fails as an ``Error`` event and the stream lives on. What an ``ErrorCode`` means
to each kind of client is written once, here, as one row per code: the gRPC status of a refused
unary call, the HTTP status and OpenAI error ``type``/``code`` the api answers with, and whether
the same request may succeed if retried. An ``ErrorReason`` that changes any of that (a context
window versus a rate limit, both RESOURCE_EXHAUSTED) has its own row, which wins over its code's.
Every tier builds errors with the constructors below and every client decides on ``retryable``,
so no two places can disagree about a code.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import grpc

from loopwire.common import rpc_errors
from loopwire.v1 import common_pb2

Code = common_pb2.ErrorCode
Reason = common_pb2.ErrorReason
_S = grpc.StatusCode


@dataclass(frozen=True)
class Policy:
    """How one kind of failure is reported, and whether retrying the same request may help."""

    grpc_status: grpc.StatusCode
    http_status: int
    openai_type: str
    openai_code: str
    retryable: bool


_INVALID = "invalid_request_error"
_SERVER = "server_error"
_RATE = "rate_limit_exceeded"

POLICIES = MappingProxyType({
    Code.ERROR_CODE_UNSPECIFIED: Policy(_S.UNKNOWN, 500, _SERVER, "server_error", False),
    Code.ERROR_CODE_INVALID_ARGUMENT: Policy(_S.INVALID_ARGUMENT, 400, _INVALID, "invalid_value", False),
    Code.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND: Policy(_S.NOT_FOUND, 400, _INVALID, "previous_response_not_found",
                                                        False),
    # Resend in full (the replica lost the state an append extends): a retry, of another request.
    Code.ERROR_CODE_STATE_LOST: Policy(_S.ABORTED, 503, _SERVER, "unavailable", True),
    # A limit without a reason: one that time does not lift (the rate limits have their reasons).
    Code.ERROR_CODE_RESOURCE_EXHAUSTED: Policy(_S.RESOURCE_EXHAUSTED, 400, _INVALID, "resource_exhausted", False),
    Code.ERROR_CODE_PERMISSION_DENIED: Policy(_S.PERMISSION_DENIED, 403, "permission_error", "permission_denied",
                                              False),
    Code.ERROR_CODE_SAFETY_VIOLATION: Policy(_S.INVALID_ARGUMENT, 400, _INVALID, "content_filter", False),
    Code.ERROR_CODE_UNAVAILABLE: Policy(_S.UNAVAILABLE, 503, _SERVER, "unavailable", True),
    Code.ERROR_CODE_CANCELLED: Policy(_S.CANCELLED, 499, "cancelled", "cancelled", False),
    # Nothing of it was used: a retry before anything streamed starts it again.
    Code.ERROR_CODE_DEADLINE_EXCEEDED: Policy(_S.DEADLINE_EXCEEDED, 504, _SERVER, "timeout", True),
    # An unexpected failure of one request (a bug, a broken link): a retry may well succeed.
    Code.ERROR_CODE_INTERNAL: Policy(_S.INTERNAL, 500, _SERVER, "server_error", True),
    Code.ERROR_CODE_FAILED_PRECONDITION: Policy(_S.FAILED_PRECONDITION, 400, _INVALID, "failed_precondition",
                                                False),
    Code.ERROR_CODE_NOT_FOUND: Policy(_S.NOT_FOUND, 404, _INVALID, "not_found", False),
    Code.ERROR_CODE_ALREADY_EXISTS: Policy(_S.ALREADY_EXISTS, 409, _INVALID, "already_exists", False),
})

REASON_POLICIES = MappingProxyType({
    Reason.ERROR_REASON_CONTEXT_LENGTH_EXCEEDED: Policy(_S.RESOURCE_EXHAUSTED, 400, _INVALID,
                                                        "context_length_exceeded", False),
    Reason.ERROR_REASON_SESSION_TOKEN_LIMIT: Policy(_S.RESOURCE_EXHAUSTED, 400, _INVALID,
                                                    "session_token_limit_exceeded", False),
    Reason.ERROR_REASON_RATE_LIMIT: Policy(_S.RESOURCE_EXHAUSTED, 429, _RATE, _RATE, True),
    Reason.ERROR_REASON_STREAM_LIMIT: Policy(_S.RESOURCE_EXHAUSTED, 429, _RATE, _RATE, True),
    Reason.ERROR_REASON_KV_PULL_FAILED: Policy(_S.ABORTED, 503, _SERVER, "unavailable", True),
    Reason.ERROR_REASON_KV_CAPACITY: Policy(_S.RESOURCE_EXHAUSTED, 400, _INVALID, "kv_capacity_exceeded", False),
    Reason.ERROR_REASON_BAD_CREDENTIALS: Policy(_S.UNAUTHENTICATED, 401, "authentication_error", "invalid_api_key",
                                                False),
    Reason.ERROR_REASON_MALFORMED_MESSAGE: Policy(_S.INVALID_ARGUMENT, 400, _INVALID, "invalid_value", False),
})

# A failed call's gRPC status as the code its client reports: the rows read backwards (the first
# row of a status wins), and the statuses that mean the other end went away.
_CODE_OF_STATUS = {p.grpc_status: code for code, p in reversed(list(POLICIES.items()))} | {
    _S.NOT_FOUND: Code.ERROR_CODE_NOT_FOUND,
    _S.UNAUTHENTICATED: Code.ERROR_CODE_PERMISSION_DENIED,
    _S.CANCELLED: Code.ERROR_CODE_UNAVAILABLE,  # the stream cut under the caller: the server stopped
    _S.ABORTED: Code.ERROR_CODE_UNAVAILABLE,
    _S.UNKNOWN: Code.ERROR_CODE_INTERNAL,  # the server's handler raised
}
_REASON_OF_STATUS = {_S.UNAUTHENTICATED: Reason.ERROR_REASON_BAD_CREDENTIALS}


def policy(code: common_pb2.ErrorCode.ValueType,
           reason: common_pb2.ErrorReason.ValueType = Reason.ERROR_REASON_UNSPECIFIED) -> Policy:
    """The reason's row where it has one, else the code's (UNSPECIFIED's for a code newer than
    this build)."""
    return REASON_POLICIES.get(reason) or POLICIES.get(code) or POLICIES[Code.ERROR_CODE_UNSPECIFIED]


def error(code: common_pb2.ErrorCode.ValueType, message: str, field: str = "", *, retryable: bool | None = None,
          retry_after_ms: int = 0,
          reason: common_pb2.ErrorReason.ValueType = Reason.ERROR_REASON_UNSPECIFIED) -> common_pb2.Error:
    """An ``Error`` event; ``retryable`` defaults to its row's."""
    return common_pb2.Error(code=code, message=message, field=field,
                            retryable=policy(code, reason).retryable if retryable is None else retryable,
                            retry_after_ms=retry_after_ms, reason=reason)


def from_call(e: grpc.RpcError, message: str) -> common_pb2.Error:
    """A whole call's failure (auth, a stream limit, the server gone) as the ``Error`` its client
    reports: the code of its status, the reason and delay of its rich details, retryable by the
    policy, so a client treats a refused stream as it treats the same refusal in-stream."""
    status: grpc.StatusCode = e.code()  # type: ignore[attr-defined]
    failure = rpc_errors.failure_of(e)
    reason = failure.reason or _REASON_OF_STATUS.get(status, Reason.ERROR_REASON_UNSPECIFIED)
    return error(_CODE_OF_STATUS.get(status, Code.ERROR_CODE_INTERNAL), message, reason=reason,
                 retry_after_ms=failure.retry_after_ms)


class RequestError(Exception):
    """Raised by validation; turned into an in-stream ``Error`` by the service, or a unary call's
    status (``grpc_status``)."""

    def __init__(
        self,
        code: common_pb2.ErrorCode.ValueType,
        message: str,
        field: str = "",
        *,
        retryable: bool | None = None,
        retry_after_ms: int = 0,
        reason: common_pb2.ErrorReason.ValueType = Reason.ERROR_REASON_UNSPECIFIED,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.retryable = policy(code, reason).retryable if retryable is None else retryable
        self.retry_after_ms = retry_after_ms
        self.reason = reason

    @property
    def grpc_status(self) -> grpc.StatusCode:
        return policy(self.code, self.reason).grpc_status

    def to_proto(self) -> common_pb2.Error:
        return error(self.code, self.message, self.field, retryable=self.retryable,
                     retry_after_ms=self.retry_after_ms, reason=self.reason)


def invalid(field: str, message: str) -> RequestError:
    return RequestError(Code.ERROR_CODE_INVALID_ARGUMENT, f"{field}: {message}", field)
