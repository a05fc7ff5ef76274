"""Rich call failures (google.rpc ErrorInfo + RetryInfo) as a real gRPC client reads them."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status
from hypothesis import given, settings
from hypothesis import strategies as st
from rpc_testkit import failed_call

from loopwire.common import rpc_errors
from loopwire.v1 import common_pb2

REASONS = [v for v in common_pb2.ErrorReason.values() if v != common_pb2.ERROR_REASON_UNSPECIFIED]


@settings(max_examples=15, deadline=None)
@given(reason=st.sampled_from(REASONS), retry_ms=st.integers(0, 10**7),
       code=st.sampled_from([grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT,
                             grpc.StatusCode.UNAUTHENTICATED]))
async def test_reason_and_delay_survive_the_wire(reason, retry_ms, code):
    got = await failed_call(rpc_errors.rich_status(code, "why", reason, retry_after_ms=retry_ms))
    assert got.code() == code and got.details() == "why"
    assert rpc_errors.failure_of(got) == rpc_errors.RpcFailure(reason, retry_ms)
    # What any gRPC library sees: the standard messages, the reason as its documented name.
    status = rpc_status.from_call(got)
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert info.domain == "loopwire.v1"
    assert "ERROR_REASON_" + info.reason == common_pb2.ErrorReason.Name(reason)


async def test_a_plain_status_or_another_domains_reason_reads_as_unspecified():
    plain = await failed_call(rpc_errors.rich_status(grpc.StatusCode.INTERNAL, "x"))
    assert rpc_errors.failure_of(plain) == rpc_errors.RpcFailure()
    foreign = any_pb2.Any()
    foreign.Pack(error_details_pb2.ErrorInfo(reason="STREAM_LIMIT", domain="example.com"))
    other = rpc_status.to_status(status_pb2.Status(code=code_pb2.RESOURCE_EXHAUSTED, message="x", details=[foreign]))
    assert rpc_errors.failure_of(await failed_call(other)).reason == common_pb2.ERROR_REASON_UNSPECIFIED
