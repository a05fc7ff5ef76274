"""WebSocket mode on ``/v1/responses``: one connection is one Converse stream.

Each ``response.create`` message is a CreateResponse on that stream; with
``previous_response_id`` it carries only the new items, exactly the gateway's delta. Responses
run one at a time in arrival order (later ones queue). Beyond OpenAI's mode, which keeps only
the connection's latest response, ``previous_response_id`` may name any stored response of the
tenant, made on any connection or over HTTP: the gateway forks the conversation there.

``generate: false`` keeps the request on the connection (nothing is generated or stored) and
answers a response id; the next ``response.create`` naming that id sends both as one request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from loopwire.api import items
from loopwire.api.compact import check_previous
from loopwire.api.context import ApiContext, context, request_span
from loopwire.api.create import ParsedCreate, parse_create
from loopwire.api.errors import ApiError, bad_request, previous_not_found
from loopwire.api.events import ResponseBuilder
from loopwire.api.gateway_client import ConverseStream
from loopwire.api.responses import ended
from loopwire.api.store import tenant_key
from loopwire.v1 import gateway_pb2

log = logging.getLogger("loopwire.api")

MAX_EVICTED = 1024  # per connection


async def responses_socket(ws: WebSocket) -> None:
    ctx = context(ws)
    authorization = ws.headers.get("authorization", "")
    try:
        tenant = ctx.authorize(authorization)
    except ApiError as e:
        await _deny(ws, e)
        return
    await ws.accept()
    await Connection(ws, ctx, authorization, tenant_key(tenant, authorization)).serve()


async def _deny(ws: WebSocket, e: ApiError) -> None:
    """Refuse the upgrade with the HTTP status and OpenAI body (close 1008 where the server cannot)."""
    try:
        await ws.send_denial_response(JSONResponse(e.body(), status_code=e.status))
    except RuntimeError:
        await ws.close(code=1008, reason=e.message[:120])


class Connection:
    def __init__(self, ws: WebSocket, ctx: ApiContext, authorization: str, owner: str = "") -> None:
        self.ws = ws
        self.ctx = ctx
        self.authorization = authorization
        self.owner = owner  # whose store the finished responses go to
        # Ids a failed continuation named: evicted from this connection, as OpenAI's mode does, so
        # the client resends in full rather than building on a turn it may have half sent.
        self.evicted: dict[str, None] = {}
        self.stream: ConverseStream | None = None
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.send_lock = asyncio.Lock()
        # generate: false -> the request held here, under the id it was answered with.
        self.held: tuple[str, ParsedCreate] | None = None
        self.in_flight: str = ""

    async def send(self, event: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(event, separators=(",", ":")))

    async def serve(self) -> None:
        worker = asyncio.create_task(self._work())
        try:
            await self._read()
        finally:
            # The client left (perhaps mid-response): stop what runs for it, free the stream.
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
            if self.stream is not None:
                if self.in_flight:
                    await self.stream.cancel(self.in_flight)
                await self.stream.close()

    async def _read(self) -> None:
        while True:
            try:
                message = await self.ws.receive()
            except (WebSocketDisconnect, RuntimeError):
                return
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await self.send(bad_request("Binary frames are not supported: send JSON text messages.",
                                            code="invalid_message").event())
                continue
            text = message.get("text") or ""
            if len(text.encode()) > self.ctx.max_body_bytes:
                await self.send(ApiError(413, f"Message is over this server's {self.ctx.max_body_bytes}-byte "
                                         "limit.", code="request_too_large").event())
                continue
            try:
                body = items.json_object(text.encode())
                if body.get("type") != "response.create":
                    raise bad_request(f"Unknown event type {body.get('type')!r}: send 'response.create'.", "type",
                                      "invalid_event")
            except ApiError as e:
                await self.send(e.event())
                continue
            self.queue.put_nowait(body)

    async def _work(self) -> None:
        while (body := await self.queue.get()) is not None:
            try:
                await self._respond(body)
            except ApiError as e:
                self._evict(body)
                await self.send(e.event())

    def _evict(self, body: dict[str, Any]) -> None:
        previous = body.get("previous_response_id")
        if isinstance(previous, str) and previous:
            self.evicted[previous] = None
            while len(self.evicted) > MAX_EVICTED:
                del self.evicted[next(iter(self.evicted))]

    async def _respond(self, body: dict[str, Any]) -> None:
        parsed = parse_create(body, models=self.ctx.models, websocket=True)
        previous = parsed.create.previous_response_id
        if previous in self.evicted:
            raise previous_not_found(previous)
        check_previous(self.ctx.store, self.owner, parsed)
        parsed = self._merge_held(parsed)
        self.ctx.apply_replay(parsed.create)
        if not parsed.generate:
            await self._hold(parsed)
            return
        builder = ResponseBuilder(parsed)
        if self.stream is None:
            self.stream = self.ctx.gateway.open(self.authorization)
        with request_span("WS response.create", **{"gen_ai.request.model": parsed.create.model}) as span:
            try:
                await self.stream.create(parsed.create)
                async for event in self.stream.events():
                    out = builder.feed(event)
                    if builder.id and not self.in_flight:
                        self.in_flight = builder.id
                        span.set_attribute("gen_ai.response.id", builder.id)
                    for e in out:
                        await self.send(e)
                    if builder.done:
                        break
            except ApiError as e:
                e.sequence_number = builder.seq
                if e.transport:  # the stream itself ended: a new one for the next request
                    await self.stream.close()
                    self.stream = None
                raise
            finally:
                self.in_flight = ""
                if builder.id:
                    ended(self.ctx.store, self.owner, builder)
        if builder.status == "failed":
            self._evict(body)
        u = builder.usage or {}
        log.info("WS response.create id=%s status=%s previous=%s in=%s cached=%s tokenized=%s", builder.id,
                 builder.status, parsed.create.previous_response_id or "-", u.get("input_tokens"),
                 (u.get("input_tokens_details") or {}).get("cached_tokens"), builder.stats.get("tokens_tokenized"))

    def _merge_held(self, parsed: ParsedCreate) -> ParsedCreate:
        """A request continuing a generate:false id becomes the held request plus its new items."""
        if self.held is None or parsed.create.previous_response_id != self.held[0]:
            return parsed
        _, held = self.held
        self.held = None
        # What to generate, and how, is the new request's; the rest is the held one's.
        own = {"sampling", "no_store", "tool_choice", "parallel_tool_calls", "text_format"}
        create = gateway_pb2.CreateResponse(**{f.name: v for f, v in held.create.ListFields() if f.name not in own},
                                            **{f.name: v for f, v in parsed.create.ListFields() if f.name in own})
        create.input.extend(parsed.create.input)
        if parsed.create.HasField("replay"):
            create.replay.CopyFrom(parsed.create.replay)
        parsed.create = create
        parsed.input_json = held.input_json + parsed.input_json
        return parsed

    async def _hold(self, parsed: ParsedCreate) -> None:
        builder = ResponseBuilder(parsed)
        builder.id = "resp_" + secrets.token_hex(8)
        self.held = (builder.id, parsed)
        builder.status = "completed"
        builder.completed_at = builder.created_at
        builder.usage = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}
        await self.send(builder._event("response.created", response={**builder.response(), "status": "in_progress"}))
        await self.send(builder._event("response.completed", response=builder.response()))
