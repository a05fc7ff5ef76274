"""The api's watch on a client connection: once the request's body is in it waits for the
disconnect itself, cancels the Converse streams opened for the client, and logs how the response
in flight ended; a stream opened after the client left never starts a response."""

from __future__ import annotations

import asyncio
import logging

import pytest

from loopwire.api.context import ClientWatch
from loopwire.api.errors import ApiError
from loopwire.api.gateway_client import OWNER, ConverseStream, GatewayClient
from loopwire.v1 import gateway_pb2


class FakeCall:
    def __init__(self) -> None:
        self.cancelled = False
        self.written: list[gateway_pb2.ConverseRequest] = []

    async def write(self, request: gateway_pb2.ConverseRequest) -> None:
        self.written.append(request)

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class Client:
    """ASGI receive: the body, then (when ``leave`` is set) the disconnect."""

    def __init__(self) -> None:
        self.leave = asyncio.Event()
        self.sent_body = False

    async def receive(self) -> dict:
        if not self.sent_body:
            self.sent_body = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}


def created(response_id: str) -> gateway_pb2.ConverseResponse:
    return gateway_pb2.ConverseResponse(response_id=response_id,
                                        created=gateway_pb2.ResponseCreated(response_id=response_id))


async def test_a_client_that_leaves_mid_response_cancels_its_stream(caplog) -> None:
    client = Client()
    watch = ClientWatch(client.receive, "POST /v1/responses", lambda: "alpha")
    assert (await watch.receive())["type"] == "http.request"  # the route reads the body
    stream = ConverseStream(FakeCall())  # type: ignore[arg-type]
    watch.opened(stream)
    await stream.create(gateway_pb2.CreateResponse(model="m"))
    stream._track(created("resp_1"))
    with caplog.at_level(logging.INFO, "loopwire.api"):
        client.leave.set()
        await asyncio.wait_for(watch.gone.wait(), 10)
    assert stream.abandoned and stream.call.cancelled  # type: ignore[attr-defined]
    assert "POST /v1/responses tenant=alpha id=resp_1 status=cancelled reason=client_disconnected" in caplog.text
    # Whoever asks for the next message (starlette's disconnect listener) gets the disconnect too.
    assert (await asyncio.wait_for(watch.receive(), 10))["type"] == "http.disconnect"
    await watch.close()


async def test_a_finished_response_is_not_reported_cancelled(caplog) -> None:
    client = Client()
    watch = ClientWatch(client.receive, "POST /v1/responses", lambda: "alpha")
    await watch.receive()
    stream = ConverseStream(FakeCall())  # type: ignore[arg-type]
    watch.opened(stream)
    await stream.create(gateway_pb2.CreateResponse(model="m"))
    stream._track(created("resp_2"))
    stream._track(gateway_pb2.ConverseResponse(response_id="resp_2", completed=gateway_pb2.ResponseCompleted()))
    with caplog.at_level(logging.INFO, "loopwire.api"):
        client.leave.set()  # uvicorn says "disconnect" once the response is complete, too
        await asyncio.wait_for(watch.gone.wait(), 10)
    assert "status=cancelled" not in caplog.text
    await watch.close()


async def test_a_stream_opened_after_the_client_left_never_creates(caplog) -> None:
    client = Client()
    watch = ClientWatch(client.receive, "POST /v1/chat/completions", lambda: "beta")
    await watch.receive()
    client.leave.set()
    await asyncio.wait_for(watch.gone.wait(), 10)
    gateway = GatewayClient("127.0.0.1:1")
    token = OWNER.set(watch)
    try:
        with caplog.at_level(logging.INFO, "loopwire.api"):
            stream = gateway.open("")
    finally:
        OWNER.reset(token)
    assert stream.abandoned and "id=- status=cancelled reason=client_disconnected" in caplog.text
    with pytest.raises(ApiError) as e:
        await stream.create(gateway_pb2.CreateResponse(model="m"))
    assert (e.value.status, e.value.code) == (499, "client_disconnected")
    await watch.close()
    await gateway.close()
