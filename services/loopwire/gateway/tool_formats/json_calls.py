"""The formats whose calls are bare JSON objects in sequence: Llama 3 (the whole reply is the
calls) and Mistral (after ``[TOOL_CALLS]``, a JSON list). One reader follows both."""

from __future__ import annotations

import enum
from typing import Any

from loopwire.gateway.tool_formats.base import FormatParser, JsonCall, Sink, complete_call, stream_call


class State(enum.Enum):
    TEXT = enum.auto()  # free text (or, for Llama 3, nothing but whitespace yet)
    OPENED = enum.auto()  # after the opener, before its "["
    SEQUENCE = enum.auto()  # between calls
    CALL = enum.auto()  # inside a call's JSON object


class JsonCallsParser(FormatParser):
    """Calls as JSON objects after an opener; subclasses say how the opener is found."""

    # Between calls: the separator characters skipped, and the list's closer ('' when none).
    separators = " \t\r\n;,"
    list_close = ""

    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        self.state = State.TEXT
        self.lead = ""  # markup read before a call (given back as text if none comes)
        self.seq_calls = 0  # calls read since the opener
        self.call = JsonCall()
        self.named = False

    def open(self, out: list[Any]) -> bool:
        """In TEXT: consumes text up to an opener; True when one came (the state then moved on)."""
        raise NotImplementedError

    def feed(self, chunk: str, out: list[Any]) -> None:
        self.pending += chunk
        sink = self.sink
        while self.pending and not sink.stopped:
            p = self.pending
            if self.state is State.TEXT:
                if not self.open(out):
                    return
            elif self.state in (State.SEQUENCE, State.OPENED):
                between = self.state is State.SEQUENCE and self.seq_calls
                s = p.lstrip(self.separators) if between else p.lstrip()
                self.lead += p[: len(p) - len(s)]
                self.pending = s
                if not s:
                    return
                if self.state is State.OPENED and s[0] == "[":
                    self.lead += "["
                    self.pending = s[1:]
                    self.state = State.SEQUENCE
                elif s[0] == "{":
                    self.call, self.named, self.state = JsonCall(), False, State.CALL
                elif self.list_close and s[0] == self.list_close and self.state is State.SEQUENCE:
                    self.pending = s[1:]
                    self.lead, self.state = "", State.TEXT
                else:  # not (or no more) calls: what follows is text
                    if not self.seq_calls:
                        sink.model_text(self.lead, out)
                    self.lead = ""
                    self.after_calls()
            else:
                used, self.named = stream_call(self.call, self.named, p, sink, out)
                self.pending = p[used:]
                if not self.call.closed:
                    return
                if not complete_call(self.call, self.named, sink, out):  # not a call after all: text
                    sink.model_text(self.lead + self.call.head, out)
                    self.lead = ""
                    self.after_calls()
                    continue
                sink.end_call(out)
                self.lead, self.seq_calls, self.state = "", self.seq_calls + 1, State.SEQUENCE

    def after_calls(self) -> None:
        """What follows is text."""
        self.state = State.TEXT

    def finish(self, out: list[Any], cut: bool) -> None:
        sink = self.sink
        opened = bool(self.lead.strip())  # after an opener ("[TOOL_CALLS]", "<|python_tag|>")
        if self.state is State.CALL:
            if self.named:
                sink.cut_call()
            elif not (cut and opened):
                sink.model_text(self.lead + self.call.head + self.pending, out)
        elif self.state in (State.SEQUENCE, State.OPENED):
            if not self.seq_calls and not (cut and opened):
                sink.model_text(self.lead + self.pending, out)
        elif self.pending:
            sink.model_text(self.pending, out)
        self.pending = ""
