"""The api service's only way to the model: Converse streams on the gateway (or gateways).

One HTTP request is one short Converse stream; one WebSocket connection is one long one. The
caller's ``authorization`` header travels as gRPC metadata (as the harness forwards its
callers' keys), so the gateway authenticates, rate-limits and owns every response id.

A stream opened while ``OWNER`` is set (the app's watch on each client connection) is handed to
it, so the client's departure can end the stream, and with it the generation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Protocol

import grpc

from loopwire.api.errors import ApiError, from_rpc_error
from loopwire.common import grpc_server
from loopwire.common.response_ids import check_gateway_id, gateway_of
from loopwire.v1 import gateway_pb2, gateway_pb2_grpc

WINDOW_TTL_S = 60.0  # how long the served model's context length is taken as known
# How long a failed lookup stands (the window then unknown) before a request asks again: a burst
# of requests while the gateway is down asks it once, not once each.
WINDOW_RETRY_S = 3.0
WINDOW_TIMEOUT_S = 5.0
# GetModel failures that are about the caller's key, not the gateway: not kept, so that one
# caller's bad key leaves the next caller's window check as it was.
CALLER_FAULTS = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
                           grpc.StatusCode.RESOURCE_EXHAUSTED})


class StreamOwner(Protocol):
    """Whom the streams opened now are for: the app's watch on the client connection being served."""

    gone: asyncio.Event  # set when the client has left

    def opened(self, stream: ConverseStream) -> None: ...


OWNER: ContextVar[StreamOwner | None] = ContextVar("loopwire_stream_owner", default=None)


def parse_gateways(spec: str) -> list[tuple[str, str]]:
    """``host:port`` (one gateway), or ``id=host:port,id=host:port,...`` (gateways started with
    those ``--gateway-id``s) into (id, address) pairs; ValueError says what is wrong."""
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    if not entries:
        raise ValueError("no gateway address")
    pairs = []
    for entry in entries:
        gateway_id, _, address = entry.rpartition("=")
        if gateway_id:
            check_gateway_id(gateway_id)
        elif len(entries) > 1:
            raise ValueError(f"{entry!r}: with several gateways each needs its id (id=host:port), the one it "
                             "puts into its response ids")
        if not address:
            raise ValueError(f"{entry!r}: no address")
        pairs.append((gateway_id, address))
    ids = [g for g, _ in pairs]
    if len(set(ids)) != len(ids):
        raise ValueError("two gateways have the same id")
    return pairs


class _Gateway:
    def __init__(self, gateway_id: str, address: str) -> None:
        self.gateway_id = gateway_id
        self.address = address
        self.channel: grpc.aio.Channel | None = None
        self.stub: gateway_pb2_grpc.GatewayServiceStub | None = None
        self.streams = 0  # Converse streams open on it from this process
        self.opened = 0  # ever: among equally busy gateways new conversations take turns


class GatewayClient:
    """Channels to the gateways, shared by every request of this process. A gateway holds the
    conversations it made, so a continuation goes to the gateway its ``previous_response_id``
    names (``loopwire.common.response_ids``); a new conversation to the one with the fewest
    streams open from here (equally busy ones take turns)."""

    def __init__(self, spec: str) -> None:
        self.gateways = [_Gateway(g, a) for g, a in parse_gateways(spec)]
        self._by_id = {g.gateway_id: g for g in self.gateways if g.gateway_id}
        self._window = (0, 0.0)  # the served model's context length (0: unknown), and until when it stands
        self._asking: asyncio.Future[int] | None = None  # a lookup under way

    async def get_model(self, authorization: str, timeout: float) -> gateway_pb2.GetModelResponse:
        """What the gateway serves (``GetModel``, as the caller); grpc's error when it does not answer."""
        metadata = (("authorization", authorization),) if authorization else None
        return await self.stub().GetModel(gateway_pb2.GetModelRequest(), metadata=metadata, timeout=timeout)

    async def context_length(self, authorization: str) -> int:
        """The served model's context window in tokens (0: unknown), asked of the gateway at most
        once a minute (a few seconds after a failure), by one lookup that the requests arriving
        meanwhile share: every request's ``max_output_tokens`` is checked against it."""
        window, until = self._window
        if time.monotonic() < until:
            return window
        if self._asking is None or self._asking.done():
            self._asking = asyncio.ensure_future(self._look_up_window(authorization))
        return await asyncio.shield(self._asking)

    async def _look_up_window(self, authorization: str) -> int:
        """One GetModel, its outcome kept before the requests waiting on it read it (so none
        arriving in between asks again)."""
        try:
            served = await self.get_model(authorization, WINDOW_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            if e.code() not in CALLER_FAULTS:
                self._window = (0, time.monotonic() + WINDOW_RETRY_S)
            return 0  # the request itself then meets the gateway's answer (a bad key, no gateway)
        self._window = (served.context_length, time.monotonic() + WINDOW_TTL_S)
        return served.context_length

    def holder(self, response_id: str) -> _Gateway | None:
        """The gateway ``response_id`` names, when it is one of these."""
        return self._by_id.get(gateway_of(response_id)) if response_id else None

    def target(self, previous_response_id: str = "") -> _Gateway:
        return self.holder(previous_response_id) or min(self.gateways, key=lambda g: (g.streams, g.opened))

    def stub(self, gateway: _Gateway | None = None) -> gateway_pb2_grpc.GatewayServiceStub:
        gateway = gateway or self.gateways[0]
        if gateway.stub is None:  # created inside the server's event loop
            gateway.channel = grpc_server.service_channel(gateway.address)
            gateway.stub = gateway_pb2_grpc.GatewayServiceStub(gateway.channel)
        return gateway.stub

    def open(self, authorization: str, previous_response_id: str = "") -> ConverseStream:
        metadata = (("authorization", authorization),) if authorization else None
        gateway = self.target(previous_response_id)
        stream = ConverseStream(self.stub(gateway).Converse(metadata=metadata), gateway)
        owner = OWNER.get()
        if owner is not None:
            owner.opened(stream)
        return stream

    async def count_tokens(self, authorization: str, create: gateway_pb2.CreateResponse,
                           timeout_s: float = 30.0) -> gateway_pb2.CountTokensResponse:
        metadata = (("authorization", authorization),) if authorization else None
        stub = self.stub(self.target(create.previous_response_id))
        return await stub.CountTokens(gateway_pb2.CountTokensRequest(request=create), metadata=metadata,
                                      timeout=timeout_s)

    async def close(self) -> None:
        for gateway in self.gateways:
            if gateway.channel is not None:
                await gateway.channel.close()
                gateway.channel = gateway.stub = None


class ConverseStream:
    """A Converse call: write CreateResponse/CancelResponse, read events; transport errors as ApiError."""

    def __init__(self, call: grpc.aio.StreamStreamCall, gateway: _Gateway | None = None) -> None:
        self.call = call
        self.gateway = gateway  # counts this stream while it is open
        if gateway is not None:
            gateway.streams += 1
            gateway.opened += 1
        self.closed = False
        self.pending = False  # a CreateResponse was sent and its response has not ended
        self.response_id = ""  # that response's id, once the gateway created it
        self.abandoned = False  # ended because the client went away

    async def create(self, create: gateway_pb2.CreateResponse) -> None:
        if self.abandoned:
            raise _client_gone()
        self.pending, self.response_id = True, ""
        try:
            await self.call.write(gateway_pb2.ConverseRequest(create_response=create))
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e) from None
        except (grpc.aio.UsageError, asyncio.InvalidStateError):  # the call already ended: its status says why
            raise await self._ended() from None

    async def cancel(self, response_id: str) -> None:
        if self.closed:
            return  # the call is over: nothing runs for it any more
        try:
            await self.call.write(gateway_pb2.ConverseRequest(
                cancel_response=gateway_pb2.CancelResponse(response_id=response_id)))
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
            pass  # the stream is gone: nothing left to cancel

    async def events(self) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        """Events until the caller stops reading; a stream that ends raises ApiError."""
        while True:
            try:
                event = await self.call.read()
            except grpc.aio.AioRpcError as e:
                raise from_rpc_error(e) from None
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self.abandoned and not (task is not None and task.cancelling()):  # not this task's own cancel
                    raise _client_gone() from None
                raise
            if event is grpc.aio.EOF:
                raise await self._ended()
            self._track(event)
            yield event

    def _track(self, event: gateway_pb2.ConverseResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "created":
            self.response_id = event.created.response_id
        elif kind in ("completed", "failed"):
            if kind == "failed" and self.response_id and event.response_id not in ("", self.response_id):
                return  # not the response in flight (a refused cancel)
            self.pending, self.response_id = False, ""  # ended, a refusal before creation included

    def abandon(self) -> str | None:
        """The client went away: cancel the call now, which makes the gateway cancel the generation
        (no await: this runs wherever the departure is noticed). The id of the response that was in
        flight ('' before the gateway created it), None when none was."""
        in_flight = self.response_id if self.pending and not self.closed else None
        self.abandoned = True
        if not self.closed:
            self._closed()
            self.call.cancel()
        return in_flight

    async def _ended(self) -> ApiError:
        code = await self.call.code()
        if code == grpc.StatusCode.OK:
            return ApiError(503, "the gateway ended the stream", type="server_error", code="unavailable")
        details = await self.call.details()
        trailing = await self.call.trailing_metadata()
        return from_rpc_error(grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing or grpc.aio.Metadata(),
                                                   details))

    def _closed(self) -> None:
        self.closed = True
        if self.gateway is not None:
            self.gateway.streams -= 1

    async def close(self) -> None:
        if not self.closed:
            self._closed()
            try:
                await self.call.done_writing()
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                pass
            self.call.cancel()


def _client_gone() -> ApiError:
    return ApiError(499, "The client closed the connection.", type="cancelled", code="client_disconnected")
