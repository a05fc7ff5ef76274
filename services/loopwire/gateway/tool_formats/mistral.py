"""Mistral (v0.3, Nemo): ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` after any text;
past calls carry a 9-character ``id`` after their arguments."""

from __future__ import annotations

from typing import Any

from loopwire.gateway.tool_formats.base import ToolFormat
from loopwire.gateway.tool_formats.grammar import ANY_TEXT, call_schema, json_rule, opened, text_without
from loopwire.gateway.tool_formats.json_calls import JsonCallsParser, State
from loopwire.v1 import common_pb2

OPEN = "[TOOL_CALLS]"
_ID = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}


class MistralParser(JsonCallsParser):
    opener_char = OPEN[0]
    list_close = "]"

    def idle(self) -> bool:
        return self.state is State.TEXT and not self.pending

    def open(self, out: list[Any]) -> bool:
        if not self.text_until(OPEN, out):
            return False
        self.lead, self.seq_calls, self.state = OPEN, 0, State.OPENED
        return True


class Mistral(ToolFormat):
    name = "mistral"
    parser = MistralParser

    def grammar(self, auto: bool, tools: list[common_pb2.Tool], parallel: bool, text: str | None) -> str:
        body = f"body: {json_rule({'anyOf': [call_schema(t, id_schema=_ID) for t in tools]})}"
        calls = 'body (", " body)* "]"' if parallel else 'body "]"'
        rules = [body, f'calls: "{OPEN}[" {calls}']
        if not auto:
            return "\n".join(["%llguidance {}", "start: calls", *rules]) + "\n"
        rules += [f'first: opened "[" {calls}', opened(OPEN), ANY_TEXT]
        return "\n".join(["%llguidance {}", f"start: {text if text is not None else 'TEXT'} | first", *rules]) + "\n"

    def no_calls_grammar(self) -> str:
        return text_without(OPEN)
