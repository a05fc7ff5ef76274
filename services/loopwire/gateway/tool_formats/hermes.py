"""Hermes: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (SmolLM2, Qwen 2.5,
Hermes; loopwire's own tool prompt asks for it).

The body is read as JSON, strings followed: a ``</tool_call>`` inside an argument's string is
text of that string, not the call's end. The call is announced once its name is complete and its
arguments stream as they arrive; it ends at the closer after the object.
"""

from __future__ import annotations

import enum
from typing import Any

from loopwire.gateway.tool_formats.base import (
    FormatParser,
    JsonCall,
    Sink,
    ToolFormat,
    complete_call,
    partial_suffix,
    stream_call,
)
from loopwire.gateway.tool_formats.grammar import ANY_TEXT, call_schema, json_rule, opened, text_without
from loopwire.v1 import common_pb2

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class State(enum.Enum):
    TEXT = enum.auto()  # free text, watching for the opener
    OPENED = enum.auto()  # after the opener, before the object
    OBJECT = enum.auto()  # inside the call's JSON object
    CLOSING = enum.auto()  # the object closed: the closer should follow
    TRAILING = enum.auto()  # something else followed the object: skipped up to the closer
    NOT_A_CALL = enum.auto()  # the block is no call: it stays text, up to its closer


class HermesParser(FormatParser):
    opener_char = OPEN[0]

    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        self.state = State.TEXT
        self.head = ""  # the block's text while it may still turn out to be no call
        self.call = JsonCall()
        self.named = False

    def idle(self) -> bool:
        return self.state is State.TEXT and not self.pending

    def feed(self, chunk: str, out: list[Any]) -> None:
        self.pending += chunk
        sink = self.sink
        while self.pending and not sink.stopped:
            state = self.state
            if state is State.TEXT:
                if not self.text_until(OPEN, out):
                    return
                self.state, self.head, self.call, self.named = State.OPENED, "", JsonCall(), False
            elif state is State.OPENED:
                s = self.pending.lstrip()
                self.head += self.pending[: len(self.pending) - len(s)]
                self.pending = s
                if not s:
                    return
                self.state = State.OBJECT if s[0] == "{" else State.NOT_A_CALL
            elif state is State.OBJECT:
                used, self.named = stream_call(self.call, self.named, self.pending, sink, out)
                self.pending = self.pending[used:]
                if not self.call.closed:
                    return
                if not complete_call(self.call, self.named, sink, out):  # a JSON object, but no call: text
                    self.head += self.call.head
                    self.state = State.NOT_A_CALL
                    continue
                self.named = True
                self.state = State.CLOSING
            elif state is State.CLOSING:
                s = self.pending = self.pending.lstrip()
                if s.startswith(CLOSE):
                    self.pending = s[len(CLOSE) :]
                    sink.end_call(out)
                    self.state = State.TEXT
                elif s and not CLOSE.startswith(s):
                    self.state = State.TRAILING
                else:
                    return
            else:  # TRAILING, NOT_A_CALL: up to the closer
                p = self.pending
                at = p.find(CLOSE)
                if at < 0:
                    keep = partial_suffix(p, CLOSE)
                    if state is State.NOT_A_CALL:
                        self.head += p[: len(p) - keep]
                    self.pending = p[len(p) - keep :]
                    return
                self.pending = p[at + len(CLOSE) :]
                if state is State.NOT_A_CALL:
                    sink.model_text(OPEN + self.head + p[:at] + CLOSE, out)
                else:
                    sink.end_call(out)
                self.state = State.TEXT

    def finish(self, out: list[Any], cut: bool) -> None:
        state, sink = self.state, self.sink
        if state in (State.CLOSING, State.TRAILING) or state is State.OBJECT and self.named:
            sink.cut_call()  # even with only its closer missing: the call was not finished
        elif cut and state in (State.OPENED, State.OBJECT):
            pass
        elif state is State.OBJECT:
            sink.model_text(OPEN + self.head + self.call.head + self.pending, out)
        elif state in (State.OPENED, State.NOT_A_CALL):
            sink.model_text(OPEN + self.head + self.pending, out)
        elif self.pending:
            sink.model_text(self.pending, out)
        self.pending = ""
        self.state = State.TEXT


class Hermes(ToolFormat):
    name = "hermes"
    parser = HermesParser

    def grammar(self, auto: bool, tools: list[common_pb2.Tool], parallel: bool, text: str | None) -> str:
        more = ' ("\\n" call)*' if parallel else ""
        rules = [f'call: "{OPEN}\\n" body "\\n{CLOSE}"',
                 f"body: {json_rule({'anyOf': [call_schema(t) for t in tools]})}"]
        if auto:
            rules += [f'first: opened "\\n" body "\\n{CLOSE}"', opened(OPEN), ANY_TEXT]
            start = f"start: {text if text is not None else 'TEXT'} | first{more}"
        else:
            start = f"start: call{more}"
        return "\n".join(["%llguidance {}", start, *rules]) + "\n"

    def no_calls_grammar(self) -> str:
        return text_without(OPEN)

