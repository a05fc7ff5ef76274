"""Turns the model's token stream into text deltas and tool-call events.

Tokens are detokenized (bytes carried until they form UTF-8), the turn ends at one of
the model's stop ids, and tool calls are found in the text in the model's format:
Hermes, ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``. A call is
announced as soon as its name is complete, its arguments stream as they arrive, and it
is done at ``</tool_call>``, so a harness can start a tool while the model keeps going.
Every event records how far the safety-checked text had grown when it was produced
(``safety_offset``), so buffer mode can release exactly what has been checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loopwire.common.model_def import ModelDefinition
from loopwire.gateway.detokenizer import StopStringFilter, Utf8Stream
from loopwire.v1 import common_pb2


@dataclass
class TextOut:
    text: str
    safety_offset: int = 0


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

_TEXT, _CALL, _DONE = range(3)
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that could still grow into ``marker``.

    Only tails that start with the marker's first character are tried (O(len(marker)))."""
    first = marker[0]
    j = text.find(first, max(0, len(text) - len(marker) + 1))
    while j >= 0:
        if marker.startswith(text[j:]):
            return len(text) - j
        j = text.find(first, j + 1)
    return 0


@dataclass
class OutputParser:
    """Feed generated token ids; collect events, the released text and the finished calls."""

    model: ModelDefinition
    stops: Sequence[str] = ()
    call_id_for: Callable[[int], str] = field(default=lambda n: f"call_{n}")
    calls: list[common_pb2.FunctionCall] = field(default_factory=list)
    # Everything the safety classifier must see: text, then each call's name and arguments.
    safety_text: list[str] = field(default_factory=list)
    safety_chars: int = 0
    saw_stop_token: bool = False

    def __post_init__(self) -> None:
        # Work per token is O(new text): pieces are kept in lists and joined once, never re-scanned.
        self._mode = _TEXT
        self._utf8 = Utf8Stream()
        self._stop = StopStringFilter(self.stops)
        self._stop_ids = frozenset(self.model.stop_token_ids)
        self._text: list[str] = []
        self._raw: list[str] = []
        self._pending = ""  # text not yet classified (may be the start of a call marker)
        self._head = ""  # the current call's body while its name is not known yet
        self._name: str | None = None
        self._tail: list[str] = []  # the call's arguments not sent yet
        self._tail_brace = False  # a "}" came into the tail since it was last looked at
        self._sent: list[str] = []  # the call's arguments sent
        self._args_sent = 0
        self._call_id = ""

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
    def done(self) -> bool:
        return self._mode == _DONE or self._stop.stopped

    def feed(self, token_ids: Sequence[int]) -> list[OutputEvent]:
        out: list[OutputEvent] = []
        token_bytes = self.model.tokenizer.token_bytes
        if self._stop_ids.isdisjoint(token_ids):
            data = b"".join([token_bytes(tok) for tok in token_ids])
        else:
            parts = []
            for tok in token_ids:
                if tok in self._stop_ids:
                    self.saw_stop_token = True
                    break
                parts.append(token_bytes(tok))
            data = b"".join(parts)
        if self.done:
            return out
        chunk = self._utf8.feed(data)
        if self.saw_stop_token:
            chunk += self._utf8.flush()
        self._raw.append(chunk)
        self._consume(chunk, out)
        if self.saw_stop_token:
            out += self.finish()
        return out

    def _consume(self, chunk: str, out: list[OutputEvent]) -> None:
        self._pending += chunk
        while self._pending and not self.done:
            if self._mode == _TEXT:
                if "<" not in self._pending:  # the common case: plain text, no marker can start here
                    self._add_text(self._stop.feed(self._pending), out)
                    self._pending = ""
                    return
                at = self._pending.find(CALL_OPEN)
                if at < 0:
                    keep = _partial_suffix(self._pending, CALL_OPEN)
                    self._add_text(self._stop.feed(self._pending[: len(self._pending) - keep]), out)
                    self._pending = self._pending[len(self._pending) - keep :]
                    return
                self._add_text(self._stop.feed(self._pending[:at]), out)
                if self._stop.stopped:
                    return
                self._add_text(self._stop.flush(), out)
                self._pending = self._pending[at + len(CALL_OPEN) :]
                self._mode, self._head, self._name = _CALL, "", None
                self._tail, self._tail_brace, self._sent, self._args_sent = [], False, [], 0
            else:
                at = self._pending.find(CALL_CLOSE)
                if at < 0:
                    keep = _partial_suffix(self._pending, CALL_CLOSE)
                    self._add_body(self._pending[: len(self._pending) - keep])
                    self._pending = self._pending[len(self._pending) - keep :]
                    self._stream_call(out, final=False)
                    return
                self._add_body(self._pending[:at])
                self._pending = self._pending[at + len(CALL_CLOSE) :]
                self._end_call(out)

    def _add_body(self, piece: str) -> None:
        """More of the current call's body: its head until the name is known, then its arguments."""
        if not piece:
            return
        if self._name is None:
            self._head += piece
        else:
            self._tail.append(piece)
            self._tail_brace = self._tail_brace or "}" in piece

    def _stream_call(self, out: list[OutputEvent], final: bool) -> None:
        if self._name is None:
            m = _CALL_HEAD.match(self._head)
            if m is None or m.end() == len(self._head):  # the arguments have not begun yet
                return
            try:
                self._name = json.loads(f'"{m.group(1)}"')
            except ValueError:
                self._name = m.group(1)
            self._call_id = self.call_id_for(len(self.calls))
            out.append(CallStartedOut(len(self.calls), self._call_id, self._name, self._grow(self._name + " ")))
            self._tail = [self._head[m.end() :]]
            self._tail_brace = "}" in self._tail[0]
        # The object's closing brace is not part of the arguments: hold back from the last one.
        # Arguments up to the last brace were sent when it came: without a new one, nothing more can go.
        if not final and not self._tail_brace:
            return
        self._tail_brace = False
        tail = "".join(self._tail)
        brace = len(tail.rstrip()) - 1 if final else tail.rfind("}")
        end = len(tail[: max(brace, 0)].rstrip())
        if end > 0:
            self._add_args(tail[:end], out)
            tail = tail[end:]
        self._tail = [tail]

    def _end_call(self, out: list[OutputEvent]) -> None:
        self._stream_call(out, final=True)
        if self._name is None:  # not a call after all: what the model wrote stays text
            self._add_text(self._stop.feed(CALL_OPEN + self._head + CALL_CLOSE), out)
        else:
            arguments = "".join(self._sent)
            call = common_pb2.FunctionCall(call_id=self._call_id, name=self._name, arguments=arguments)
            self.calls.append(call)
            out.append(CallDoneOut(len(self.calls) - 1, call, self.safety_chars))
        self._mode = _TEXT

    def finish(self) -> list[OutputEvent]:
        """Generation ended (stop token, length, cancel): release what was held back."""
        out: list[OutputEvent] = []
        if self._mode == _DONE:
            return out
        tail = self._utf8.flush()
        self._raw.append(tail)
        self._consume(tail, out)
        if self._mode == _CALL:  # cut off inside a call: keep its text, start nothing
            if self._name is None:
                self._add_text(self._stop.feed(CALL_OPEN + self._head + self._pending), out)
            self._pending = ""
        elif self._pending:
            self._add_text(self._stop.feed(self._pending), out)
            self._pending = ""
        self._add_text(self._stop.flush(), out)
        self._mode = _DONE
        return out

    def _add_text(self, text: str, out: list[OutputEvent]) -> None:
        if text:
            self._text.append(text)
            out.append(TextOut(text, self._grow(text)))

    def _add_args(self, delta: str, out: list[OutputEvent]) -> None:
        if delta:
            self._sent.append(delta)
            self._args_sent += len(delta)
            out.append(CallArgumentsOut(len(self.calls), self._call_id, delta, self._grow(delta)))

    def _grow(self, text: str) -> int:
        self.safety_text.append(text)
        self.safety_chars += len(text)
        return self.safety_chars

    def output_items(self) -> list[common_pb2.Item]:
        """The response as transcript items: the assistant message (if any text or no calls), then calls."""
        items = []
        text = self.text.strip() if self.calls else self.text
        if text or not self.calls:
            items.append(common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=text)])))
        items += [common_pb2.Item(function_call=c) for c in self.calls]
        return items
