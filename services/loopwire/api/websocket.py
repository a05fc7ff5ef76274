"""WebSocket mode on ``/v1/responses``: one connection, lanes of Converse streams.

Each ``response.create`` message is a CreateResponse; with ``previous_response_id`` it carries
only the new items, exactly the gateway's delta. As in OpenAI's mode, ``stream_id`` names a
lane: a lane runs its responses one at a time in arrival order, different lanes run at once
(each on a Converse stream of its own, since a stream runs one response at a time), and every
event of a named lane carries its ``stream_id``. A request without one goes to the default
lane, whose events carry none: the one-at-a-time behaviour of a connection that never names a
lane. At most ``MAX_IN_FLIGHT`` responses run at once over all lanes (later ones wait their
turn) and a connection accepts at most ``MAX_NAMED_LANES`` distinct names in its life.

Beyond OpenAI's mode, which keeps only each lane's latest response, ``previous_response_id``
may name any stored response of the tenant, made on any connection or over HTTP: the gateway
forks the conversation there. A ``store: false`` response lives on its lane's stream only.

``generate: false`` prefills the request through the gateway (a one-token generation whose
output is dropped: the gateway has no prefill-only request) and answers an id once the prompt is
in the replica's prefix cache; the next ``response.create`` naming that id sends both as one
request, whose prompt is then cached up to the new items.

A connection older than ``--ws-max-age-s`` starts no new response (each is answered
``websocket_connection_limit_reached``), lets those in flight finish, and closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from loopwire.api import items
from loopwire.api.body import INLINE_BYTES
from loopwire.api.compact import check_previous, compaction_turn
from loopwire.api.context import ApiContext, context, request_span
from loopwire.api.create import GATEWAY_PARAMS, ParsedCreate, parse_create, request_param
from loopwire.api.errors import ApiError, bad_request, from_stream_error, previous_not_found
from loopwire.api.events import ResponseBuilder
from loopwire.api.gateway_client import ConverseStream
from loopwire.api.responses import ended
from loopwire.api.store import tenant_key
from loopwire.v1 import gateway_pb2

log = logging.getLogger("loopwire.api")

MAX_EVICTED = 1024  # per connection
MAX_IN_FLIGHT = 16  # responses running at once on one connection, over all its lanes (OpenAI's)
MAX_NAMED_LANES = 32  # distinct stream_ids one connection accepts (OpenAI's; the default lane is not one)
MAX_HELD = 64  # generate: false requests kept per connection (the oldest is forgotten first)
MAX_ORIGINS = 4096  # which lane made each of the connection's latest responses
STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")
# Fields of a held request the warm-up leaves out: they shape the output, not the prompt.
NOT_PROMPT = ("tool_choice", "text_format", "replay", "parallel_tool_calls")


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


def connection_limit(max_age_s: float) -> ApiError:
    minutes = f"{max_age_s / 60:g} minutes" if max_age_s >= 60 else f"{max_age_s:g} seconds"
    return bad_request(f"Responses websocket connection limit reached ({minutes}). Create a new websocket "
                       "connection to continue.", None, "websocket_connection_limit_reached")


@dataclass
class Lane:
    """One ``stream_id`` (None: the default lane): its queue, its Converse stream, what runs on it."""

    name: str | None
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    stream: ConverseStream | None = None
    in_flight: str = ""
    task: asyncio.Task[None] | None = None

    def tag(self, event: dict[str, Any]) -> dict[str, Any]:
        """``event`` as this lane sends it: a named lane's events carry its stream_id."""
        return event if self.name is None else {**event, "stream_id": self.name}


class Connection:
    def __init__(self, ws: WebSocket, ctx: ApiContext, authorization: str, owner: str = "") -> None:
        self.ws = ws
        self.ctx = ctx
        self.authorization = authorization
        self.owner = owner  # whose store the finished responses go to
        # Ids a failed continuation named: evicted from this connection, as OpenAI's mode does, so
        # the client resends in full rather than building on a turn it may have half sent.
        self.evicted: dict[str, None] = {}
        self.lanes: dict[str | None, Lane] = {}
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.send_lock = asyncio.Lock()
        # generate: false -> the request held here, under the id it was answered with.
        self.held: OrderedDict[str, ParsedCreate] = OrderedDict()
        self.origins: OrderedDict[str, str | None] = OrderedDict()  # response id -> its lane
        self.pending = 0  # requests accepted and not yet answered
        self.idle = asyncio.Event()
        self.idle.set()
        self.expired = False

    async def send(self, event: dict[str, Any]) -> None:
        async with self.send_lock:
            await self.ws.send_text(json.dumps(event, separators=(",", ":")))

    async def serve(self) -> None:
        age = asyncio.create_task(self._age()) if self.ctx.ws_max_age_s > 0 else None
        try:
            await self._read()
        finally:
            # The client left (perhaps mid-response): stop what runs for it, free the streams.
            tasks = [t for t in (age, *(lane.task for lane in self.lanes.values())) if t is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for lane in self.lanes.values():
                if lane.stream is not None:
                    if lane.in_flight:
                        await lane.stream.cancel(lane.in_flight)
                    await lane.stream.close()

    async def _age(self) -> None:
        """At the age limit: no new response; once the last in flight ended, say why and close."""
        await asyncio.sleep(self.ctx.ws_max_age_s)
        self.expired = True
        await self.idle.wait()
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await self.send(connection_limit(self.ctx.ws_max_age_s).event())
            await self.ws.close(code=1000, reason="websocket_connection_limit_reached")

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
                data = text.encode()
                body = items.json_object(data) if len(data) <= INLINE_BYTES else \
                    await self.ctx.decoding.run(self.owner, items.json_object, data)
                if body.get("type") != "response.create":
                    raise bad_request(f"Unknown event type {body.get('type')!r}: send 'response.create'.", "type",
                                      "invalid_event")
                lane = self._lane(body.pop("stream_id", None))
            except ApiError as e:
                await self.send(e.event())
                continue
            if self.expired:
                await self.send(lane.tag(connection_limit(self.ctx.ws_max_age_s).event()))
                continue
            self.pending += 1
            self.idle.clear()
            lane.queue.put_nowait(body)

    def _lane(self, name: Any) -> Lane:
        """The lane a request names (a new one started), or the stream_id's error."""
        if name is not None and not (isinstance(name, str) and STREAM_ID.fullmatch(name)):
            raise bad_request("The 'stream_id' field must be a non-empty string with at most 256 characters and may "
                              "only contain letters, numbers, underscores, hyphens, and periods.", "stream_id",
                              "invalid_stream_id")
        lane = self.lanes.get(name)
        if lane is None:
            lane = Lane(name)
            if name is not None and sum(n is not None for n in self.lanes) >= MAX_NAMED_LANES:
                raise _Tagged(lane, bad_request(
                    f"This WebSocket connection has reached its maximum number of distinct stream IDs "
                    f"({MAX_NAMED_LANES}). Reuse an existing stream_id or open a new WebSocket connection.",
                    "stream_id", "websocket_stream_limit_reached"))
            lane.task = asyncio.create_task(self._work(lane))
            self.lanes[name] = lane
        return lane

    async def _work(self, lane: Lane) -> None:
        while True:
            body = await lane.queue.get()
            try:
                async with self.slots:
                    if self.expired:  # waited past the age limit: never started
                        raise connection_limit(self.ctx.ws_max_age_s)
                    await self._respond(lane, body)
            except ApiError as e:
                self._evict(lane, body)
                await self.send(lane.tag(e.event()))
            finally:
                self.pending -= 1
                if not self.pending:
                    self.idle.set()

    def _evict(self, lane: Lane, body: dict[str, Any]) -> None:
        """A failed continuation evicts the id it named, unless another lane of this connection
        made it (a fork that failed leaves its parent to the lane it came from)."""
        previous = body.get("previous_response_id")
        if not (isinstance(previous, str) and previous):
            return
        if self.origins.get(previous, lane.name) != lane.name:
            return
        self.evicted[previous] = None
        while len(self.evicted) > MAX_EVICTED:
            del self.evicted[next(iter(self.evicted))]

    def _made(self, response_id: str, lane: Lane) -> None:
        self.origins[response_id] = lane.name
        while len(self.origins) > MAX_ORIGINS:
            del self.origins[next(iter(self.origins))]

    async def _stream(self, lane: Lane, previous_response_id: str) -> ConverseStream:
        """The lane's stream, on the gateway holding ``previous_response_id`` (a lane's stream moves
        to another gateway only for a continuation of that gateway's response)."""
        holder = self.ctx.gateway.holder(previous_response_id)
        if lane.stream is not None and holder is not None and lane.stream.gateway is not holder:
            stream, lane.stream = lane.stream, None
            await stream.close()
        if lane.stream is None:
            lane.stream = self.ctx.gateway.open(self.authorization, previous_response_id)
        return lane.stream

    async def _lost(self, lane: Lane, e: ApiError) -> None:
        """The lane's stream itself ended (not a failed request): a new one for its next request."""
        if e.transport and lane.stream is not None:
            stream, lane.stream = lane.stream, None
            await stream.close()

    async def _respond(self, lane: Lane, body: dict[str, Any]) -> None:
        window = await self.ctx.gateway.context_length(self.authorization)
        parsed = await self.ctx.decoding.run(
            self.owner, functools.partial(parse_create, models=self.ctx.models, websocket=True, context_length=window),
            body)
        previous = parsed.create.previous_response_id
        if previous in self.evicted:
            raise previous_not_found(previous)
        if parsed.compaction_trigger:  # compaction v2: one compaction item (compact.compaction_turn)
            self.ctx.apply_replay(parsed.create)
            _, events = await compaction_turn(self.ctx, self.authorization, self.owner, parsed)
            for compaction_event in events:
                await self.send(lane.tag(compaction_event))
            return
        check_previous(self.ctx.store, self.owner, parsed)
        parsed = self._merge_held(parsed)
        if not parsed.generate:
            await self._hold(lane, parsed)
            return
        self.ctx.apply_replay(parsed.create)
        builder = ResponseBuilder(parsed)
        stream = await self._stream(lane, parsed.create.previous_response_id)
        with request_span("WS response.create", **{"gen_ai.request.model": parsed.create.model,
                                                   "loopwire.stream_id": lane.name or ""}) as span:
            try:
                await stream.create(parsed.create)
                async for event in stream.events():
                    out = builder.feed(event)
                    if builder.id and not lane.in_flight:
                        lane.in_flight = builder.id
                        self._made(builder.id, lane)
                        span.set_attribute("gen_ai.response.id", builder.id)
                    for e in out:
                        await self.send(lane.tag(e))
                    if builder.done:
                        break
            except ApiError as e:
                e.sequence_number = builder.seq
                await self._lost(lane, e)
                raise
            finally:
                lane.in_flight = ""
                if builder.id:
                    ended(self.ctx.store, self.owner, builder)
        if builder.status == "failed":
            self._evict(lane, body)
        u = builder.usage or {}
        log.info("WS response.create id=%s lane=%s status=%s previous=%s in=%s cached=%s tokenized=%s", builder.id,
                 lane.name or "-", builder.status, parsed.create.previous_response_id or "-", u.get("input_tokens"),
                 (u.get("input_tokens_details") or {}).get("cached_tokens"), builder.stats.get("tokens_tokenized"))

    def _merge_held(self, parsed: ParsedCreate) -> ParsedCreate:
        """A request continuing a generate:false id becomes the held request plus its new items."""
        held_id = parsed.create.previous_response_id
        held = self.held.pop(held_id, None)
        if held is None:
            return parsed
        parsed.echo["previous_response_id"] = held_id  # what the client continued, as it named it
        # What to generate, and how, is the new request's; the rest is the held one's.
        own = {"sampling", "no_store", "tool_choice", "parallel_tool_calls", "text_format"}
        create = gateway_pb2.CreateResponse(**{f.name: v for f, v in held.create.ListFields() if f.name not in own},
                                            **{f.name: v for f, v in parsed.create.ListFields() if f.name in own})
        create.input.extend(parsed.create.input)
        if parsed.create.HasField("replay"):
            create.replay.CopyFrom(parsed.create.replay)
        parsed.create = create
        parsed.input_json = held.input_json + parsed.input_json
        if not parsed.tools_json:
            parsed.tools_json, parsed.tool_kinds, parsed.not_offered = held.tools_json, held.tool_kinds, \
                held.not_offered
        return parsed

    async def _hold(self, lane: Lane, parsed: ParsedCreate) -> None:
        """generate: false: prefill the prompt, then answer an id the next request may continue."""
        builder = ResponseBuilder(parsed)
        builder.stats = await self._warm(lane, parsed.create)
        builder.id = "resp_" + secrets.token_hex(8)
        self.held[builder.id] = parsed
        while len(self.held) > MAX_HELD:
            self.held.popitem(last=False)
        builder.status = "completed"
        builder.completed_at = builder.created_at
        builder.usage = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}
        for kind, status in (("response.created", "in_progress"), ("response.completed", "completed")):
            await self.send(lane.tag(builder._event(kind, response={**builder.response(), "status": status})))

    async def _warm(self, lane: Lane, create: gateway_pb2.CreateResponse) -> dict[str, Any]:
        """The request's prompt through the gateway onto a replica, generating one token that is
        dropped (unstored); what the gateway did, as the Response's ``loopwire`` object."""
        warm = gateway_pb2.CreateResponse()
        warm.CopyFrom(create)
        for name in NOT_PROMPT:
            warm.ClearField(name)  # type: ignore[arg-type]
        warm.sampling.max_output_tokens = 1
        warm.no_store = True
        stream = await self._stream(lane, create.previous_response_id)
        replica = ""
        try:
            await stream.create(warm)
            async for event in stream.events():
                kind = event.WhichOneof("event")
                if kind == "created":
                    lane.in_flight, replica = event.created.response_id, event.created.replica_id
                elif kind == "failed":
                    raise request_param(from_stream_error(event.failed.error, create.previous_response_id),
                                        GATEWAY_PARAMS)
                elif kind == "completed":
                    return items.loopwire_stats(event.completed.timings, replica)
        except ApiError as e:
            await self._lost(lane, e)
            raise
        finally:
            lane.in_flight = ""
        raise AssertionError("unreachable: events() raises when the stream ends")


class _Tagged(ApiError):
    """An error of a request whose lane is known (its event carries the stream_id)."""

    def __init__(self, lane: Lane, error: ApiError) -> None:
        super().__init__(error.status, error.message, type=error.type, param=error.param, code=error.code)
        self.lane = lane

    def event(self) -> dict[str, Any]:
        return self.lane.tag(super().event())
