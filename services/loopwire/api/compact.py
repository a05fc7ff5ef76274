"""``POST /v1/responses/compact``: a conversation (``input``, a ``previous_response_id`` or both)
compacted into the specification's ``response.compaction`` object: the first and latest user
messages kept as they were, then one ``compaction`` item holding a summary of the rest.

The summary is written by one model call through the gateway, with the harness's compaction
prompt. It is asked as a last user turn of the conversation itself (not under other
instructions), so the call extends the prefix the replica already holds and prefills only the
request. Its output is capped at ``SUMMARY_TOKENS``, so a small model that loops stops within
seconds, not the 37-50 s a 1024-token cap took. A summary the harness would drop (cut off at
that cap, repeating itself, empty) never fails the request: the ``compaction`` item then holds
the conversation masked as the harness masks its log (``summaries.masked_history``: the tool
outputs the model has read elided, the newest entries within ``HISTORY_TOKENS``). The object's
``loopwire_compaction`` says which: ``{"method": "summary"}`` or ``{"method": "masked",
"reason": why the summary was not used}``. Only a real fault (the gateway down, a refused
request) is an error.

With ``store`` (the default) the object is kept like a stored response, under the tenant, for
as long as responses are: its id then continues as a ``previous_response_id`` (the api resends
its items in full to the gateway, which never saw them). Its ``output`` may also be sent back in
``input`` by a client that keeps its own history (``store: false``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopwire.api import items, tool_calls
from loopwire.api.body import read_json
from loopwire.api.context import (
    ApiContext,
    context,
    error_response,
    feed_until_done,
    first_events,
    request_span,
)
from loopwire.api.create import ParsedCreate, parse_create
from loopwire.api.errors import ApiError, previous_not_found
from loopwire.api.events import ResponseBuilder
from loopwire.api.request_models.bodies import CompactBody
from loopwire.api.store import ResponseStore, tenant_key
from loopwire.common.summaries import SUMMARY_INSTRUCTIONS, SUMMARY_REQUEST, degenerate, masked_history
from loopwire.v1 import common_pb2, gateway_pb2

log = logging.getLogger("loopwire.api")

OBJECT = "response.compaction"
MAX_CHAIN = 1000  # stored responses walked back for the items of a chain
# The summary call's output cap: a useful summary fits, and a small model that loops (about
# 25 tokens/s on CPU) is cut within about 20 s instead of running 37-50 s to 1024 tokens.
SUMMARY_TOKENS = 512
HISTORY_TOKENS = 2048  # cl100k tokens of masked conversation, at most, when no summary is usable


def _parse(body: dict[str, Any], models: list[str]) -> ParsedCreate:
    return parse_create(body, models=models, schema=CompactBody)


async def compact_response(request: Request) -> Response:
    ctx = context(request)
    authorization = request.headers.get("authorization", "")
    with request_span("POST /v1/responses/compact"):
        try:
            owner = tenant_key(ctx.authorize(authorization), authorization)
            parsed = await read_json(request, ctx.max_body_bytes, ctx.decoding, owner,
                                     functools.partial(_parse, models=ctx.models))
            compacted = await _compact(ctx, authorization, owner, parsed)
        except ApiError as e:
            log.info("POST /v1/responses/compact -> %d %s", e.status, e.code)
            return error_response(e)
    output = [*copy.deepcopy(compacted.kept), compacted.item(compacted.summary)]
    resource: dict[str, Any] = {
        "id": f"resp_{secrets.token_hex(16)}", "object": OBJECT, "created_at": int(time.time()), "output": output,
        "usage": compacted.builder.usage, "loopwire_compaction": compacted.method()}
    if parsed.store:
        ctx.store.put(owner, resource, parsed.input_json)
    _log("POST /v1/responses/compact", resource, compacted)
    return JSONResponse(resource)


@dataclass
class Compacted:
    """A conversation compacted: the user messages kept as they were, and the text of the
    ``compaction`` item (the model's summary, or the conversation masked and ``why``)."""

    builder: ResponseBuilder
    previous: str
    kept: list[dict[str, Any]]
    summary: str
    why: str

    def item(self, text: str) -> dict[str, Any]:
        return {"type": "compaction", "id": f"cmp_{secrets.token_hex(12)}",
                "encrypted_content": items.compaction_content(text)}

    def method(self) -> dict[str, str]:
        return {"method": "masked", "reason": self.why} if self.why else {"method": "summary"}


async def _compact(ctx: ApiContext, authorization: str, owner: str, parsed: ParsedCreate) -> Compacted:
    previous = parsed.create.previous_response_id
    history = chain_items(ctx.store, owner, previous) + parsed.input_json
    check_previous(ctx.store, owner, parsed)
    builder = ResponseBuilder(parsed)
    summary_call = gateway_pb2.CreateResponse()
    summary_call.CopyFrom(parsed.create)  # the request's own settings stay what its Response echoes
    summary, why = await _summarize(ctx, authorization, summary_call, builder)
    if why:  # deterministic: the conversation masked, as the harness masks its log
        summary = masked_history(_conversation(history), why, HISTORY_TOKENS)
    users = [i for i in history if i.get("type", "message") == "message" and i.get("role") == "user"]
    return Compacted(builder, previous, users[:1] + users[1:][-1:], summary, why)


def _log(route: str, resource: dict[str, Any], compacted: Compacted) -> None:
    u = resource["usage"] or {}
    log.info("%s id=%s previous=%s in=%s cached=%s out=%s kept=%d method=%s%s", route,
             resource["id"], compacted.previous or "-", u.get("input_tokens"),
             (u.get("input_tokens_details") or {}).get("cached_tokens"), u.get("output_tokens"),
             len(compacted.kept), "masked" if compacted.why else "summary",
             f" ({compacted.why})" if compacted.why else "")


async def compaction_turn(ctx: ApiContext, authorization: str, owner: str,
                          parsed: ParsedCreate) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Compaction v2: a create request whose input ends with a ``compaction_trigger`` item is
    answered with a Response whose output is exactly one ``compaction`` item, standing for the
    whole conversation (the kept user messages are written into it), and the streaming events of
    that Response. Stored, its id continues as a ``previous_response_id`` like a compaction's."""
    compacted = await _compact(ctx, authorization, owner, parsed)
    users = "\n\n".join(f"{label}:\n{_text(item)}" for label, item in zip(
        ("The user's first request", "The user's latest request"), compacted.kept, strict=False))
    text = f"{users}\n\n{compacted.summary}" if users else compacted.summary
    item = compacted.item(text)
    builder = compacted.builder.fresh(f"resp_{secrets.token_hex(16)}")
    started = builder.response()
    builder.output, builder.status, builder.completed_at = [item], "completed", int(time.time())
    resource = {**builder.response(), "loopwire_compaction": compacted.method()}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": started}, {"type": "response.in_progress", "response": started},
              {"type": "response.output_item.added", "output_index": 0, "item": item},
              {"type": "response.output_item.done", "output_index": 0, "item": item},
              {"type": "response.completed", "response": resource}]
    events = [{**e, "sequence_number": n} for n, e in enumerate(events)]
    if parsed.store:
        ctx.store.put(owner, resource, parsed.input_json)
    _log("compaction_trigger", resource, compacted)
    return resource, events


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text") or "" for part in content or [] if isinstance(part, dict))


def compacted_response(response: dict[str, Any]) -> bool:
    """Whether a stored response stands for its whole conversation (a compaction, v1 or v2)."""
    return response.get("object") == OBJECT or "loopwire_compaction" in response


async def _summarize(ctx: ApiContext, authorization: str, create: gateway_pb2.CreateResponse,
                     builder: ResponseBuilder) -> tuple[str, str]:
    """The model's summary of the conversation ``create`` holds, or why there is none it can use
    (a real fault is the ApiError it raises)."""
    create.no_store = True  # the summary call is not a turn of the conversation
    create.sampling.max_output_tokens = SUMMARY_TOKENS
    create.ClearField("text_format")
    if create.tools or create.previous_response_id:
        create.tool_choice.mode = common_pb2.TOOL_CHOICE_MODE_NONE
    create.input.append(items.text_item(common_pb2.ROLE_USER, f"{SUMMARY_INSTRUCTIONS}\n\n{SUMMARY_REQUEST}"))
    ctx.apply_replay(create)
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
    return _summary(builder)


def _summary(builder: ResponseBuilder) -> tuple[str, str]:
    """The summary's text (its reasoning left out), and the harness's reason to drop it ('' when
    it is usable)."""
    text = "".join(part["text"] for item in builder.output if item["type"] == "message"
                   for part in item["content"]).strip()
    finish = common_pb2.FINISH_REASON_LENGTH if builder.status == "incomplete" else common_pb2.FINISH_REASON_STOP
    why = "the summary call returned no text" if not text else degenerate(
        text, (builder.usage or {}).get("output_tokens", 0), SUMMARY_TOKENS, finish)
    return text, why


def _conversation(history: list[dict[str, Any]]) -> list[common_pb2.Item]:
    """The conversation's items as loopwire items; a stored item the api cannot read back as
    input is left out (the masked text is then shorter, never wrong)."""
    with contextlib.suppress(ApiError):
        return items.response_input(history)
    out: list[common_pb2.Item] = []
    for item in history:
        with contextlib.suppress(ApiError):
            out += items.response_input([item])
    return out


def chain_items(store: ResponseStore, owner: str, previous: str) -> list[dict[str, Any]]:
    """The items of the stored responses ``previous`` continues (each one's input, then its
    output; a compaction's output stands for all before it), as far back as they are stored here,
    oldest first."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while previous and previous not in seen and len(seen) < MAX_CHAIN:
        seen.add(previous)
        stored = store.get(owner, previous)
        if stored is None:
            break
        if compacted_response(stored.response):
            out[:0] = stored.response["output"]
            break
        out[:0] = [*stored.input_items, *stored.response.get("output", [])]
        previous = stored.response.get("previous_response_id") or ""
        before = store.get(owner, previous) if previous else None
        if before is not None and compacted_response(before.response):
            break  # its input began with the compaction's items (``expand_compacted``)
    return out


def check_previous(store: ResponseStore, owner: str, parsed: ParsedCreate) -> None:
    """The request's ``previous_response_id`` as this api knows it: a response deleted here cannot
    be continued (the gateway, which has no delete, still has it); a compaction is expanded."""
    previous = parsed.create.previous_response_id
    if previous and store.deleted(owner, previous):
        raise previous_not_found(previous)
    if previous and not parsed.create.tools:
        stored = store.get(owner, previous)
        parsed.tool_kinds = tool_calls.inherited(stored.response if stored else None, parsed.tool_kinds)
    expand_compacted(store, owner, parsed)


def expand_compacted(store: ResponseStore, owner: str, parsed: ParsedCreate) -> None:
    """A request continuing a compaction of the tenant becomes a full request: the compaction's
    items, then its own (the gateway never held the compacted conversation). The Response object
    still names the compaction as its ``previous_response_id``."""
    previous = parsed.create.previous_response_id
    stored = store.get(owner, previous) if previous else None
    if stored is None or not compacted_response(stored.response):
        return
    output = stored.response["output"]
    kept = items.response_input(output)
    parsed.create.ClearField("previous_response_id")
    new = list(parsed.create.input)
    del parsed.create.input[:]
    parsed.create.input.extend([*kept, *new])
    parsed.echo["previous_response_id"] = previous
    parsed.input_json = copy.deepcopy(output) + parsed.input_json
