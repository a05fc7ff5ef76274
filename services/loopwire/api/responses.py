"""``POST /v1/responses``: one short Converse stream per request, streamed as SSE or folded
into one Response object. ``previous_response_id`` resolves in the gateway's response store,
so a chain continues from any stored response of the tenant, on any connection (but not from
one deleted here). Each finished response with ``store`` is kept in the api's store, for
``GET /v1/responses/{id}``; while it runs, it can be cancelled. ``background: true`` runs in a
task of this process, polled and cancelled by id (``background.py``)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.trace import Span
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from loopwire.api.body import read_json
from loopwire.api.compact import check_previous, compaction_turn
from loopwire.api.context import (
    SSE_KEEPALIVE,
    ApiContext,
    context,
    error_response,
    feed_until_done,
    first_events,
    request_span,
    sse,
    with_keepalive,
)
from loopwire.api.create import ParsedCreate, parse_create
from loopwire.api.errors import ApiError, unsupported
from loopwire.api.events import ResponseBuilder
from loopwire.api.gateway_client import OWNER, ConverseStream
from loopwire.api.store import InFlight, ResponseStore, tenant_key
from loopwire.v1 import gateway_pb2

log = logging.getLogger("loopwire.api")


async def create_response(request: Request) -> Response:
    ctx = context(request)
    authorization = request.headers.get("authorization", "")
    with request_span("POST /v1/responses") as span:
        try:
            tenant = ctx.authorize(authorization)
            owner = tenant_key(tenant, authorization)
            parsed = await read_json(request, ctx.max_body_bytes, ctx.decoding, owner,
                                     functools.partial(parse_create, models=ctx.models,
                                                       context_length=await ctx.gateway.context_length(authorization)))
            if parsed.compaction_trigger:
                return await _compaction_turn(ctx, authorization, owner, parsed)
            check_previous(ctx.store, owner, parsed)
            ctx.apply_replay(parsed.create)
            if not parsed.generate:
                raise unsupported("generate", "generate: false outside WebSocket mode")
        except ApiError as e:
            log.info("POST /v1/responses -> %d %s", e.status, e.code)
            return error_response(e)
        who = tenant.name if tenant else "?"
        if parsed.background:
            return await background_response(ctx, authorization, who, owner, parsed, span)
        builder = ResponseBuilder(parsed)
        stream = ctx.gateway.open(authorization, parsed.create.previous_response_id)
        try:
            events, first = await first_events(stream, parsed.create, builder.feed)
        except ApiError as e:
            await stream.close()
            log.info("POST /v1/responses tenant=%s -> %d %s", who, e.status, e.code)
            return error_response(e)
        span.set_attribute("gen_ai.response.id", builder.id)
        ctx.store.begin(owner, builder.id, InFlight(stream, builder.response))
        if not parsed.stream:
            try:
                await feed_until_done(stream, events, builder)
            except ApiError as e:
                return error_response(e)
            finally:
                ended(ctx.store, owner, builder)
            _log(builder, who, stream=False)
            failure = builder.failure()
            return error_response(failure) if failure else JSONResponse(builder.response())

    return StreamingResponse(_streamed(ctx, owner, who, stream, events, first, builder),
                             media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


async def _streamed(ctx: ApiContext, owner: str, who: str, stream: ConverseStream, events: AsyncIterator[gateway_pb2.ConverseResponse],
                    first: list[dict[str, Any]], builder: ResponseBuilder) -> AsyncIterator[bytes]:
    """A streamed response's events as SSE: those already read (``first``), then the rest; the
    generation is cancelled when the client leaves before it ends."""
    logged = False
    try:
        for ready in first:
            yield sse(ready)
        async for event in with_keepalive(events, ctx.sse_keepalive_s):
            if event is None:  # a long prefill: keep the connection visibly alive
                yield SSE_KEEPALIVE
                continue
            outs = list(builder.feed(event))
            if builder.done:  # logged before the last event leaves: a client may hang up right after it
                _log(builder, who, stream=True)
                logged = True
            for out in outs:
                yield sse(out)
            if builder.done:
                break
    except ApiError as e:  # the gateway went away mid-response
        yield sse(error_event(e, builder.seq))
    finally:
        ended(ctx.store, owner, builder)
        if not builder.done:  # the client left: stop the generation now
            await stream.cancel(builder.id)
        await stream.close()
        if not logged and not stream.abandoned:  # an abandoned one is logged as cancelled already
            _log(builder, who, stream=True)


async def _compaction_turn(ctx: ApiContext, authorization: str, owner: str, parsed: ParsedCreate) -> Response:
    """Compaction v2 (compact.compaction_turn): the Response, or its events when streamed."""
    ctx.apply_replay(parsed.create)
    resource, events = await compaction_turn(ctx, authorization, owner, parsed)
    if not parsed.stream:
        return JSONResponse(resource)
    return Response(b"".join(sse(e) for e in events), media_type="text/event-stream",
                    headers={"cache-control": "no-cache"})


async def background_response(ctx: ApiContext, authorization: str, tenant: str, owner: str, parsed: ParsedCreate,
                              span: Span) -> Response:
    """``background: true``: answered once the gateway created the response (``in_progress``), the
    rest read by a task of this process (``background.py``); ``stream`` streams it meanwhile."""
    try:
        ctx.background.reserve(owner)
    except ApiError as e:
        log.info("POST /v1/responses tenant=%s background=true -> %d %s", tenant, e.status, e.code)
        return error_response(e)
    builder = ResponseBuilder(parsed)
    stream: ConverseStream | None = None
    try:
        token = OWNER.set(None)  # for no client connection: its departure must not end the response
        try:
            stream = ctx.gateway.open(authorization, parsed.create.previous_response_id)
        finally:
            OWNER.reset(token)
        events, first = await first_events(stream, parsed.create, builder.feed)
    except ApiError as e:
        ctx.background.release(owner)
        if stream is not None:
            await stream.close()
        log.info("POST /v1/responses tenant=%s background=true -> %d %s", tenant, e.status, e.code)
        return error_response(e)
    except BaseException:
        ctx.background.release(owner)
        if stream is not None:
            stream.abandon()
        raise
    span.set_attribute("gen_ai.response.id", builder.id)
    ctx.store.begin(owner, builder.id, InFlight(stream, builder.response))

    def finished() -> None:
        ended(ctx.store, owner, builder)
        _log(builder, tenant, stream=parsed.stream)

    run = ctx.background.start(owner, stream, events, builder, finished)
    log.info("POST /v1/responses tenant=%s id=%s background=true stream=%s -> %s", tenant, builder.id,
             parsed.stream, builder.status)
    if not parsed.stream:
        return JSONResponse(builder.response())
    sub = run.subscribe()  # before the task first runs: it misses no event

    async def body_events() -> AsyncIterator[bytes]:
        try:
            for ready in first:
                yield sse(ready)
            async for event in sub.events(ctx.sse_keepalive_s):
                yield SSE_KEEPALIVE if event is None else sse(event)
            if sub.overflowed:
                yield sse(error_event(ApiError(503, "This stream fell too far behind its background response, "
                                                    "which goes on: poll GET /v1/responses/{id}.",
                                               type="server_error", code="stream_overflow"), builder.seq))
            elif not builder.done:
                yield sse(error_event(ApiError(503, "The server shut down: the background response was cancelled.",
                                               type="server_error", code="unavailable"), builder.seq))
        finally:  # the client left: the response goes on
            run.unsubscribe(sub)

    return StreamingResponse(body_events(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


def ended(store: ResponseStore, owner: str, builder: ResponseBuilder) -> None:
    """The response is over: stored if it finished (and ``store``), no longer cancellable."""
    store.end(owner, builder.id, builder.response() if builder.done else None, builder.parsed.input_json,
              store=builder.parsed.store)


def error_event(e: ApiError, sequence_number: int) -> dict[str, Any]:
    """The stream's ``error`` event: the error under ``error`` (Open Responses) and its fields at the
    top level too (OpenAI's shape), the event's own ``type`` kept."""
    error = e.body()["error"]
    return {"code": error["code"], "message": error["message"], "param": error["param"], "type": "error",
            "sequence_number": sequence_number, "error": error}


def _log(builder: ResponseBuilder, tenant: str, *, stream: bool) -> None:
    u = builder.usage or {}
    log.info("POST /v1/responses tenant=%s id=%s status=%s stream=%s previous=%s in=%s cached=%s out=%s "
             "tokenized=%s replica=%s", tenant, builder.id, builder.status, stream,
             builder.parsed.create.previous_response_id or "-", u.get("input_tokens"),
             (u.get("input_tokens_details") or {}).get("cached_tokens"), u.get("output_tokens"),
             builder.stats.get("tokens_tokenized"), builder.replica)
