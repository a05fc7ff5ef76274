"""The api's lookup of the served model's window (GetModel): a failure is kept for a few seconds,
so a burst of requests while the gateway is down asks it once, not once each; a failure about the
caller's key is not kept. The clock is a stand-in, so no test waits."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from loopwire.api import gateway_client
from loopwire.api.gateway_client import GatewayClient
from loopwire.v1 import gateway_pb2


class Gateway:
    """GetModel as a stub: fails with ``failing`` (a status code) or serves a 4096-token window."""

    def __init__(self, failing: grpc.StatusCode | None) -> None:
        self.failing = failing
        self.calls = 0

    async def get_model(self, authorization: str, timeout: float) -> gateway_pb2.GetModelResponse:
        self.calls += 1
        await asyncio.sleep(0)  # the burst's requests arrive while it is under way
        if self.failing is not None:
            raise grpc.aio.AioRpcError(self.failing, grpc.aio.Metadata(), grpc.aio.Metadata(), "no")
        return gateway_pb2.GetModelResponse(context_length=4096)


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(gateway_client, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def client_on(gateway: Gateway) -> GatewayClient:
    client = GatewayClient("127.0.0.1:1")
    client.get_model = gateway.get_model  # type: ignore[method-assign]
    return client


async def burst(client: GatewayClient, n: int = 20) -> list[int]:
    return list(await asyncio.gather(*(client.context_length("key") for _ in range(n))))


async def test_a_failed_lookup_is_kept_briefly_then_asked_again(clock):
    gateway = Gateway(grpc.StatusCode.UNAVAILABLE)
    client = client_on(gateway)
    assert await burst(client) == [0] * 20  # the window unknown: the requests go on unchecked, as before
    assert await burst(client) == [0] * 20  # a burst after the failure, within the short period
    assert gateway.calls == 1
    clock[0] += gateway_client.WINDOW_RETRY_S
    gateway.failing = None  # the gateway is back
    assert await burst(client) == [4096] * 20
    assert gateway.calls == 2
    clock[0] += gateway_client.WINDOW_TTL_S - 1
    assert await client.context_length("key") == 4096 and gateway.calls == 2


async def test_a_failure_about_the_callers_key_is_not_kept(clock):
    gateway = Gateway(grpc.StatusCode.UNAUTHENTICATED)
    client = client_on(gateway)
    assert await client.context_length("bad") == 0
    gateway.failing = None
    assert await client.context_length("good") == 4096
    assert gateway.calls == 2
