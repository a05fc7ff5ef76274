"""In-stream errors (DESIGN §2): one bad request fails as an event, the stream lives on."""

from __future__ import annotations

from loopwire.v1 import common_pb2

Code = common_pb2.ErrorCode


class RequestError(Exception):
    """Raised by validation; turned into an in-stream ``Error`` by the service."""

    def __init__(
        self,
        code: common_pb2.ErrorCode.ValueType,
        message: str,
        field: str = "",
        *,
        retryable: bool = False,
        retry_after_ms: int = 0,
        reason: common_pb2.ErrorReason.ValueType = common_pb2.ERROR_REASON_UNSPECIFIED,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms
        self.reason = reason

    def to_proto(self) -> common_pb2.Error:
        return common_pb2.Error(
            code=self.code,
            message=self.message,
            field=self.field,
            retryable=self.retryable,
            retry_after_ms=self.retry_after_ms,
            reason=self.reason,
        )


def invalid(field: str, message: str) -> RequestError:
    return RequestError(Code.ERROR_CODE_INVALID_ARGUMENT, f"{field}: {message}", field)
