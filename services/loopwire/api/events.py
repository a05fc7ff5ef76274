"""Converse events -> Responses API stream events and the final Response object.

One builder per response; the same events go out as SSE (HTTP ``stream: true``), as WebSocket
messages, or are only folded into the Response object (``stream: false``).

Text that opens with a think block (``<think>...</think>``, which reasoning models write before
their answer, and the gateway passes on as text) streams as a ``reasoning`` item, with
``response.reasoning_text.delta`` / ``.done`` events, and the answer after it as the message.
"""

from __future__ import annotations

import time
from typing import Any

from loopwire.api import items, logprobs, tool_calls
from loopwire.api.create import GATEWAY_PARAMS, ParsedCreate, request_param
from loopwire.api.errors import ApiError, from_stream_error
from loopwire.v1 import common_pb2, gateway_pb2

Code = common_pb2.ErrorCode
_UNDECIDED, _THINKING, _GAP, _ANSWER = range(4)  # where the text is with respect to a think block


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that could still grow into ``marker``."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-k:]):
            return k
    return 0


def _after_bytes(lps: list[dict[str, Any]], tail: int) -> list[dict[str, Any]]:
    """The entries of a delta's last ``tail`` bytes (a token straddling the cut goes with them)."""
    got, n = 0, len(lps)
    while n > 0 and got < tail:
        n -= 1
        got += len(lps[n]["bytes"])
    return lps[n:]


class ResponseBuilder:
    """Folds one response's Converse events into OpenAI events (with sequence numbers)."""

    def __init__(self, parsed: ParsedCreate) -> None:
        self.parsed = parsed
        self.id = ""
        self.replica = ""
        self.created_at = int(time.time())
        self.completed_at: int | None = None
        self.seq = 0
        self.status = "in_progress"
        self.output: list[dict[str, Any]] = []
        self._open_message: int | None = None  # output index of the message being streamed
        self._open_reasoning: int | None = None  # output index of the reasoning item being streamed
        self._think = _UNDECIDED
        self._held = ""  # text that may still be (or end) a think marker
        self._held_logprobs: list[dict[str, Any]] = []  # the logprobs entries of held text
        self._message_logprobs: list[list[dict[str, Any]]] = []  # per message streamed, its tokens' entries
        self._calls: dict[str, int] = {}  # call_id -> output index
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.incomplete: dict[str, Any] | None = None
        self.stats: dict[str, Any] = {}
        self.cache_break: dict[str, Any] | None = None
        self.done = False
        self.api_error: ApiError | None = None

    def fresh(self, response_id: str) -> ResponseBuilder:
        """A builder for another Response to the same request, in progress, empty, its sequence
        numbers from 0, that keeps this one's creation time, usage and stats: compaction v2 answers
        its request with a Response of its own, which used what the summary call used."""
        builder = ResponseBuilder(self.parsed)
        builder.id, builder.replica, builder.created_at = response_id, self.replica, self.created_at
        builder.usage, builder.stats, builder.cache_break = self.usage, self.stats, self.cache_break
        return builder

    # -- the Response object ----------------------------------------------------------------

    def response(self) -> dict[str, Any]:
        """The Response object with every field the Open Responses specification requires."""
        c = self.parsed.create
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": self.completed_at,
            "status": self.status,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "instructions": c.instructions or None,
            "max_output_tokens": c.sampling.max_output_tokens or None,
            "model": c.model,
            "output": self.output,
            "parallel_tool_calls": self.parsed.parallel_tool_calls,
            "previous_response_id": c.previous_response_id or None,
            "reasoning": {"effort": None, "summary": None},
            "store": self.parsed.store,
            "temperature": c.sampling.temperature,
            "text": self.parsed.text,
            "tool_choice": self.parsed.tool_choice,
            "tools": self.parsed.tools_json,
            "top_p": c.sampling.top_p or 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "top_logprobs": 0,
            "max_tool_calls": None,
            "background": self.parsed.background,
            "service_tier": "default",
            "safety_identifier": None,
            "prompt_cache_key": None,
            **self.parsed.echo,
            "truncation": "disabled",
            "usage": self.usage,
            "metadata": self.parsed.metadata,
            "loopwire": {**self.stats, **({"cache_break": self.cache_break} if self.cache_break else {}),
                         **({"tools_not_offered": self.parsed.not_offered} if self.parsed.not_offered else {})},
        }

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    # -- events -----------------------------------------------------------------------------

    def feed(self, event: gateway_pb2.ConverseResponse) -> list[dict[str, Any]]:
        """The OpenAI events for one Converse event (raises ApiError for a failure before ``created``)."""
        kind = event.WhichOneof("event")
        if kind == "created":
            self.id, self.replica = event.created.response_id, event.created.replica_id
            return [self._event("response.created", response=self.response()),
                    self._event("response.in_progress", response=self.response())]
        if kind == "cache_break":
            b = event.cache_break
            self.cache_break = {"first_differing_item": b.first_differing_item, "reason": b.reason,
                                "reused_tokens": b.reused_tokens}
            return []
        if kind == "failed":
            if not self.id:
                raise request_param(from_stream_error(event.failed.error, self.parsed.create.previous_response_id),
                                    GATEWAY_PARAMS)
            return self._failed(event.failed.error)
        if kind == "text_delta":
            return self._text(event.text_delta.text, logprobs.entries(event.text_delta.logprobs))
        if kind == "tool_call_started":
            s = event.tool_call_started
            out = self._close_message()
            call = common_pb2.FunctionCall(call_id=s.call_id, name=s.name)
            self._calls[s.call_id] = len(self.output)
            item = tool_calls.call_item(call, self.parsed.tool_kinds, status="in_progress")
            self.output.append(item)
            out.append(self._event("response.output_item.added", output_index=self._calls[s.call_id], item=dict(item)))
            return out
        if kind == "tool_call_arguments_delta":
            d = event.tool_call_arguments_delta
            index = self._calls.get(d.call_id)
            if index is None or self.output[index]["type"] == "custom_tool_call":
                return []  # a custom tool's input streams whole, once decoded, at its done
            self.output[index]["arguments"] += d.delta
            return [self._event("response.function_call_arguments.delta", item_id=self.output[index]["id"],
                                output_index=index, delta=d.delta)]
        if kind == "tool_call_done":
            call = event.tool_call_done.call
            index = self._calls.get(call.call_id)
            if index is None:
                return []
            item = self.output[index] = tool_calls.call_item(call, self.parsed.tool_kinds)
            if item["type"] == "custom_tool_call":
                return [self._event("response.custom_tool_call_input.delta", item_id=item["id"], output_index=index,
                                    delta=item["input"]),
                        self._event("response.custom_tool_call_input.done", item_id=item["id"], output_index=index,
                                    input=item["input"]),
                        self._event("response.output_item.done", output_index=index, item=item)]
            return [self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                name=item["name"], arguments=call.arguments),
                    self._event("response.output_item.done", output_index=index, item=item)]
        if kind == "completed":
            return self._completed(event.completed)
        return []  # safety verdicts that passed: nothing to tell an OpenAI client

    def _text(self, text: str, lps: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """A text delta: reasoning while inside the opening think block, the message's text after.
        ``lps``: its tokens' logprobs entries; those of reasoning text are not reported (OpenAI
        reports none for reasoning)."""
        if self._think == _ANSWER:
            return self._message_text(text, lps)
        out: list[dict[str, Any]] = []
        text, self._held = self._held + text, ""
        lps, self._held_logprobs = [*self._held_logprobs, *(lps or ())], []
        if self._think == _UNDECIDED:
            body = text.lstrip()
            if body.startswith(items.THINK_OPEN):
                self._think, text = _THINKING, body[len(items.THINK_OPEN):]
                out += self._open_reasoning_item()
            elif items.THINK_OPEN.startswith(body):
                self._held, self._held_logprobs = text, lps
                return out
            else:
                self._think = _ANSWER
                return self._message_text(text, lps)
        if self._think == _THINKING:
            at = text.find(items.THINK_CLOSE)
            if at < 0:
                keep = _partial_suffix(text, items.THINK_CLOSE)
                text, self._held = text[: len(text) - keep], text[len(text) - keep:]
                return out + self._reasoning_delta(text)
            out += self._reasoning_delta(text[:at])
            out += self._close_reasoning()
            self._think, text = _GAP, text[at + len(items.THINK_CLOSE):]
            lps = _after_bytes(lps, len(text.encode()))  # the reasoning's tokens are not the answer's
        text = text.lstrip()  # the whitespace between the closer and the answer
        if text:
            self._think = _ANSWER
            out += self._message_text(text, lps)
        return out

    def _open_reasoning_item(self) -> list[dict[str, Any]]:
        index = self._open_reasoning = len(self.output)
        item = items.output_reasoning(items.reasoning_id(self.id, index), "", status="in_progress")
        self.output.append(item)
        return [self._event("response.output_item.added", output_index=index, item={**item, "content": []}),
                self._event("response.content_part.added", item_id=item["id"], output_index=index,
                            content_index=0, part=items.reasoning_text(""))]

    def _reasoning_delta(self, text: str) -> list[dict[str, Any]]:
        if not text or self._open_reasoning is None:
            return []
        index = self._open_reasoning
        item = self.output[index]
        item["content"][0]["text"] += text
        return [self._event("response.reasoning_text.delta", item_id=item["id"], output_index=index,
                            content_index=0, delta=text)]

    def _close_reasoning(self) -> list[dict[str, Any]]:
        if self._open_reasoning is None:
            return []
        out = []
        if self._think == _THINKING and self._held:  # a partial closer that never completed
            out += self._reasoning_delta(self._held)
            self._held = ""
        index, self._open_reasoning = self._open_reasoning, None
        item = self.output[index]
        item["status"] = "completed"
        part = item["content"][0]
        return [*out,
                self._event("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0,
                            text=part["text"]),
                self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                            part=part),
                self._event("response.output_item.done", output_index=index, item=item)]

    def _message_text(self, text: str, lps: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        lps = lps or []
        if self._open_message is None:
            self._message_logprobs.append([])
            index = self._open_message = len(self.output)
            item = items.output_message(items.message_id(self.id, index), "", status="in_progress")
            self.output.append(item)
            added = {**item, "content": []}
            out.append(self._event("response.output_item.added", output_index=index, item=added))
            out.append(self._event("response.content_part.added", item_id=item["id"], output_index=index,
                                   content_index=0, part=items.output_text("")))
        index = self._open_message
        item = self.output[index]
        item["content"][0]["text"] += text
        item["content"][0]["logprobs"] += lps
        self._message_logprobs[-1] += lps
        out.append(self._event("response.output_text.delta", item_id=item["id"], output_index=index,
                               content_index=0, delta=text, logprobs=lps))
        return out

    def _close_message(self) -> list[dict[str, Any]]:
        """Closes what is streaming (the reasoning item, the message): a call or the end comes."""
        out = self._close_reasoning()
        if self._think == _UNDECIDED and self._held:  # the start of a marker that never came
            out += self._message_text(self._held, self._held_logprobs)
        self._held, self._held_logprobs = "", []
        if self._think != _ANSWER:
            self._think = _ANSWER  # a think block opens only the output
        if self._open_message is None:
            return out
        index, self._open_message = self._open_message, None
        item = self.output[index]
        item["status"] = "completed"
        part = item["content"][0]
        return [
            *out,
            self._event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                        text=part["text"], logprobs=part["logprobs"]),
            self._event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0,
                        part=part),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _completed(self, done: gateway_pb2.ResponseCompleted) -> list[dict[str, Any]]:
        out = self._close_message()
        self.done = True
        # The gateway's output is authoritative (a stop string cuts what was streamed).
        self.output = items.output_items(self.id, list(done.output), self.parsed.tool_kinds)
        messages = (item for item in self.output if item["type"] == "message")
        for item, lps in zip(messages, self._message_logprobs, strict=False):  # the streamed tokens' entries
            item["content"][0]["logprobs"] = lps
        self.usage = items.usage(done.usage)
        self.stats = items.loopwire_stats(done.timings, self.replica)
        self.completed_at = int(time.time())
        if done.finish_reason == common_pb2.FINISH_REASON_LENGTH:
            self.status = "incomplete"
            self.incomplete = {"reason": "max_output_tokens"}
            if done.message_incomplete:  # the cut came while the message was written
                closed = [e["item"] for e in out if e["type"] == "response.output_item.done"]
                for item in [*self.output, *closed]:
                    if item["type"] == "message":
                        item["status"] = "incomplete"
            if done.HasField("incomplete_call"):  # announced, cut before its end: it stays, incomplete
                item = tool_calls.call_item(done.incomplete_call, self.parsed.tool_kinds, status="incomplete")
                self.output.append(item)
                out.append(self._event("response.output_item.done", output_index=len(self.output) - 1, item=item))
            return [*out, self._event("response.incomplete", response=self.response())]
        self.status = "completed"
        return [*out, self._event("response.completed", response=self.response())]

    def _failed(self, error: common_pb2.Error) -> list[dict[str, Any]]:
        out = self._close_message()
        self.done = True
        for item in self.output:
            item["status"] = "incomplete"
        if error.code == Code.ERROR_CODE_SAFETY_VIOLATION:
            self.status = "incomplete"
            self.incomplete = {"reason": "content_filter"}
            return [*out, self._event("response.incomplete", response=self.response())]
        api = self.api_error = request_param(from_stream_error(error), GATEWAY_PARAMS)
        if error.code == Code.ERROR_CODE_CANCELLED and error.field == "cancel_response":
            # POST /v1/responses/{id}/cancel (or a client's own cancel): an end, not a failure.
            self.status = "cancelled"
            return [*out, self._event("response.failed", response=self.response())]
        self.status = "failed"
        self.error = {"code": api.code or "server_error", "message": api.message}
        return [*out, self._event("response.failed", response=self.response())]

    def lost(self, e: ApiError) -> list[dict[str, Any]]:
        """The gateway went away mid-response: failed, with ``e`` as its error (a background response,
        whose poller must see it end)."""
        out = self._close_message()
        self.done = True
        for item in self.output:
            item["status"] = "incomplete"
        self.api_error = e
        self.status = "failed"
        self.error = {"code": e.code or "server_error", "message": e.message}
        return [*out, self._event("response.failed", response=self.response())]

    def failure(self) -> ApiError | None:
        """A non-streamed response that failed after it was created, as its HTTP error."""
        return self.api_error if self.status == "failed" else None
