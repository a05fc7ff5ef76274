"""Turns the model's token stream into text deltas and tool-call events.

Tokens are detokenized (bytes carried until they form UTF-8), the turn ends at one of
the model's stop ids, and tool calls are found in the text in the model's format:
Hermes, ``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>``. A call is
announced as soon as its name is complete, its arguments stream as they arrive, and it
is done at ``</tool_call>``, so a harness can start a tool while the model keeps going.
Other families (``OutputParser`` picks by ``model.tool_call_format``): ``llama3_json``, the
whole reply is ``{"name": ..., "parameters": {...}}`` (after an optional ``<|python_tag|>``,
several joined by ``;``); ``mistral``, ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``;
``qwen3_coder``, ``<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...
</function>\n</tool_call>``, whose values become a JSON object by the tool schema's types.
Arguments are always streamed as the text of a JSON object.
A model whose template thinks (``<think>...</think>``, Qwen3-style) opens its output with its
reasoning: that block is released as text as it comes (markers included, so the api can tell it
from the answer) but is never searched for calls; ``reasoning`` is its inner text.
Every event records how far the safety-checked text had grown when it was produced
(``safety_offset``), so buffer mode can release exactly what has been checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loopwire.common.model_def import ModelDefinition
from loopwire.gateway.detokenizer import StopStringFilter, TokenBytes, Utf8Stream
from loopwire.v1 import common_pb2


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

_TEXT, _CALL, _DONE = range(3)
_THINK_UNDECIDED, _THINK_OPEN, _THINK_PAST = range(3)  # where the output is with respect to the think block
CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_CALL_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"arguments"\s*:\s*')
_JSON_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')
PYTHON_TAG = "<|python_tag|>"
MISTRAL_OPEN = "[TOOL_CALLS]"
_SEQ, _OPENED = 3, 4  # between JSON calls; after ``[TOOL_CALLS]``, before its ``[``


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
    # The request's tools: qwen3_coder values are typed by their schemas (strings otherwise).
    tools: Sequence[common_pb2.Tool] = ()
    calls: list[common_pb2.FunctionCall] = field(default_factory=list)
    # Everything the safety classifier must see: text, then each call's name and arguments.
    safety_text: list[str] = field(default_factory=list)
    safety_chars: int = 0
    saw_stop_token: bool = False

    def __post_init__(self) -> None:
        # Work per token is O(new text): pieces are kept in lists and joined once, never re-scanned.
        self._mode = _TEXT
        self._utf8 = Utf8Stream()
        self._bytes = TokenBytes(self.model.tokenizer)
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
        self._format = self.model.tool_call_format or "hermes"
        self._plain = self._format == "hermes" and not self._stop.stops
        self._lead = ""  # markup read before a JSON call (kept to give back as text if it is none)
        self._at_start = True  # llama3_json: nothing but whitespace so far, a call may still begin
        self._seq_calls = 0  # calls read since the opener (JSON formats)
        self._jc: _JsonCall | None = None
        self._x = "func"  # qwen3_coder: where in the call the text is
        self._x_key = ""
        self._x_kind = "string"
        self._x_started = False  # the value's leading newline has been dealt with
        self._x_params = 0
        think = self.model.template.think
        self._think_markers = think
        self._think = _THINK_PAST if think is None else (
            _THINK_OPEN if self.model.template.opens_think else _THINK_UNDECIDED)
        self._think_held = ""  # text held while it may still be (or end) the think block
        self._reasoning: list[str] = []
        self.thought = self._think == _THINK_OPEN  # the output opened a think block

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
    def done(self) -> bool:
        return self._mode == _DONE or self._stop.stopped

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
        if self._think != _THINK_PAST:
            chunk = self._think_step(chunk, out, final=self.saw_stop_token)
        if self._plain and self._mode == _TEXT and not self._pending and CALL_OPEN[0] not in chunk:
            if chunk:  # the common case: plain text, no stop string to watch for, no call can begin
                self._add_text(chunk, out)
        else:
            self._consume(chunk, out)
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
        if self._think == _THINK_UNDECIDED:
            body = held.lstrip()
            if body.startswith(opener):
                self._add_text(self._stop.feed(held[: len(held) - len(body) + len(opener)]), out)
                held, self._think = body[len(opener) :], _THINK_OPEN
                self.thought = True
            elif not final and opener.startswith(body):
                self._think_held = held  # may still become the opener
                return ""
            else:
                self._think = _THINK_PAST  # the model answers without thinking
                return held
        at = held.find(closer)
        if at < 0:
            keep = 0 if final else _partial_suffix(held, closer)
            inner = held[: len(held) - keep]
            self._think_held = held[len(held) - keep :]
            if inner:
                self._reasoning.append(inner)
                self._add_text(self._stop.feed(inner), out)
            return ""
        if at:
            self._reasoning.append(held[:at])
        self._add_text(self._stop.feed(held[: at + len(closer)]), out)
        self._think = _THINK_PAST
        return held[at + len(closer) :]

    def _consume(self, chunk: str, out: list[OutputEvent]) -> None:
        if self._format != "hermes":
            self._pending += chunk
            if self._format == "qwen3_coder":
                self._consume_xml(out)
            else:
                self._consume_json(out)
            return
        self._pending += chunk
        while self._pending and not self.done:
            if self._mode == _TEXT:
                if not self._text_until(CALL_OPEN, out):
                    return
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
        if self._think != _THINK_PAST:
            tail = self._think_step(tail, out, final=True)
        self._consume(tail, out)
        if self._format != "hermes":
            self._finish_other(out)
        elif self._mode == _CALL:  # cut off inside a call: keep its text, start nothing
            if self._name is None:
                self._add_text(self._stop.feed(CALL_OPEN + self._head + self._pending), out)
            self._pending = ""
        elif self._pending:
            self._add_text(self._stop.feed(self._pending), out)
            self._pending = ""
        self._add_text(self._stop.flush(), out)
        self._mode = _DONE
        return out

    # ---- llama3_json and mistral: calls are JSON objects, in sequence ----

    def _consume_json(self, out: list[OutputEvent]) -> None:
        llama = self._format == "llama3_json"
        while self._pending and not self.done:
            p = self._pending
            if self._mode == _TEXT:
                if llama:
                    if not self._at_start:
                        self._add_text(self._stop.feed(p), out)
                        self._pending = ""
                        return
                    s = p.lstrip()
                    if not s or PYTHON_TAG.startswith(s) or s == PYTHON_TAG:
                        return  # whitespace or the start of the tag: a call may still begin
                    if s.startswith(PYTHON_TAG):
                        cut = len(p) - len(s) + len(PYTHON_TAG)
                    elif s[0] == "{":
                        cut = len(p) - len(s)
                    else:
                        self._at_start = False
                        continue
                    self._lead, self._pending, self._seq_calls = p[:cut], p[cut:], 0
                    self._mode = _SEQ
                    continue
                if not self._text_until(MISTRAL_OPEN, out):
                    return
                self._lead, self._seq_calls = MISTRAL_OPEN, 0
                self._mode = _OPENED
            elif self._mode in (_SEQ, _OPENED):
                s = p.lstrip() if self._mode == _OPENED or not self._seq_calls else p.lstrip(" \t\r\n;,")
                self._lead += p[: len(p) - len(s)]
                self._pending = s
                if not s:
                    return
                if self._mode == _OPENED and s[0] == "[":
                    self._lead += "["
                    self._pending = s[1:]
                    self._mode = _SEQ
                elif s[0] == "{":
                    self._jc = _JsonCall()
                    self._name, self._sent, self._args_sent = None, [], 0
                    self._mode = _CALL
                elif not llama and s[0] == "]" and self._mode == _SEQ:
                    self._pending = s[1:]
                    self._lead, self._mode = "", _TEXT
                else:  # not (or no more) calls: what follows is text
                    if not self._seq_calls:
                        self._add_text(self._stop.feed(self._lead), out)
                    self._lead, self._mode, self._at_start = "", _TEXT, False
            else:
                jc = self._jc
                assert jc is not None
                used = jc.feed(p)
                self._pending = p[used:]
                if jc.name is not None and self._name is None:
                    self._start_call(jc.name, out)
                if jc.args:
                    self._add_args("".join(jc.args), out)
                    jc.args = []
                if not jc.closed:
                    return
                if self._name is None:
                    whole = jc.whole()
                    if whole is None:  # not a call after all: what the model wrote stays text
                        self._add_text(self._stop.feed(self._lead + jc.head), out)
                        self._lead, self._mode, self._at_start = "", _TEXT, False
                        continue
                    self._start_call(whole[0], out)
                    self._add_args(whole[1], out)
                elif jc.raw_value is not None:
                    self._add_args(_as_object_text(jc.raw_value), out)
                self._emit_done(out)
                self._lead, self._seq_calls, self._mode = "", self._seq_calls + 1, _SEQ

    def _start_call(self, name: str, out: list[OutputEvent]) -> None:
        self._name = name
        self._sent, self._args_sent = [], 0
        self._call_id = self.call_id_for(len(self.calls))
        out.append(CallStartedOut(len(self.calls), self._call_id, name, self._grow(name + " ")))

    def _emit_done(self, out: list[OutputEvent]) -> None:
        assert self._name is not None
        call = common_pb2.FunctionCall(call_id=self._call_id, name=self._name, arguments="".join(self._sent))
        self.calls.append(call)
        out.append(CallDoneOut(len(self.calls) - 1, call, self.safety_chars))
        self._name = None

    def _finish_other(self, out: list[OutputEvent]) -> None:
        """End of generation for the non-Hermes formats: what was held back becomes text, except a
        call cut off after its name (it was announced, it never ends: nothing more is said)."""
        if self._mode == _CALL:
            if self._name is None:
                if self._format == "qwen3_coder":
                    self._add_text(self._stop.feed(CALL_OPEN + self._head + self._pending), out)
                else:
                    head = self._jc.head if self._jc is not None else ""
                    self._add_text(self._stop.feed(self._lead + head + self._pending), out)
        elif self._mode in (_SEQ, _OPENED):
            if not self._seq_calls:
                self._add_text(self._stop.feed(self._lead + self._pending), out)
        elif self._pending:
            self._add_text(self._stop.feed(self._pending), out)
        self._pending = ""

    # ---- qwen3_coder: <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function> ----

    def _consume_xml(self, out: list[OutputEvent]) -> None:
        while self._pending and not self.done:
            if self._mode == _TEXT:
                if not self._text_until(CALL_OPEN, out):
                    return
                self._mode, self._head, self._name, self._x = _CALL, "", None, "func"
            elif not self._xml_step(out):
                return

    def _xml_step(self, out: list[OutputEvent]) -> bool:
        """One step inside a call; False when it needs more text."""
        p = self._pending
        state = self._x
        if state in ("func", "params", "end"):
            s = p.lstrip()
            if self._name is None:
                self._head += p[: len(p) - len(s)]
            self._pending = p = s
            if not s:
                return False
        if state == "func":
            if s.startswith("<function="):
                j = s.find(">")
                if j < 0:
                    if "\n" in s or "<" in s[1:]:
                        self._x = "bad"
                        return True
                    return False
                self._start_call(s[len("<function="):j].strip(), out)
                self._pending = s[j + 1 :]
                self._x, self._x_params = "params", 0
                self._add_args("{", out)
                return True
            if "<function=".startswith(s):
                return False
            self._x = "bad"
            return True
        if state == "params":
            if s.startswith("<parameter="):
                j = s.find(">")
                if j < 0:
                    if "\n" in s or "<" in s[1:]:
                        self._x = "bad"
                        return True
                    return False
                self._x_key = s[len("<parameter="):j].strip()
                self._x_kind = self._param_kind(self._x_key)
                self._pending = s[j + 1 :]
                head = (", " if self._x_params else "") + json.dumps(self._x_key, ensure_ascii=False) + ": "
                self._add_args(head + ('"' if self._x_kind == "string" else ""), out)
                self._x, self._x_started, self._x_params = "value", False, self._x_params + 1
                return True
            for marker, then in (("</function>", "end"), (CALL_CLOSE, "close")):
                if s.startswith(marker):
                    self._pending = s[len(marker) :]
                    self._add_args("}", out)
                    if then == "end":
                        self._x = "end"
                    else:
                        self._emit_done(out)
                        self._mode = _TEXT
                    return True
            if any(m.startswith(s) for m in ("<parameter=", "</function>", CALL_CLOSE)):
                return False
            self._x = "bad"
            return True
        if state == "value":
            if not self._x_started:
                if p.startswith("\n"):
                    p = self._pending = p[1:]
                self._x_started = True
                if not p:
                    return False
            at = p.find("</parameter>")
            if at < 0:
                if self._x_kind == "string":
                    safe = len(p) - _partial_suffix(p, "</parameter>")
                    if safe > 0 and p[safe - 1] == "\n":
                        safe -= 1
                    if safe > 0:
                        self._add_args(json.dumps(p[:safe], ensure_ascii=False)[1:-1], out)
                        self._pending = p[safe:]
                return False
            value = p[:at]
            value = value[:-1] if value.endswith("\n") else value
            if self._x_kind == "string":
                self._add_args(json.dumps(value, ensure_ascii=False)[1:-1] + '"', out)
            else:
                self._add_args(json.dumps(_typed(value, self._x_kind), ensure_ascii=False), out)
            self._pending = p[at + len("</parameter>") :]
            self._x = "params"
            return True
        if state == "end":
            if s.startswith(CALL_CLOSE):
                self._pending = s[len(CALL_CLOSE) :]
                self._emit_done(out)
                self._mode = _TEXT
                return True
            if CALL_CLOSE.startswith(s):
                return False
            if s.startswith("<function="):  # another call in the same block
                self._emit_done(out)
                self._x = "func"
                return True
            self._x = "bad"
            return True
        # bad: not this format; the block up to its closer stays text (or ends the call it began)
        at = p.find(CALL_CLOSE)
        if at < 0:
            return False
        self._pending = p[at + len(CALL_CLOSE) :]
        if self._name is None:
            self._add_text(self._stop.feed(CALL_OPEN + self._head + p[:at] + CALL_CLOSE), out)
        else:
            if "".join(self._sent).count("{") > "".join(self._sent).count("}") or self._x_params == 0:
                self._add_args("}", out)
            self._emit_done(out)
        self._mode = _TEXT
        return True

    def _param_kind(self, key: str) -> str:
        """How a qwen3_coder value becomes JSON: ``string`` (as written), ``boolean``, ``json`` (parsed,
        or a string when it does not parse) by the tool schema's type; unknown parameters are strings."""
        tool = next((t for t in self.tools if t.name == self._name), None)
        if tool is None:
            return "string"
        try:
            schema = json.loads(tool.parameters) if tool.parameters else {}
        except ValueError:
            return "string"
        prop = schema.get("properties", {}).get(key) if isinstance(schema, dict) else None
        if not isinstance(prop, dict):
            return "string"
        kind = prop.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind else []
        if "string" in kinds:
            return "string"
        if kinds == ["boolean"]:
            return "boolean"
        return "json"

    def _text_until(self, opener: str, out: list[OutputEvent]) -> bool:
        """Release the pending text up to ``opener`` (holding back what may be the start of one);
        True when the opener came, the pending text then being what follows it."""
        p = self._pending
        if opener[0] not in p:  # the common case: plain text, no opener can start here
            self._add_text(self._stop.feed(p), out)
            self._pending = ""
            return False
        at = p.find(opener)
        if at < 0:
            keep = _partial_suffix(p, opener)
            self._add_text(self._stop.feed(p[: len(p) - keep]), out)
            self._pending = p[len(p) - keep :]
            return False
        self._add_text(self._stop.feed(p[:at]), out)
        if self._stop.stopped:
            return False
        self._add_text(self._stop.flush(), out)
        self._pending = p[at + len(opener) :]
        return True

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


def _typed(value: str, kind: str) -> Any:
    """A qwen3_coder value of a non-string parameter as JSON (Python spellings of true, false and
    None accepted, as the template's ``| string`` writes them); what does not parse stays a string."""
    text = value.strip()
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if kind == "boolean" and text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return json.loads(text)
    except ValueError:
        return value


def _as_object_text(raw: str) -> str:
    """Arguments the model wrote as something else than an object (a JSON string holding one,
    say): the object's text when there is one, else the JSON as written."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except ValueError:
            return raw
        if isinstance(inner, dict):
            return json.dumps(inner, ensure_ascii=False)
    return raw


class _JsonCall:
    """One JSON call object as it streams in: its name once complete, then its arguments value
    (an object) character by character, closed when the outer object closes."""

    def __init__(self) -> None:
        self.head = ""  # the object's text while the name is not known (all of it, then)
        self.name: str | None = None
        self.args: list[str] = []  # arguments read and not yet handed out
        self.raw_value: str | None = None  # arguments that are not an object: given at the end
        self.closed = False
        self._depth = 0
        self._in_str = False
        self._esc = False
        self._value = 0  # 0: not begun, 1: an object being read, 2: read, 3: not an object
        self._raw: list[str] = []

    def feed(self, piece: str) -> int:
        """Characters of ``piece`` that belong to the object (all of them until it closes)."""
        if self.name is None:
            start = len(self.head)
            self.head += piece
            m = _JSON_HEAD.match(self.head)
            if m is None or m.end() == len(self.head):
                end = self._scan(piece, args=False)
                if end >= 0:
                    self.head = self.head[: start + end + 1]
                    self.closed = True
                    return end + 1
                return len(piece)
            try:
                self.name = json.loads(f'"{m.group(1)}"')
            except ValueError:
                self.name = m.group(1)
            self._depth, self._in_str, self._esc = 1, False, False
            rest = self.head[m.end() :]
            end = self._scan(rest, args=True)
            return len(piece) if end < 0 else m.end() - start + end + 1
        end = self._scan(piece, args=True)
        return len(piece) if end < 0 else end + 1

    def _scan(self, text: str, args: bool) -> int:
        """Follows the JSON structure over ``text``; the index where the object closes, else -1."""
        depth, in_str, esc = self._depth, self._in_str, self._esc
        begin = None
        for k, ch in enumerate(text):
            if args and self._value == 0:
                self._value = 1 if ch == "{" else 3
                begin = k
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
                if args and self._value == 1 and depth == 1:
                    self.args.append(text[begin if begin is not None else 0 : k + 1])
                    self._value, begin = 2, None
                if depth == 0:
                    if args and self._value == 3:
                        self._raw.append(text[begin if begin is not None else 0 : k])
                        self.raw_value = "".join(self._raw).strip()
                    self._depth, self._in_str, self._esc = depth, in_str, esc
                    self.closed = True
                    return k
        if args and self._value in (1, 3):
            piece = text[begin if begin is not None else 0 :]
            (self.args if self._value == 1 else self._raw).append(piece)
        self._depth, self._in_str, self._esc = depth, in_str, esc
        return -1

    def whole(self) -> tuple[str, str] | None:
        """A closed object read whole (its name was not first): (name, arguments) if it is a call."""
        try:
            value = json.loads(self.head)
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        args = value.get("parameters", value.get("arguments"))
        if isinstance(args, str):
            return value["name"], _as_object_text(json.dumps(args))
        if not isinstance(args, dict):
            return None
        return value["name"], json.dumps(args, ensure_ascii=False)
