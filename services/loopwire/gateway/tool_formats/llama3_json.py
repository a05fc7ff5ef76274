"""Llama 3 JSON: the whole reply is the call, ``{"name": ..., "parameters": {...}}``, after an
optional ``<|python_tag|>``, several joined by ``;``. Whether it is a call is decided by the
reply's first character."""

from __future__ import annotations

from typing import Any

from loopwire.gateway.tool_formats.base import Sink, ToolFormat
from loopwire.gateway.tool_formats.grammar import call_schema, json_rule
from loopwire.gateway.tool_formats.json_calls import JsonCallsParser, State
from loopwire.v1 import common_pb2

PYTHON_TAG = "<|python_tag|>"
# Free text: anything that does not begin (after whitespace) with a call's "{" or "<|".
_FREE = "/\\s*(([^{\\s<]|<[^|])(.|\\n)*|<)?/"


class Llama3JsonParser(JsonCallsParser):
    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        self.at_start = True  # nothing but whitespace so far: a call may still begin

    def open(self, out: list[Any]) -> bool:
        p = self.pending
        if not self.at_start:
            self.sink.model_text(p, out)
            self.pending = ""
            return False
        s = p.lstrip()
        if not s or PYTHON_TAG.startswith(s):
            return False  # whitespace or the start of the tag: a call may still begin
        if s.startswith(PYTHON_TAG):
            cut = len(p) - len(s) + len(PYTHON_TAG)
        elif s[0] == "{":
            cut = len(p) - len(s)
        else:
            self.at_start = False
            return True
        self.lead, self.pending, self.seq_calls = p[:cut], p[cut:], 0
        self.state = State.SEQUENCE
        return True

    def after_calls(self) -> None:
        self.state, self.at_start = State.TEXT, False


class Llama3Json(ToolFormat):
    name = "llama3_json"
    parser = Llama3JsonParser

    def grammar(self, auto: bool, tools: list[common_pb2.Tool], parallel: bool, text: str | None) -> str:
        body = f"body: {json_rule({'anyOf': [call_schema(t, 'parameters') for t in tools]})}"
        calls = 'calls: "<|python_tag|>"? body ("; " body)*' if parallel else 'calls: "<|python_tag|>"? body'
        if not auto:
            return "\n".join(["%llguidance {}", "start: calls", body, calls]) + "\n"
        start = f"start: {text if text is not None else 'FREE'} | calls"  # the first character decides
        return "\n".join(["%llguidance {}", start, body, calls, f"FREE: {_FREE}"]) + "\n"

    def no_calls_grammar(self) -> str:
        return f"start: FREE\nFREE: {_FREE}\n"
