"""A harness load for the isolation benchmark: one tenant sends a task far over the harness's
input bound (10 MB by default) and times how long the harness takes to refuse it.

A harness with the bounds refuses it on receipt: gRPC answers RESOURCE_EXHAUSTED for a message over
``--max-request-bytes`` (4 MiB) before it is parsed, and a task under that but over
``--max-input-bytes`` (1 MiB) gets an in-stream INVALID_ARGUMENT. One without them stores the
session, counts its tokens and sends it to the gateway, and the refusal comes from the model's
context window a minute later (RESOURCE_EXHAUSTED). Either way the call returns at the first
refusal (or completion), and at most after ``timeout_s``. Loopback only: a load is never aimed at
another host.

    refusal = await oversized_task("127.0.0.1:50051", key)
    print(refusal.code, f"{refusal.latency_s:.3f} s", refusal.message)
"""

from __future__ import annotations

import ipaddress
import time
import uuid
from dataclasses import dataclass

import grpc

from loopwire.common.grpc_server import service_channel
from loopwire.v1 import common_pb2, harness_pb2, harness_pb2_grpc

TASK_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class Refusal:
    """How the harness answered: ``code`` is an ErrorCode name for an in-stream failure (e.g.
    ERROR_CODE_INVALID_ARGUMENT), a gRPC status name for a refused call (e.g. RESOURCE_EXHAUSTED,
    DEADLINE_EXCEEDED at ``timeout_s``), or COMPLETED when the task was served."""

    code: str
    message: str
    field: str
    latency_s: float  # from sending the request to the answer

    @property
    def refused(self) -> bool:
        return self.code != "COMPLETED"


def _loopback(address: str) -> None:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"{address}: the isolation loads run against loopback addresses only")


async def oversized_task(address: str, key: str, task_bytes: int = TASK_BYTES, timeout_s: float = 120.0) -> Refusal:
    """Start a session with a ``task_bytes`` task on the harness at ``address`` (host:port on
    loopback) as the tenant of ``key``; the harness's answer and how long it took."""
    _loopback(address)
    request = harness_pb2.RunRequest(start=harness_pb2.StartTask(
        task="x" * task_bytes, session_id=f"isolation-load-{uuid.uuid4().hex[:12]}"))
    async with service_channel(address) as channel:
        call = harness_pb2_grpc.HarnessServiceStub(channel).Run(
            iter([request]), metadata=(("authorization", f"Bearer {key}"),), timeout=timeout_s)
        sent = time.perf_counter()
        try:
            async for event in call:
                kind = event.WhichOneof("event")
                if kind == "failed":
                    error = event.failed.error
                    return Refusal(common_pb2.ErrorCode.Name(error.code), error.message, error.field,
                                   time.perf_counter() - sent)
                if kind == "completed":
                    return Refusal("COMPLETED", "", "", time.perf_counter() - sent)
        except grpc.aio.AioRpcError as e:
            return Refusal(e.code().name, e.details() or "", "", time.perf_counter() - sent)
        finally:
            call.cancel()  # whatever the harness still runs for it stops (INTERRUPTED)
    return Refusal("ENDED", "the stream ended without an answer", "", time.perf_counter() - sent)
