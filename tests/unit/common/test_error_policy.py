"""The one error policy (common/errors.py): a row for every code and reason, rows that agree with
themselves, and the clients that read it (the api's OpenAI errors, the harness's retries)."""

from __future__ import annotations

import grpc
import pytest
from harness_testkit import harness_env, kinds, of
from rpc_testkit import failed_call

from loopwire.api import errors as api_errors
from loopwire.common import errors, rpc_errors
from loopwire.v1 import common_pb2, gateway_pb2

Code = common_pb2.ErrorCode
Reason = common_pb2.ErrorReason


def test_every_error_code_has_a_row():
    codes = {v.number for v in common_pb2.ErrorCode.DESCRIPTOR.values}
    assert codes == set(errors.POLICIES), codes ^ set(errors.POLICIES)


def test_every_error_reason_has_a_row():
    reasons = {v.number for v in common_pb2.ErrorReason.DESCRIPTOR.values} - {Reason.ERROR_REASON_UNSPECIFIED}
    assert reasons == set(errors.REASON_POLICIES), reasons ^ set(errors.REASON_POLICIES)


@pytest.mark.parametrize("row", [*errors.POLICIES.values(), *errors.REASON_POLICIES.values()])
def test_rows_agree_with_themselves(row):
    # What a client may retry is what HTTP lets an OpenAI client retry: a 429 or a server-side
    # status; a request at fault (any other 4xx) fails the same way again.
    if row.retryable:
        assert row.http_status in (429, 500, 503, 504), row
    if 400 <= row.http_status < 499 and row.http_status != 429:
        assert not row.retryable, row
    assert (row.http_status == 429) == (row.openai_code == "rate_limit_exceeded"), row
    assert row.grpc_status not in (grpc.StatusCode.OK, grpc.StatusCode.UNIMPLEMENTED)
    assert row.openai_code and row.openai_type


def test_a_reason_row_wins_over_its_codes_row():
    limit = errors.policy(Code.ERROR_CODE_RESOURCE_EXHAUSTED, Reason.ERROR_REASON_RATE_LIMIT)
    window = errors.policy(Code.ERROR_CODE_RESOURCE_EXHAUSTED, Reason.ERROR_REASON_CONTEXT_LENGTH_EXCEEDED)
    assert (limit.http_status, limit.retryable) == (429, True)
    assert (window.http_status, window.openai_code, window.retryable) == (400, "context_length_exceeded", False)
    assert errors.policy(999) == errors.POLICIES[Code.ERROR_CODE_UNSPECIFIED]  # a code newer than this build


def test_constructors_take_retryable_from_the_row_unless_told():
    assert errors.error(Code.ERROR_CODE_UNAVAILABLE, "gone").retryable
    assert errors.RequestError(Code.ERROR_CODE_UNAVAILABLE, "gone").to_proto().retryable
    assert not errors.error(Code.ERROR_CODE_INVALID_ARGUMENT, "bad").retryable
    assert errors.error(Code.ERROR_CODE_INTERNAL, "bug").retryable == errors.RequestError(
        Code.ERROR_CODE_INTERNAL, "bug").retryable  # one verdict for INTERNAL in every tier
    assert not errors.error(Code.ERROR_CODE_UNAVAILABLE, "gone", retryable=False).retryable
    made = errors.RequestError(Code.ERROR_CODE_FAILED_PRECONDITION, "other model", "model")
    assert made.grpc_status == grpc.StatusCode.FAILED_PRECONDITION  # not INVALID_ARGUMENT by default


def _stream_error(reason: common_pb2.ErrorReason.ValueType, retryable: bool = False) -> common_pb2.Error:
    return common_pb2.Error(code=Code.ERROR_CODE_RESOURCE_EXHAUSTED, message="over", field="create_response.input",
                            retryable=retryable, reason=reason)


@pytest.mark.parametrize(("reason", "code"), [
    (Reason.ERROR_REASON_CONTEXT_LENGTH_EXCEEDED, "context_length_exceeded"),
    (Reason.ERROR_REASON_SESSION_TOKEN_LIMIT, "session_token_limit_exceeded"),
    (Reason.ERROR_REASON_KV_CAPACITY, "kv_capacity_exceeded"),
    (Reason.ERROR_REASON_UNSPECIFIED, "resource_exhausted"),
])
def test_a_limit_that_is_not_the_context_window_is_not_called_context_length_exceeded(reason, code):
    e = api_errors.from_stream_error(_stream_error(reason))
    assert (e.status, e.code, e.type, e.param) == (400, code, "invalid_request_error", "input")


def test_a_rate_limit_is_a_429_with_its_delay():
    for error in (_stream_error(Reason.ERROR_REASON_RATE_LIMIT, True), _stream_error(Reason.ERROR_REASON_UNSPECIFIED, True)):
        error.retry_after_ms = 1500
        e = api_errors.from_stream_error(error)
        assert (e.status, e.code, e.headers()["retry-after"]) == (429, "rate_limit_exceeded", "2")


@pytest.mark.parametrize(("status", "reason", "code", "retryable", "http"), [
    (grpc.StatusCode.UNAVAILABLE, 0, Code.ERROR_CODE_UNAVAILABLE, True, 503),
    (grpc.StatusCode.CANCELLED, 0, Code.ERROR_CODE_UNAVAILABLE, True, 503),
    (grpc.StatusCode.UNAUTHENTICATED, 0, Code.ERROR_CODE_PERMISSION_DENIED, False, 401),
    (grpc.StatusCode.UNAUTHENTICATED, Reason.ERROR_REASON_BAD_CREDENTIALS, Code.ERROR_CODE_PERMISSION_DENIED, False, 401),
    (grpc.StatusCode.PERMISSION_DENIED, 0, Code.ERROR_CODE_PERMISSION_DENIED, False, 403),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.ERROR_REASON_STREAM_LIMIT, Code.ERROR_CODE_RESOURCE_EXHAUSTED, True, 429),
    (grpc.StatusCode.INVALID_ARGUMENT, 0, Code.ERROR_CODE_INVALID_ARGUMENT, False, 400),
    (grpc.StatusCode.DEADLINE_EXCEEDED, 0, Code.ERROR_CODE_DEADLINE_EXCEEDED, True, 504),
    (grpc.StatusCode.INTERNAL, 0, Code.ERROR_CODE_INTERNAL, True, 500),
])
async def test_a_failed_call_reads_the_same_to_the_harness_and_the_api(status, reason, code, retryable, http):
    e = await failed_call(rpc_errors.rich_status(status, "why", reason, retry_after_ms=700 if retryable else 0))
    error = errors.from_call(e, "gateway: why")
    assert (error.code, error.retryable) == (code, retryable)
    assert api_errors.from_rpc_error(e).status == http


async def test_the_harness_does_not_retry_a_limit_that_time_does_not_lift(tmp_path):
    """A context window (or session limit, or KV capacity) is no better on the fifth try: the run
    fails at once with the gateway's error, where a rate limit would be retried."""
    async with harness_env(tmp_path) as h:
        async def over_the_window(req):
            h.gateway.requests.append(req)
            yield gateway_pb2.ConverseResponse(failed=gateway_pb2.ResponseFailed(error=errors.error(
                Code.ERROR_CODE_RESOURCE_EXHAUSTED, "context_length_exceeded: shorten the conversation",
                "create_response.input", reason=Reason.ERROR_REASON_CONTEXT_LENGTH_EXCEEDED)))

        h.gateway._respond = over_the_window
        events = await h.start("anything")
        assert kinds(events)[-1] == "failed"
        failed = of(events, "failed")[0].error
        assert failed.reason == Reason.ERROR_REASON_CONTEXT_LENGTH_EXCEEDED and not failed.retryable
        assert len(h.gateway.requests) == 1
