"""What every tool-call format shares: the sink its parser writes to, the parser's base, and the
JSON call object reader the JSON formats (Hermes, Llama 3, Mistral) stream through.

A format's parser sees only the text after the think block, and says what it is through the
sink (``OutputParser``): text (stop strings applied there), a call's start, its arguments as
they stream, its end. Its state is an enum of its own, never a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

from loopwire.v1 import common_pb2


class Sink(Protocol):
    """The output parser, as a format's parser sees it."""

    tools: Sequence[common_pb2.Tool]

    @property
    def stopped(self) -> bool:
        """A stop string ended the text: nothing more is read."""

    def model_text(self, text: str, out: list[Any]) -> None:
        """Model text that is no call (stop strings are looked for in it)."""

    def flush_text(self, out: list[Any]) -> None:
        """A call opens: text held back for a stop string goes out."""

    def start_call(self, name: str, out: list[Any]) -> None:
        """A call's name is known: it is announced."""

    def add_args(self, delta: str, out: list[Any]) -> None:
        """More of the current call's arguments (the text of a JSON object)."""

    def end_call(self, out: list[Any]) -> None:
        """The current call is whole."""

    def cut_call(self) -> None:
        """The output ended inside the announced call: it stays, marked incomplete."""


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest tail of ``text`` that could still grow into ``marker``.

    Only tails that start with the marker's first character are tried (O(len(marker)))."""
    first = marker[0]
    j = text.find(first, max(0, len(text) - len(marker) + 1))
    while j >= 0:
        if marker.startswith(text[j:]):
            return len(text) - j
        j = text.find(first, j + 1)
    return 0


class FormatParser:
    """One response's calls in one format. ``feed`` takes the next text, ``finish`` ends it."""

    # The first character of the format's opener: text without it cannot begin a call.
    opener_char: ClassVar[str] = ""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.pending = ""  # text read and not yet classified

    def idle(self) -> bool:
        """Between calls with nothing held: text without ``opener_char`` is plain text."""
        return False

    def feed(self, chunk: str, out: list[Any]) -> None:
        raise NotImplementedError

    def finish(self, out: list[Any], cut: bool) -> None:
        """The output ended: what was held back becomes text, a call cut after its name is cut.
        ``cut``: by its token limit (or a cancel), not by the model: a call opened and not yet
        named is markup of a call that never came, not text."""
        raise NotImplementedError

    def text_until(self, opener: str, out: list[Any]) -> bool:
        """Release the pending text up to ``opener`` (holding back what may be the start of one);
        True when the opener came, the pending text then being what follows it."""
        p = self.pending
        if opener[0] not in p:  # the common case: plain text, no opener can start here
            self.sink.model_text(p, out)
            self.pending = ""
            return False
        at = p.find(opener)
        if at < 0:
            keep = partial_suffix(p, opener)
            self.sink.model_text(p[: len(p) - keep], out)
            self.pending = p[len(p) - keep :]
            return False
        self.sink.model_text(p[:at], out)
        if self.sink.stopped:
            return False
        self.sink.flush_text(out)
        self.pending = p[at + len(opener) :]
        return True


_STRING_RUN = re.compile(r'[^"\\]+')
_JSON_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*')


def as_object_text(raw: str) -> str:
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


class JsonCall:
    """One JSON call object as it streams in: its name once complete, then its arguments value
    (an object) character by character, closed when the outer object closes. Strings are
    followed, so no text inside one (a brace, a format's own tags) ends anything."""

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
        k, n = 0, len(text)
        while k < n:
            ch = text[k]
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
                else:  # a run of a string's ordinary characters, skipped at once
                    k = _STRING_RUN.match(text, k).end()  # type: ignore[union-attr]
                    continue
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
            k += 1
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
            return value["name"], as_object_text(json.dumps(args))
        if not isinstance(args, dict):
            return None
        return value["name"], json.dumps(args, ensure_ascii=False)


def stream_call(call: JsonCall, named: bool, text: str, sink: Sink, out: list[Any]) -> tuple[int, bool]:
    """Feed ``text`` to the call being read: its name announced once known, its argument text handed
    on as it comes. Returns the characters used and whether the name is announced."""
    used = call.feed(text)
    if call.name is not None and not named:
        sink.start_call(call.name, out)
        named = True
    if call.args:
        sink.add_args("".join(call.args), out)
        call.args = []
    return used, named


def complete_call(call: JsonCall, named: bool, sink: Sink, out: list[Any]) -> bool:
    """The call's object closed: announce it whole when its name was not streamed, or hand on the
    raw value its arguments were written as. False when the object was no call (nothing announced)."""
    if not named:
        whole = call.whole()
        if whole is None:
            return False
        sink.start_call(whole[0], out)
        sink.add_args(whole[1], out)
    elif call.raw_value is not None:
        sink.add_args(as_object_text(call.raw_value), out)
    return True


class ToolFormat:
    """A tool-call format: how calls are told apart from text, parsed and constrained."""

    name: ClassVar[str]
    parser: ClassVar[type[FormatParser]]

    def grammar(self, auto: bool, tools: list[common_pb2.Tool], parallel: bool, text: str | None) -> str:
        """The Lark grammar of a response that calls ``tools``: with ``auto``, free text (``text``: the
        text format's rule, None: any) that turns into calls once the opener comes, the call then
        forced to its end; otherwise calls only (tool_choice required or a named function)."""
        raise NotImplementedError

    def no_calls_grammar(self) -> str:
        """A whole grammar of text that never opens a call (tool_choice none)."""
        raise NotImplementedError
