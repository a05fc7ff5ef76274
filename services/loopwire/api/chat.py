"""``POST /v1/chat/completions``: stateless (``no_store``), the whole conversation every time.

The gateway still tokenizes it with the model's own template, and the inference replica's
prefix cache (salted per tenant) still skips the prefill of what an earlier request shared.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from loopwire.api import items, logprobs
from loopwire.api.body import read_json
from loopwire.api.context import (
    SSE_KEEPALIVE,
    context,
    error_response,
    feed_until_done,
    first_events,
    request_span,
    with_keepalive,
)
from loopwire.api.create import (
    THINK_BUDGETS,
    output_format,
    replay_output,
    request_param,
    sampling,
    tool_choice,
)
from loopwire.api.errors import ApiError, bad_request, from_stream_error, unsupported
from loopwire.api.request_models.bodies import ChatBody
from loopwire.api.request_models.validation import validate
from loopwire.api.store import tenant_key
from loopwire.v1 import common_pb2, gateway_pb2

log = logging.getLogger("loopwire.api")

# The gateway's names of the fields parse_chat fills, as this request's.
GATEWAY_PARAMS = {"tool_choice": "tool_choice", "text_format.json_schema": "response_format.json_schema.schema",
                  "text_format": "response_format"}
FINISH = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length",
    common_pb2.FINISH_REASON_TOOL_CALLS: "tool_calls",
    common_pb2.FINISH_REASON_SAFETY: "content_filter",
}


def parse_chat(body: dict[str, Any], models: list[str],
               context_length: int = 0) -> tuple[gateway_pb2.CreateResponse, bool, bool]:
    """The request as a full, unstored CreateResponse; (create, stream, include_usage).
    ``context_length``: the served model's window (0: unknown), which the output limit must fit."""
    req = validate(ChatBody, body)
    if models and req.model not in models:
        raise ApiError(404, f"The model '{req.model}' does not exist.", param="model", code="model_not_found")
    create = gateway_pb2.CreateResponse(model=req.model, no_store=True)
    create.input.extend(items.chat_messages(req.messages))
    create.tools.extend(items.function_tool(tool.function) for tool in req.tools or [])
    choice, _ = tool_choice(req.tool_choice, [t.name for t in create.tools])
    if choice is not None:
        create.tool_choice.CopyFrom(choice)
    if req.parallel_tool_calls is not None:
        create.parallel_tool_calls = req.parallel_tool_calls
    if req.response_format is not None:
        text_format = output_format(req.response_format)
        if text_format is not None:
            create.text_format.CopyFrom(text_format)
    if req.n not in (None, 1):
        raise unsupported("n", "more than one choice")
    limit_param = "max_completion_tokens" if req.max_completion_tokens is not None else "max_tokens"
    sampling(create.sampling, req.temperature, req.top_p, getattr(req, limit_param), limit_param, context_length)
    if req.seed is not None:
        create.sampling.seed = req.seed % 2**64
    if req.stop is not None:
        create.sampling.stop.extend([req.stop] if isinstance(req.stop, str) else req.stop)
    if req.top_logprobs is not None and not req.logprobs:  # 0-20, only with logprobs: true
        raise bad_request("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs", "invalid_value")
    if req.logprobs:
        create.sampling.top_logprobs = req.top_logprobs or 0
    if req.reasoning_effort is not None:
        create.sampling.enable_thinking = req.reasoning_effort != "none"
        if req.reasoning_effort in THINK_BUDGETS:
            create.sampling.reasoning_budget_tokens = THINK_BUDGETS[req.reasoning_effort]
    if req.loopwire_replay is not None:
        create.replay.CopyFrom(replay_output(req.loopwire_replay))
    include_usage = req.stream_options is not None and req.stream_options.include_usage is True
    return create, req.stream is True, include_usage


class ChatBuilder:
    """Converse events -> chat.completion.chunk deltas and the final chat.completion."""

    def __init__(self, model: str, logprobs: bool = False) -> None:
        self.model = model
        self.logprobs: list[dict[str, Any]] | None = [] if logprobs else None  # the content tokens' entries
        self.id = ""
        self.created = int(time.time())
        self.text = ""
        self.calls: list[dict[str, Any]] = []
        self._call_index: dict[str, int] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.replica = ""
        self.stats: dict[str, Any] = {}  # what the gateway did (the Responses API's `loopwire` object)
        self.done = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None,
               lps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        chosen = None if lps is None else {"content": lps, "refusal": None}
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": chosen}]}

    def feed(self, event: gateway_pb2.ConverseResponse) -> list[dict[str, Any]]:
        kind = event.WhichOneof("event")
        if kind == "created":
            self.id = "chatcmpl-" + event.created.response_id.removeprefix("resp_")
            self.replica = event.created.replica_id
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "failed":
            error = request_param(from_stream_error(event.failed.error), GATEWAY_PARAMS)
            if not self.id or error.code != "content_filter":
                raise error
            self.done, self.finish = True, "content_filter"
            return [self._chunk({}, "content_filter")]
        if kind == "text_delta":
            self.text += event.text_delta.text
            lps = None
            if self.logprobs is not None:
                lps = logprobs.entries(event.text_delta.logprobs)
                self.logprobs += lps
            return [self._chunk({"content": event.text_delta.text}, lps=lps)]
        # A call goes out whole, at its end: clients (the AI SDK) call every call they were shown
        # when the stream ends, so one the token limit cut must never have been shown.
        if kind == "tool_call_started":
            s = event.tool_call_started
            self._call_index[s.call_id] = len(self.calls)
            self.calls.append({"id": s.call_id, "type": "function", "function": {"name": s.name, "arguments": ""}})
            return []
        if kind == "tool_call_done":
            call = event.tool_call_done.call
            at = self._call_index.get(call.call_id)
            if at is None:
                return []
            self.calls[at]["function"]["arguments"] = call.arguments
            return [self._chunk({"tool_calls": [{"index": at, "id": call.call_id, "type": "function",
                                                 "function": {"name": call.name, "arguments": call.arguments}}]})]
        if kind == "completed":
            c = event.completed
            self.done = True
            self.usage = items.chat_usage(c.usage)
            self.stats = items.loopwire_stats(c.timings, self.replica)
            # The gateway's items are authoritative (stop strings cut the streamed text).
            self.text = "".join(p.text for i in c.output if i.WhichOneof("item") == "message"
                                for p in i.message.content)
            self.calls = [{"id": i.function_call.call_id, "type": "function",
                           "function": {"name": i.function_call.name, "arguments": i.function_call.arguments}}
                          for i in c.output if i.WhichOneof("item") == "function_call"]
            self.finish = FINISH.get(c.finish_reason, "stop")
            return [self._chunk({}, self.finish)]
        return []

    def completion(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None, "refusal": None}
        if self.calls:
            message["tool_calls"] = self.calls
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": self.finish,
                             "logprobs": None if self.logprobs is None else {"content": self.logprobs,
                                                                              "refusal": None}}],
                "usage": self.usage, "loopwire": self.stats}


async def chat_completions(request: Request) -> Response:
    ctx = context(request)
    authorization = request.headers.get("authorization", "")
    with request_span("POST /v1/chat/completions"):
        try:
            tenant = ctx.authorize(authorization)
            owner = tenant_key(tenant, authorization)
            create, stream_out, include_usage = await read_json(
                request, ctx.max_body_bytes, ctx.decoding, owner, functools.partial(parse_chat, models=ctx.models, context_length=await ctx.gateway.context_length(authorization)))
            ctx.apply_replay(create)
        except ApiError as e:
            return error_response(e)
        builder = ChatBuilder(create.model, create.sampling.HasField("top_logprobs"))
        stream = ctx.gateway.open(authorization)
        try:
            events, first = await first_events(stream, create, builder.feed)
        except ApiError as e:
            await stream.close()
            return error_response(e)
        if not stream_out:
            try:
                await feed_until_done(stream, events, builder)
            except ApiError as e:
                return error_response(e)
            log.info("POST /v1/chat/completions tenant=%s id=%s finish=%s usage=%s",
                     tenant.name if tenant else "?", builder.id, builder.finish, builder.usage)
            return JSONResponse(builder.completion())

    async def body_chunks() -> AsyncIterator[bytes]:
        try:
            for chunk in first:
                yield _data(chunk)
            async for event in with_keepalive(events, ctx.sse_keepalive_s):
                if event is None:
                    yield SSE_KEEPALIVE
                    continue
                for chunk in builder.feed(event):
                    yield _data(chunk)
                if builder.done:
                    break
            if include_usage:
                yield _data({**builder._chunk({}), "choices": [], "usage": builder.usage, "loopwire": builder.stats})
            yield b"data: [DONE]\n\n"
        except ApiError as e:
            yield _data(e.body())
        finally:
            if not builder.done:
                await stream.cancel("resp_" + builder.id.removeprefix("chatcmpl-"))
            await stream.close()
            if not stream.abandoned:  # an abandoned one is logged as cancelled already
                log.info("POST /v1/chat/completions tenant=%s id=%s stream=True finish=%s",
                         tenant.name if tenant else "?", builder.id, builder.finish)

    return StreamingResponse(body_chunks(), media_type="text/event-stream", headers={"cache-control": "no-cache"})


def _data(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()
