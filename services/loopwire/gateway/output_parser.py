"""Turns the model's token stream into text deltas and tool-call events.

Tokens are detokenized (bytes carried until they form UTF-8), the turn ends at one of
the model's stop ids or stop strings, and tool calls are found in the text by the model's
tool-call format (``tool_formats``, looked up by ``model.tool_call_format``: Hermes, Llama 3
JSON, Mistral, Qwen3-Coder XML). A call is announced as soon as its name is complete, its
arguments stream as they arrive (always the text of a JSON object), and it is done at its end
in the format, so a harness can start a tool while the model keeps going. An output cut (by
its token limit) inside an announced call keeps that call, marked incomplete.
A model whose template thinks (``<think>...</think>``, Qwen3-style) opens its output with its
reasoning: that block is released as text as it comes (markers included, so the api can tell it
from the answer) but is never searched for calls; ``reasoning`` is its inner text.
Every event records how far the safety-checked text had grown when it was produced
(``safety_offset``), so buffer mode can release exactly what has been checked.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopwire.common.model_def import ModelDefinition
from loopwire.gateway.detokenizer import StopStringFilter, TokenBytes, Utf8Stream
from loopwire.gateway.tool_formats import parser_for
from loopwire.gateway.tool_formats.base import partial_suffix
from loopwire.v1 import common_pb2, gateway_pb2


@dataclass
class TextOut:
    text: str
    safety_offset: int = 0
    # The output tokens this text releases (TextTokenLogprob fields), when logprobs were asked.
    logprobs: list[dict[str, Any]] | None = None


@dataclass
class CallStartedOut:
    index: int
    call_id: str
    name: str
    safety_offset: int = 0


@dataclass
class CallArgumentsOut:
    index: int
    call_id: str
    delta: str
    safety_offset: int = 0


@dataclass
class CallDoneOut:
    index: int
    call: common_pb2.FunctionCall
    safety_offset: int = 0


OutputEvent = TextOut | CallStartedOut | CallArgumentsOut | CallDoneOut


class Think(enum.Enum):
    """Where the output is with respect to the think block."""

    UNDECIDED = enum.auto()  # it may still open one
    OPEN = enum.auto()
    PAST = enum.auto()


@dataclass
class OutputParser:
    """Feed generated token ids; collect events, the released text and the finished calls."""

    model: ModelDefinition
    stops: Sequence[str] = ()
    call_id_for: Callable[[int], str] = field(default=lambda n: f"call_{n}")
    # The request's tools: qwen3_coder values are typed by their schemas (strings otherwise).
    tools: Sequence[common_pb2.Tool] = ()
    calls: list[common_pb2.FunctionCall] = field(default_factory=list)
    # Everything the safety classifier must see: text, then each call's name and arguments.
    safety_text: list[str] = field(default_factory=list)
    safety_chars: int = 0
    saw_stop_token: bool = False
    # A call the output was cut inside (announced, never finished): kept, marked incomplete.
    cut: common_pb2.FunctionCall | None = None

    def __post_init__(self) -> None:
        # Work per token is O(new text): pieces are kept in lists and joined once, never re-scanned.
        self._finished = False
        self._utf8 = Utf8Stream()
        self._bytes = TokenBytes(self.model.tokenizer)
        self._stop = StopStringFilter(self.stops)
        self._stop_ids = frozenset(self.model.stop_token_ids)
        self._text: list[str] = []
        self._raw: list[str] = []
        self._name: str | None = None  # the call being read, once announced
        self._call_id = ""
        self._sent: list[str] = []  # its arguments so far
        self._calls = parser_for(self.model.tool_call_format, self)
        # Plain text needs no parsing at all when no stop string is watched and no call can open.
        self._plain = not self._stop.stops and bool(self._calls.opener_char)
        think = self.model.template.think
        self._think_markers = think
        self._think = Think.PAST if think is None else (
            Think.OPEN if self.model.template.opens_think else Think.UNDECIDED)
        self._think_held = ""  # text held while it may still be (or end) the think block
        self._reasoning: list[str] = []
        self.thought = self._think is Think.OPEN  # the output opened a think block
        self._text_open = False  # the output was cut while writing text (not a call)

    @property
    def reasoning(self) -> str:
        """The think block's text, between its markers (empty for a model that did not think)."""
        return "".join(self._reasoning)

    @property
    def text(self) -> str:
        """The released text (calls' markup removed)."""
        return "".join(self._text)

    @property
    def raw_text(self) -> str:
        """The whole generated text before its stop token, markup included: what the model said."""
        return "".join(self._raw)

    @property
    def stopped_by_string(self) -> bool:
        return self._stop.stopped

    @property
    def stopped(self) -> bool:
        return self._stop.stopped

    @property
    def done(self) -> bool:
        return self._finished or self._stop.stopped

    def feed(self, token_ids: Sequence[int]) -> list[OutputEvent]:
        """Events for a batch of ids, parsed as one piece of text: however the stream is cut into
        batches, the text, calls and events are the same but for how deltas are split."""
        out: list[OutputEvent] = []
        if self._stop_ids.isdisjoint(token_ids):
            data = self._bytes.join(token_ids)
        else:
            cut = next(i for i, tok in enumerate(token_ids) if tok in self._stop_ids)
            self.saw_stop_token = True
            data = self._bytes.join(token_ids[:cut])
        if self.done:
            return out
        chunk = self._utf8.feed(data)
        if self.saw_stop_token:
            chunk += self._utf8.flush()
        self._raw.append(chunk)
        if self._think is not Think.PAST:
            chunk = self._think_step(chunk, out, final=self.saw_stop_token)
        if self._plain and self._calls.opener_char not in chunk and self._calls.idle():
            if chunk:  # the common case: plain text, no stop string to watch for, no call can begin
                self._add_text(chunk, out)
        elif chunk:
            self._calls.feed(chunk, out)
        if self.saw_stop_token:
            out += self.finish()
        return out

    def _think_step(self, chunk: str, out: list[OutputEvent], final: bool) -> str:
        """Releases the think block (as text, never parsed for calls); returns the text after it,
        for the answer's parsing. ``final``: no more text comes, nothing is held back."""
        assert self._think_markers is not None
        opener, closer = self._think_markers
        held = self._think_held + chunk
        self._think_held = ""
        if self._think is Think.UNDECIDED:
            body = held.lstrip()
            if body.startswith(opener):
                self._add_text(self._stop.feed(held[: len(held) - len(body) + len(opener)]), out)
                held, self._think = body[len(opener) :], Think.OPEN
                self.thought = True
            elif not final and opener.startswith(body):
                self._think_held = held  # may still become the opener
                return ""
            else:
                self._think = Think.PAST  # the model answers without thinking
                return held
        at = held.find(closer)
        if at < 0:
            keep = 0 if final else partial_suffix(held, closer)
            inner = held[: len(held) - keep]
            self._think_held = held[len(held) - keep :]
            if inner:
                self._reasoning.append(inner)
                self._add_text(self._stop.feed(inner), out)
            return ""
        if at:
            self._reasoning.append(held[:at])
        self._add_text(self._stop.feed(held[: at + len(closer)]), out)
        self._think = Think.PAST
        return held[at + len(closer) :]

    def finish(self) -> list[OutputEvent]:
        """Generation ended (stop token, length, cancel): release what was held back."""
        out: list[OutputEvent] = []
        if self._finished:
            return out
        tail = self._utf8.flush()
        self._raw.append(tail)
        if self._think is not Think.PAST:
            tail = self._think_step(tail, out, final=True)
        if tail:
            self._calls.feed(tail, out)
        if not self._stop.stopped:
            self._text_open = self._calls.idle()
            self._calls.finish(out, cut=not self.saw_stop_token)
        self._add_text(self._stop.flush(), out)
        self._finished = True
        return out

    # ---- the sink the format's parser writes to (tool_formats.Sink) ----

    def model_text(self, text: str, out: list[OutputEvent]) -> None:
        self._add_text(self._stop.feed(text), out)

    def flush_text(self, out: list[OutputEvent]) -> None:
        self._add_text(self._stop.flush(), out)

    def start_call(self, name: str, out: list[OutputEvent]) -> None:
        self._name, self._sent = name, []
        self._call_id = self.call_id_for(len(self.calls))
        out.append(CallStartedOut(len(self.calls), self._call_id, name, self._grow(name + " ")))

    def add_args(self, delta: str, out: list[OutputEvent]) -> None:
        if delta:
            self._sent.append(delta)
            out.append(CallArgumentsOut(len(self.calls), self._call_id, delta, self._grow(delta)))

    def end_call(self, out: list[OutputEvent]) -> None:
        assert self._name is not None
        call = common_pb2.FunctionCall(call_id=self._call_id, name=self._name, arguments="".join(self._sent))
        self.calls.append(call)
        out.append(CallDoneOut(len(self.calls) - 1, call, self.safety_chars))
        self._name = None

    def cut_call(self) -> None:
        assert self._name is not None
        self.cut = common_pb2.FunctionCall(call_id=self._call_id, name=self._name, arguments="".join(self._sent))
        self._name = None

    # ----

    def _add_text(self, text: str, out: list[OutputEvent]) -> None:
        if text:
            self._text.append(text)
            out.append(TextOut(text, self._grow(text)))

    def _grow(self, text: str) -> int:
        self.safety_text.append(text)
        self.safety_chars += len(text)
        return self.safety_chars

    def output_items(self) -> list[common_pb2.Item]:
        """The response as transcript items: the assistant message (if any text or no calls), then
        the finished calls (a cut call is no item: see ``report_cut``)."""
        items = []
        text = self.text.strip() if self.calls else self.text
        if text or not self.calls:
            items.append(common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=text)])))
        items += [common_pb2.Item(function_call=c) for c in self.calls]
        return items

    def finish_reason(self, engine: common_pb2.FinishReason.ValueType) -> common_pb2.FinishReason.ValueType:
        """The response's finish reason, given the replica's: a stop string stops it; a cut inside a
        call, or inside the text before any call, is LENGTH; finished calls make it TOOL_CALLS."""
        if self._stop.stopped:
            return common_pb2.FINISH_REASON_STOP
        if self.cut is not None or (engine == common_pb2.FINISH_REASON_LENGTH and not self.calls):
            return common_pb2.FINISH_REASON_LENGTH
        if self.calls:
            return common_pb2.FINISH_REASON_TOOL_CALLS
        return engine or common_pb2.FINISH_REASON_STOP

    def report_cut(self, completed: gateway_pb2.ResponseCompleted) -> None:
        """Says in the completed event what a cut (finish reason LENGTH) left unfinished: the call
        it was inside, or the message whose text it was writing."""
        if completed.finish_reason != common_pb2.FINISH_REASON_LENGTH:
            return
        if self.cut is not None:
            completed.incomplete_call.CopyFrom(self.cut)
        elif self._text_open and any(i.WhichOneof("item") == "message" for i in completed.output):
            completed.message_incomplete = True
