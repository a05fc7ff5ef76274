"""Turns the model's token stream into text deltas and tool-call events.

The chat format writes a call as ``<|tool_call|>NAME<|tool_args|>JSON<|tool_call_end|>``
and ends the turn with ``<|im_end|>``; the parser follows those special tokens as a
small state machine, so a harness can start a tool the moment its call is complete.
Every event records how far the safety-checked text had grown when it was produced
(``safety_offset``), so buffer mode can release exactly what has been checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from loopwire.common.chat_format import ChatFormat
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

_TEXT, _NAME, _ARGS, _DONE = range(4)


@dataclass
class OutputParser:
    """Feed generated token ids; collect events, the released text and the finished calls."""

    fmt: ChatFormat
    stops: Sequence[str] = ()
    call_id_for: Callable[[int], str] = field(default=lambda n: f"call_{n}")
    text: str = ""
    calls: list[common_pb2.FunctionCall] = field(default_factory=list)
    # Everything the safety classifier must see: text, then each call's name and arguments.
    safety_text: list[str] = field(default_factory=list)
    safety_chars: int = 0
    saw_stop_token: bool = False

    def __post_init__(self) -> None:
        self._mode = _TEXT
        self._utf8 = Utf8Stream()
        self._stop = StopStringFilter(self.stops)
        self._name = ""
        self._args = ""
        self._call_id = ""

    @property
    def stopped_by_string(self) -> bool:
        return self._stop.stopped

    @property
    def done(self) -> bool:
        return self._mode == _DONE or self._stop.stopped

    def feed(self, token_ids: Sequence[int]) -> list[OutputEvent]:
        out: list[OutputEvent] = []
        fmt = self.fmt
        specials = fmt.id_to_special
        n_vocab = fmt.encoding.n_vocab
        plain: list[int] = []  # a run of ordinary tokens, decoded in one call
        for tok in token_ids:
            if self.done:
                break
            if tok not in specials:
                if tok < n_vocab:
                    plain.append(tok)
                continue
            if plain:
                self._plain(plain, out)
                plain = []
                if self.done:
                    break
            if tok == fmt.im_end:
                self._end_segment(out)
                self.saw_stop_token = True
                self._mode = _DONE
            elif tok == fmt.tool_call and self._mode == _TEXT:
                self._end_segment(out)
                self._mode, self._name = _NAME, ""
            elif tok == fmt.tool_args and self._mode == _NAME:
                self._name += self._utf8.flush()
                self._call_id = self.call_id_for(len(self.calls))
                self._mode, self._args = _ARGS, ""
                out.append(CallStartedOut(len(self.calls), self._call_id, self._name, self._grow(self._name + " ")))
            elif tok == fmt.tool_call_end and self._mode == _ARGS:
                self._add_args(self._utf8.flush(), out)
                call = common_pb2.FunctionCall(call_id=self._call_id, name=self._name, arguments=self._args)
                self.calls.append(call)
                out.append(CallDoneOut(len(self.calls) - 1, call, self.safety_chars))
                self._mode = _TEXT
            # any other special token out of place carries no text
        if plain and not self.done:
            self._plain(plain, out)
        return out

    def _plain(self, token_ids: list[int], out: list[OutputEvent]) -> None:
        chunk = self._utf8.feed(self.fmt.encoding.decode_bytes(token_ids))
        if self._mode == _TEXT:
            self._add_text(self._stop.feed(chunk), out)
        elif self._mode == _NAME:
            self._name += chunk
        elif self._mode == _ARGS:
            self._add_args(chunk, out)

    def finish(self) -> list[OutputEvent]:
        """Generation ended (stop token, length, cancel): release what was held back."""
        out: list[OutputEvent] = []
        if self._mode == _TEXT:
            self._end_segment(out)
        self._mode = _DONE
        return out

    def _end_segment(self, out: list[OutputEvent]) -> None:
        if self._mode == _TEXT:
            self._add_text(self._stop.feed(self._utf8.flush()), out)
            self._add_text(self._stop.flush(), out)

    def _add_text(self, text: str, out: list[OutputEvent]) -> None:
        if text:
            self.text += text
            out.append(TextOut(text, self._grow(text)))

    def _add_args(self, delta: str, out: list[OutputEvent]) -> None:
        if delta:
            self._args += delta
            out.append(CallArgumentsOut(len(self.calls), self._call_id, delta, self._grow(delta)))

    def _grow(self, text: str) -> int:
        self.safety_text.append(text)
        self.safety_chars += len(text)
        return self.safety_chars

    def output_items(self) -> list[common_pb2.Item]:
        """The response as transcript items: the assistant message (if any text or no calls), then calls."""
        items = []
        if self.text or not self.calls:
            items.append(common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=self.text)])))
        items += [common_pb2.Item(function_call=c) for c in self.calls]
        return items
