"""Qwen3-Coder XML: ``<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n...
</function>\\n</tool_call>``. Values are written as they are (strings) or as their JSON (the
template's ``tojson``, or Python's spelling of a scalar); they become a JSON object by the tool
schema's types. A value ends at ``\\n</parameter>``: the same word without its newline, or
``</function>`` and ``</tool_call>``, are text of the value.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from loopwire.gateway.tool_formats.base import FormatParser, Sink, ToolFormat, partial_suffix
from loopwire.gateway.tool_formats.grammar import (
    ANY_TEXT,
    avoiding,
    json_rule,
    opened,
    parameters,
    strict_schema,
    text_without,
)
from loopwire.v1 import common_pb2

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FUNCTION = "<function="
PARAMETER = "<parameter="
VALUE_CLOSE = "\n</parameter>"
_XML_CLOSE = "\n</parameter>\n"


class State(enum.Enum):
    TEXT = enum.auto()  # free text, watching for the opener
    FUNCTION = enum.auto()  # after the opener: <function=NAME> should come
    PARAMS = enum.auto()  # between parameters
    VALUE = enum.auto()  # inside a parameter's value
    END = enum.auto()  # after </function>: the closer (or another function) should come
    NOT_A_CALL = enum.auto()  # not this format: the block stays text (or ends its call) at the closer


class Kind(enum.Enum):
    """How a value becomes JSON, by the tool schema's type of its parameter."""

    STRING = enum.auto()  # as written
    BOOLEAN = enum.auto()
    JSON = enum.auto()  # parsed, or a string when it does not parse


class Qwen3CoderParser(FormatParser):
    opener_char = OPEN[0]

    def __init__(self, sink: Sink) -> None:
        super().__init__(sink)
        self.state = State.TEXT
        self.head = ""  # the block's text while no function is named
        self.name: str | None = None
        self.kind = Kind.STRING
        self.value_started = False  # the value's leading newline has been dealt with
        self.params = 0
        self.sent: list[str] = []  # the call's arguments so far

    def idle(self) -> bool:
        return self.state is State.TEXT and not self.pending

    def feed(self, chunk: str, out: list[Any]) -> None:
        self.pending += chunk
        while self.pending and not self.sink.stopped:
            if self.state is State.TEXT:
                if not self.text_until(OPEN, out):
                    return
                self.state, self.head, self.name = State.FUNCTION, "", None
            elif not self._step(out):
                return

    def _args(self, delta: str, out: list[Any]) -> None:
        self.sent.append(delta)
        self.sink.add_args(delta, out)

    def _step(self, out: list[Any]) -> bool:
        """One step inside a call; False when it needs more text."""
        p = self.pending
        if self.state in (State.FUNCTION, State.PARAMS, State.END):
            s = p.lstrip()
            if self.name is None:
                self.head += p[: len(p) - len(s)]
            self.pending = s
            if not s:
                return False
        step = {State.FUNCTION: self._function, State.PARAMS: self._parameter, State.VALUE: self._value,
                State.END: self._after_function, State.NOT_A_CALL: self._not_a_call}[self.state]
        return step(self.pending, out)

    def _function(self, p: str, out: list[Any]) -> bool:
        if p.startswith(FUNCTION):
            name = self._tag_value(p, FUNCTION)
            if name is None:
                return self.state is State.NOT_A_CALL
            self.name = name
            self.sink.start_call(self.name, out)
            self.sent = []
            self.state, self.params = State.PARAMS, 0
            self._args("{", out)
            return True
        if FUNCTION.startswith(p):
            return False
        self.state = State.NOT_A_CALL
        return True

    def _parameter(self, p: str, out: list[Any]) -> bool:
        if p.startswith(PARAMETER):
            key = self._tag_value(p, PARAMETER)
            if key is None:
                return self.state is State.NOT_A_CALL
            self.kind = self._kind(key)
            head = (", " if self.params else "") + json.dumps(key, ensure_ascii=False) + ": "
            self._args(head + ('"' if self.kind is Kind.STRING else ""), out)
            self.state, self.value_started, self.params = State.VALUE, False, self.params + 1
            return True
        if p.startswith("</function>"):
            self.pending = p[len("</function>") :]
            self._args("}", out)
            self.state = State.END
            return True
        if p.startswith(CLOSE):
            self.pending = p[len(CLOSE) :]
            self._args("}", out)
            self._end(out)
            return True
        if any(m.startswith(p) for m in (PARAMETER, "</function>", CLOSE)):
            return False
        self.state = State.NOT_A_CALL
        return True

    def _value(self, p: str, out: list[Any]) -> bool:
        if not self.value_started:
            if p.startswith("\n"):
                p = self.pending = p[1:]
            self.value_started = True
            if not p:
                return False
        at = p.find(VALUE_CLOSE)
        if at < 0:
            if self.kind is Kind.STRING:
                safe = len(p) - partial_suffix(p, VALUE_CLOSE)
                if safe > 0:
                    self._args(json.dumps(p[:safe], ensure_ascii=False)[1:-1], out)
                    self.pending = p[safe:]
            return False
        value = p[:at]
        if self.kind is Kind.STRING:
            self._args(json.dumps(value, ensure_ascii=False)[1:-1] + '"', out)
        else:
            self._args(json.dumps(_typed(value, self.kind), ensure_ascii=False), out)
        self.pending = p[at + len(VALUE_CLOSE) :]
        self.state = State.PARAMS
        return True

    def _after_function(self, p: str, out: list[Any]) -> bool:
        if p.startswith(CLOSE):
            self.pending = p[len(CLOSE) :]
            self._end(out)
            return True
        if CLOSE.startswith(p):
            return False
        if p.startswith(FUNCTION):  # another call in the same block
            self.sink.end_call(out)
            self.name = None
            self.state = State.FUNCTION
            return True
        self.state = State.NOT_A_CALL
        return True

    def _not_a_call(self, p: str, out: list[Any]) -> bool:
        """The block up to its closer stays text (or ends the call it began)."""
        at = p.find(CLOSE)
        if at < 0:
            return False
        self.pending = p[at + len(CLOSE) :]
        if self.name is None:
            self.sink.model_text(OPEN + self.head + p[:at] + CLOSE, out)
            self.state = State.TEXT
        else:
            sent = "".join(self.sent)
            if sent.count("{") > sent.count("}") or self.params == 0:
                self._args("}", out)
            self._end(out)
        return True

    def _end(self, out: list[Any]) -> None:
        self.sink.end_call(out)
        self.name = None
        self.state = State.TEXT

    def finish(self, out: list[Any], cut: bool) -> None:
        if self.state is not State.TEXT:
            if self.name is None and cut and self.state is State.FUNCTION:
                pass
            elif self.name is None:
                self.sink.model_text(OPEN + self.head + self.pending, out)
            else:
                self.sink.cut_call()
        elif self.pending:
            self.sink.model_text(self.pending, out)
        self.pending = ""
        self.state = State.TEXT

    def _tag_value(self, p: str, tag: str) -> str | None:
        """The value of the ``<tag=value>`` that ``p`` starts with, the rest left pending; None when
        more text is needed, or when the tag cannot close (the state is then NOT_A_CALL)."""
        j = p.find(">")
        if j < 0:
            if "\n" in p or "<" in p[1:]:
                self.state = State.NOT_A_CALL
            return None
        self.pending = p[j + 1 :]
        return p[len(tag) : j].strip()

    def _kind(self, key: str) -> Kind:
        """How this call's parameter ``key`` is typed; unknown parameters are strings."""
        tool = next((t for t in self.sink.tools if t.name == self.name), None)
        if tool is None:
            return Kind.STRING
        try:
            schema = json.loads(tool.parameters) if tool.parameters else {}
        except ValueError:
            return Kind.STRING
        prop = schema.get("properties", {}).get(key) if isinstance(schema, dict) else None
        if not isinstance(prop, dict):
            return Kind.STRING
        kind = prop.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind else []
        if "string" in kinds:
            return Kind.STRING
        if kinds == ["boolean"]:
            return Kind.BOOLEAN
        return Kind.JSON


def _typed(value: str, kind: Kind) -> Any:
    """A value of a non-string parameter as JSON (Python spellings of true, false and None
    accepted, as the template's ``| string`` writes them); what does not parse stays a string."""
    text = value.strip()
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if kind is Kind.BOOLEAN and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return json.loads(text)
    except ValueError:
        return value


class Qwen3Coder(ToolFormat):
    name = "qwen3_coder"
    parser = Qwen3CoderParser

    def grammar(self, auto: bool, tools: list[common_pb2.Tool], parallel: bool, text: str | None) -> str:
        rules = [*_xml_rules(tools), f'call: "{OPEN}\\n" body "\\n{CLOSE}"',
                 'calls: call ("\\n" call)*' if parallel else "calls: call"]
        if not auto:
            return "\n".join(["%llguidance {}", "start: calls", *rules]) + "\n"
        more = ' ("\\n" call)*' if parallel else ""
        rules += [f'first: opened "\\n" body "\\n{CLOSE}"{more}', opened(OPEN), ANY_TEXT]
        return "\n".join(["%llguidance {}", f"start: {text if text is not None else 'TEXT'} | first", *rules]) + "\n"

    def no_calls_grammar(self) -> str:
        return text_without(OPEN)


def _xml_rules(tools: list[common_pb2.Tool]) -> list[str]:
    """Bodies: ``<function=NAME>\\n`` then each parameter once, required ones first and present, in
    the strict schema's order; strings as written, other values as their JSON."""
    rules, names = [], []
    for i, tool in enumerate(tools):
        schema = strict_schema(parameters(tool))
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        required = set(schema.get("required", [])) if isinstance(schema, dict) else set()
        parts = []
        for j, (key, prop) in enumerate(props.items()):
            rule = f"t{i}p{j}"
            rules.append(f"{rule}: {json.dumps(f'<parameter={key}>' + chr(10))} {rule}v")
            value = _xml_value(prop)
            if value.startswith("/"):  # a string: one lexeme up to the first closer
                rules.append(f"{rule}v: {value}")
            else:
                rules += [f"{rule}v: {rule}j {json.dumps(_XML_CLOSE)}", f"{rule}j: {value}"]
            parts.append(rule if key in required else f"{rule}?")
        head = json.dumps(f"<function={tool.name}>\n")
        rules.append(f"t{i}: {head} {' '.join(parts)} \"</function>\"")
        names.append(f"t{i}")
    return [f"body: {' | '.join(names)}", *rules]


def _xml_value(prop: Any) -> str:
    kinds = prop.get("type") if isinstance(prop, dict) else None
    if kinds == "string" and isinstance(prop, dict):
        if isinstance(prop.get("enum"), list) and all(isinstance(v, str) for v in prop["enum"]):
            return " | ".join(json.dumps(v) for v in prop["enum"])
        avoid = avoiding(_XML_CLOSE.rstrip()) + _XML_CLOSE
        return "/" + avoid.replace(chr(10), "\\n").replace("/", "\\/") + "/"
    if kinds == "boolean":
        return '"true" | "false" | "True" | "False"'
    return json_rule(prop if isinstance(prop, dict) else {})
