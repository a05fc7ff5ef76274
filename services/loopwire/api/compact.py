"""``POST /v1/responses/compact``: a conversation (``input``, a ``previous_response_id`` or both)
compacted into the specification's ``response.compaction`` object: the first and latest user
messages kept as they were, then one ``compaction`` item holding a summary of the rest.

The summary is written by one model call through the gateway, with the harness's compaction
prompt. It is asked as a last user turn of the conversation itself (not under other
instructions), so the call extends the prefix the replica already holds and prefills only the
request. A summary the harness would drop (cut off at its token cap, repeating itself, empty)
fails the request rather than reaching the client.

With ``store`` (the default) the object is kept like a stored response, under the tenant, for
as long as responses are: its id then continues as a ``previous_response_id`` (the api resends
its items in full to the gateway, which never saw them). Its ``output`` may also be sent back in
``input`` by a client that keeps its own history (``store: false``).
"""

from __future__ import annotations

import copy
import functools
import logging
import secrets
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopwire.api import items, tools
from loopwire.api.body import read_json
from loopwire.api.context import (
    context,
    error_response,
    feed_until_done,
    first_events,
    request_span,
)
from loopwire.api.create import ParsedCreate, parse_create
from loopwire.api.errors import ApiError, previous_not_found
from loopwire.api.events import ResponseBuilder
from loopwire.api.store import ResponseStore, tenant_key
from loopwire.common.summaries import SUMMARY_INSTRUCTIONS, SUMMARY_MAX_TOKENS, SUMMARY_REQUEST, degenerate
from loopwire.v1 import common_pb2

log = logging.getLogger("loopwire.api")

OBJECT = "response.compaction"
# The specification's fields, the ones Codex adds to a compaction request (tools and the
# model settings of its turns: a delta must keep them), ``store`` and the replay extension.
FIELDS = {"model", "input", "previous_response_id", "instructions", "prompt_cache_key", "tools",
          "parallel_tool_calls", "reasoning", "text", "store", "loopwire_replay"}
MAX_CHAIN = 1000  # stored responses walked back for the user messages of a chain


def _parse(body: dict[str, Any], models: list[str]) -> ParsedCreate:
    items.check_keys(body, FIELDS, "")
    return parse_create(body, models=models)


async def compact_response(request: Request) -> Response:
    ctx = context(request)
    authorization = request.headers.get("authorization", "")
    with request_span("POST /v1/responses/compact"):
        try:
            owner = tenant_key(ctx.authorize(authorization), authorization)
            parsed = await read_json(request, ctx.max_body_bytes, ctx.decoding, owner,
                                     functools.partial(_parse, models=ctx.models))
            previous = parsed.create.previous_response_id
            users = chain_user_messages(ctx.store, owner, previous) + [
                i for i in parsed.input_json if i.get("type") == "message" and i.get("role") == "user"]
            check_previous(ctx.store, owner, parsed)
            create = parsed.create
            create.no_store = True  # the summary call is not a turn of the conversation
            create.sampling.max_output_tokens = SUMMARY_MAX_TOKENS
            create.ClearField("text_format")
            if create.tools or create.previous_response_id:
                create.tool_choice.mode = common_pb2.TOOL_CHOICE_MODE_NONE
            create.input.append(items.text_item(common_pb2.ROLE_USER, f"{SUMMARY_INSTRUCTIONS}\n\n{SUMMARY_REQUEST}"))
            ctx.apply_replay(create)
            builder = ResponseBuilder(parsed)
            stream = ctx.gateway.open(authorization, create.previous_response_id)
            try:
                events, _ = await first_events(stream, create, builder.feed)
            except ApiError:
                await stream.close()
                raise
            await feed_until_done(stream, events, builder)
            failure = builder.failure()
            if failure is not None:
                raise failure
            summary = _summary(builder)
        except ApiError as e:
            log.info("POST /v1/responses/compact -> %d %s", e.status, e.code)
            return error_response(e)
    kept = users[:1] + users[1:][-1:]
    output = [*copy.deepcopy(kept), {"type": "compaction", "id": f"cmp_{secrets.token_hex(12)}",
                                     "encrypted_content": items.compaction_content(summary)}]
    resource = {"id": f"resp_{secrets.token_hex(16)}", "object": OBJECT, "created_at": int(time.time()),
                "output": output, "usage": builder.usage}
    if parsed.store:
        ctx.store.put(owner, resource, parsed.input_json)
    u = builder.usage or {}
    log.info("POST /v1/responses/compact id=%s previous=%s in=%s cached=%s out=%s kept=%d", resource["id"],
             previous or "-", u.get("input_tokens"), (u.get("input_tokens_details") or {}).get("cached_tokens"),
             u.get("output_tokens"), len(kept))
    return JSONResponse(resource)


def _summary(builder: ResponseBuilder) -> str:
    """The summary's text (its reasoning left out), or the harness's reason to drop it as a 500."""
    text = "".join(part["text"] for item in builder.output if item["type"] == "message"
                   for part in item["content"]).strip()
    finish = common_pb2.FINISH_REASON_LENGTH if builder.status == "incomplete" else common_pb2.FINISH_REASON_STOP
    why = "the summary call returned no text" if not text else degenerate(
        text, (builder.usage or {}).get("output_tokens", 0), SUMMARY_MAX_TOKENS, finish)
    if why:
        raise ApiError(500, f"The conversation could not be compacted: {why}.", type="server_error",
                       code="compaction_failed")
    return text


def chain_user_messages(store: ResponseStore, owner: str, previous: str) -> list[dict[str, Any]]:
    """The user messages of the stored responses ``previous`` continues (as far back as they are
    stored here), oldest first."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while previous and previous not in seen and len(seen) < MAX_CHAIN:
        seen.add(previous)
        stored = store.get(owner, previous)
        if stored is None:
            break
        source = stored.response["output"] if stored.response.get("object") == OBJECT else stored.input_items
        out[:0] = [i for i in source if i.get("type") == "message" and i.get("role") == "user"]
        previous = stored.response.get("previous_response_id") or ""
    return out


def check_previous(store: ResponseStore, owner: str, parsed: ParsedCreate) -> None:
    """The request's ``previous_response_id`` as this api knows it: a response deleted here cannot
    be continued (the gateway, which has no delete, still has it); a compaction is expanded."""
    previous = parsed.create.previous_response_id
    if previous and store.deleted(owner, previous):
        raise previous_not_found(previous)
    if previous and not parsed.create.tools:
        stored = store.get(owner, previous)
        parsed.tool_kinds = tools.inherited(stored.response if stored else None, parsed.tool_kinds)
    expand_compacted(store, owner, parsed)


def expand_compacted(store: ResponseStore, owner: str, parsed: ParsedCreate) -> None:
    """A request continuing a compaction of the tenant becomes a full request: the compaction's
    items, then its own (the gateway never held the compacted conversation). The Response object
    still names the compaction as its ``previous_response_id``."""
    previous = parsed.create.previous_response_id
    stored = store.get(owner, previous) if previous else None
    if stored is None or stored.response.get("object") != OBJECT:
        return
    output = stored.response["output"]
    kept = items.response_input(output)
    parsed.create.ClearField("previous_response_id")
    new = list(parsed.create.input)
    del parsed.create.input[:]
    parsed.create.input.extend([*kept, *new])
    parsed.echo["previous_response_id"] = previous
    parsed.input_json = copy.deepcopy(output) + parsed.input_json
