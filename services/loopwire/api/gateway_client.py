"""The api service's only way to the model: Converse streams on the gateway.

One HTTP request is one short Converse stream; one WebSocket connection is one long one. The
caller's ``authorization`` header travels as gRPC metadata (as the harness forwards its
callers' keys), so the gateway authenticates, rate-limits and owns every response id.

A stream opened while ``OWNER`` is set (the app's watch on each client connection) is handed to
it, so the client's departure can end the stream, and with it the generation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Protocol

import grpc

from loopwire.api.errors import ApiError, from_rpc_error
from loopwire.common import grpc_server
from loopwire.v1 import gateway_pb2, gateway_pb2_grpc


class StreamOwner(Protocol):
    """Whom the streams opened now are for: the app's watch on the client connection being served."""

    def opened(self, stream: ConverseStream) -> None: ...


OWNER: ContextVar[StreamOwner | None] = ContextVar("loopwire_stream_owner", default=None)


class GatewayClient:
    """One channel to the gateway, shared by every request of this process."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._channel: grpc.aio.Channel | None = None
        self._stub: gateway_pb2_grpc.GatewayServiceStub | None = None

    def stub(self) -> gateway_pb2_grpc.GatewayServiceStub:
        if self._stub is None:  # created inside the server's event loop
            self._channel = grpc_server.service_channel(self.address)
            self._stub = gateway_pb2_grpc.GatewayServiceStub(self._channel)
        return self._stub

    def open(self, authorization: str) -> ConverseStream:
        metadata = (("authorization", authorization),) if authorization else None
        stream = ConverseStream(self.stub().Converse(metadata=metadata))
        owner = OWNER.get()
        if owner is not None:
            owner.opened(stream)
        return stream

    async def count_tokens(self, authorization: str, create: gateway_pb2.CreateResponse,
                           timeout_s: float = 30.0) -> gateway_pb2.CountTokensResponse:
        metadata = (("authorization", authorization),) if authorization else None
        return await self.stub().CountTokens(gateway_pb2.CountTokensRequest(request=create), metadata=metadata,
                                             timeout=timeout_s)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None


class ConverseStream:
    """A Converse call: write CreateResponse/CancelResponse, read events; transport errors as ApiError."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:
        self.call = call
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
            self.closed = True
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

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                await self.call.done_writing()
            except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                pass
            self.call.cancel()


def _client_gone() -> ApiError:
    return ApiError(499, "The client closed the connection.", type="cancelled", code="client_disconnected")
