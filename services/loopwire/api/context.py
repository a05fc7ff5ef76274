"""What every route shares: the gateway client, the served model names, the body limit, the
optional local key check, request logging and tracing, and the watch on each client connection
that cancels its generations when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from starlette.responses import JSONResponse
from starlette.types import Message, Receive

from loopwire.api.background import BackgroundResponses
from loopwire.api.body import Decoding
from loopwire.api.errors import ApiError
from loopwire.api.gateway_client import ConverseStream, GatewayClient
from loopwire.api.store import ResponseStore
from loopwire.common import telemetry
from loopwire.common.auth import Authenticator, AuthError, Tenant
from loopwire.v1 import common_pb2, gateway_pb2

log = logging.getLogger("loopwire.api")


@dataclass
class ApiContext:
    gateway: GatewayClient
    models: list[str]
    max_body_bytes: int = 16 * 1024 * 1024
    # The same tenants file as the gateway's: refuses bad keys early and guards /v1/models.
    # The gateway still authenticates every forwarded key (it owns tenants and limits).
    authenticator: Authenticator | None = None
    # Recorded assistant turns (--replay): response n replays turn n, unless the request brings its own.
    replay: list[common_pb2.ReplayOutput] = field(default_factory=list)
    replayed: int = 0
    # An SSE comment line after this many seconds without an event (a long prefill), so proxies
    # and clients with read timeouts keep the stream open; 0: never.
    sse_keepalive_s: float = 15.0
    # Finished responses (and those in flight) per tenant, for GET/DELETE/cancel of /v1/responses/{id}.
    store: ResponseStore = field(default_factory=ResponseStore)
    # The running background responses (background: true), bounded per tenant.
    background: BackgroundResponses = field(default_factory=BackgroundResponses)
    # A WebSocket connection older than this starts no more responses and closes once its last
    # one ends (OpenAI's websocket_connection_limit_reached, after 60 minutes); 0: no limit.
    ws_max_age_s: float = 3600.0
    # The worker threads that decode and parse large or compressed bodies, bounded per tenant.
    decoding: Decoding = field(default_factory=Decoding)

    def apply_replay(self, create: gateway_pb2.CreateResponse) -> None:
        if self.replay and not create.HasField("replay"):
            create.replay.CopyFrom(self.replay[self.replayed % len(self.replay)])
            self.replayed += 1

    def authorize(self, header: str) -> Tenant | None:
        """Check the caller's ``Authorization`` header locally (when a tenants file is loaded)."""
        if self.authenticator is None:
            return None
        try:
            return self.authenticator.authenticate((("authorization", header),) if header else None)
        except AuthError as e:
            if e.permission:
                raise ApiError(403, str(e), type="permission_error", code="permission_denied") from None
            raise ApiError(401, f"Incorrect API key provided: {e}", type="authentication_error",
                           code="invalid_api_key") from None


def context(request: Any) -> ApiContext:
    return request.app.state.api  # type: ignore[no-any-return]


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers())


def sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


# An SSE comment: every client's parser skips it (the openai SDK included), but bytes flow.
SSE_KEEPALIVE = b": keepalive\n\n"


async def with_keepalive(events: AsyncIterator[gateway_pb2.ConverseResponse],
                         interval_s: float) -> AsyncIterator[gateway_pb2.ConverseResponse | None]:
    """``events``, with a None each time ``interval_s`` seconds pass without one (0: never).

    The pending read is kept across ticks (never cancelled by a tick), so no event is lost.
    """
    if interval_s <= 0:
        async for event in events:
            yield event
        return
    pending: asyncio.Future[gateway_pb2.ConverseResponse] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=interval_s)
            if not done:
                yield None
                continue
            future, pending = pending, None
            try:
                event = future.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending


@contextlib.contextmanager
def request_span(name: str, **attributes: Any) -> Iterator[trace.Span]:
    """One span per HTTP request or WebSocket turn; the gateway's spans join it (traceparent in metadata)."""
    with telemetry.tracer().start_as_current_span(name, kind=trace.SpanKind.SERVER,
                                                  attributes={k: v for k, v in attributes.items() if v}) as span:
        yield span


async def first_events(stream: ConverseStream, create: gateway_pb2.CreateResponse,
                       feed: Any) -> tuple[AsyncIterator[gateway_pb2.ConverseResponse], list[dict[str, Any]]]:
    """Send ``create`` and read until the response exists: a refusal before that is the request's
    HTTP error (status and all), not an event of a 200 stream."""
    await stream.create(create)
    events = stream.events()
    out: list[dict[str, Any]] = []
    async for event in events:
        out += feed(event)
        if event.WhichOneof("event") == "created":
            break
    return events, out


class ClientWatch:
    """One client connection (an HTTP request or a WebSocket). When the client goes away, the
    Converse streams opened for it are cancelled at once, so no generation runs for nobody, and the
    api log says how each response in flight ended.

    Starlette notices a departure only while it streams a response (by cancelling the task that
    streams it, where no cleanup can await) and never while a non-streamed response is awaited.
    So the watch sees the ASGI messages itself: once a request's body is in, a task waits on
    ``receive()`` for ``http.disconnect`` (no polling) and hands it to whoever asks next; a
    WebSocket's ``websocket.disconnect`` passes through the app's own reads.
    """

    def __init__(self, receive: Receive, label: str, tenant: Callable[[], str]) -> None:
        self._receive = receive
        self.label = label  # as the route's own log lines begin
        self._tenant = tenant
        self.streams: list[ConverseStream] = []  # opened for this client (gateway_client.OWNER)
        self.gone = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def receive(self) -> Message:
        if self._reader is not None:  # the body is in: only the disconnect is left to come
            await self.gone.wait()
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] in ("http.disconnect", "websocket.disconnect"):
            self.left()
        elif message["type"] == "http.request" and not message.get("more_body", False):
            self._reader = asyncio.create_task(self._until_disconnect())
        return message

    async def _until_disconnect(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self.left()

    def opened(self, stream: ConverseStream) -> None:
        self.streams.append(stream)
        if self.gone.is_set():  # gone before the request got this far: nothing may start
            stream.abandon()
            self._ended("-")

    def left(self) -> None:
        """The client is gone (or its response is complete: then no stream is in flight)."""
        if self.gone.is_set():
            return
        self.gone.set()
        for stream in self.streams:
            response_id = stream.abandon()
            if response_id is not None:
                self._ended(response_id or "-")

    def _ended(self, response_id: str) -> None:
        log.info("%s tenant=%s id=%s status=cancelled reason=client_disconnected", self.label, self._tenant(),
                 response_id)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


async def feed_until_done(stream: ConverseStream, events: AsyncIterator[gateway_pb2.ConverseResponse],
                          builder: Any) -> None:
    """A non-streamed response: every event to its builder until it is done; the stream closes
    either way (ApiError when the gateway goes away meanwhile)."""
    try:
        async for event in events:
            builder.feed(event)
            if builder.done:
                break
    finally:
        await stream.close()
