"""A custom tool's Lark grammar (``format: {"type": "grammar", "syntax": "lark"}``) as the regular
expression its ``input`` is decoded under.

A custom tool reaches the model as a function of one string (tools.py), and its calls are JSON, so
its input is a JSON string: the constraint must hold for the text *inside* the escapes, which a
JSON Schema ``pattern`` does (llguidance decodes the string against the pattern). A Lark grammar
whose rules do not recurse describes a regular language, and is written here as that pattern: each
rule and terminal inlined where it is used. That covers the grammars clients send (Codex's
``apply_patch``: lines of a few kinds, repeated); a recursive rule is refused with a 400 naming it,
as is any grammar llguidance's own Lark reader refuses (so the message is the one a grammar
author gets from the engine).

Supported: rules and terminals, ``|``, grouping, ``[...]``, ``? * +``, ``~ n`` and ``~ n..m``,
strings (with the ``i`` flag), ``"a".."z"`` ranges, ``/regex/flags``, ``-> alias`` (ignored),
priorities (ignored), and ``%import common.NAME`` for the usual terminals.
"""

from __future__ import annotations

import ast
import re

import llguidance

MAX_PATTERN = 256 * 1024  # characters of the inlined pattern; beyond, a grammar is refused
_META = set("\\.+*?()|[]{}^$#&-~")
# The common.lark terminals a grammar may import, as patterns.
COMMON = {
    "LF": r"\n", "CR": r"\r", "NEWLINE": r"(?:\r?\n)+", "WS": r"[ \t\f\r\n]+", "WS_INLINE": r"[ \t]+",
    "DIGIT": "[0-9]", "HEXDIGIT": "[a-fA-F0-9]", "INT": "[0-9]+", "SIGNED_INT": "[+-]?[0-9]+",
    "DECIMAL": r"(?:[0-9]+\.[0-9]*|\.[0-9]+)", "LETTER": "[a-zA-Z]", "LCASE_LETTER": "[a-z]",
    "UCASE_LETTER": "[A-Z]", "WORD": "[a-zA-Z]+", "CNAME": "[_a-zA-Z][_a-zA-Z0-9]*",
    "ESCAPED_STRING": r'"(?:[^"\\]|\\.)*"',
    "NUMBER": r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?",
    "SIGNED_NUMBER": r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?",
}
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\f\r]+|//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regexp>/(?:[^/\\\n]|\\.)+/[imslux]*)
  | (?P<arrow>->)
  | (?P<range>\.\.)
  | (?P<number>[0-9]+)
  | (?P<name>[?!]?[_a-zA-Z][_a-zA-Z0-9]*(?:\.-?[0-9]+)?)
  | (?P<op>[:|()\[\]?*+~])
""", re.VERBOSE)


class LarkError(ValueError):
    """A grammar this module cannot write as a pattern (the message says why)."""


def to_pattern(grammar: str) -> str:
    """The grammar's ``start`` as an anchored regular expression (LarkError: not one)."""
    problem = llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", grammar))
    if problem:
        raise LarkError(problem.strip())
    definitions = _definitions(grammar)
    if "start" not in definitions:
        raise LarkError("no 'start' rule")
    return f"^(?:{_Inliner(definitions).name('start')})$"


def _definitions(grammar: str) -> dict[str, list[tuple[str, str]]]:
    """Each rule's and terminal's tokens by name; a line that begins with ``|`` continues the
    definition above it."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for number, line in enumerate(grammar.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if stripped.startswith("%"):
            current = None
            _directive(stripped, out)
            continue
        tokens = _tokens(stripped, number)
        if tokens[0] == ("op", "|"):
            if current is None:
                raise LarkError(f"line {number}: '|' continues no definition")
            current += tokens
            continue
        if len(tokens) < 2 or tokens[0][0] != "name" or tokens[1] != ("op", ":"):
            raise LarkError(f"line {number}: expected 'name: ...'")
        name = tokens[0][1].lstrip("?!").split(".")[0]
        current = out[name] = tokens[2:]
    return out


def _directive(line: str, out: dict[str, list[tuple[str, str]]]) -> None:
    match = re.fullmatch(r"%import\s+common\.([A-Z_]+)(?:\s*->\s*([A-Za-z_][A-Za-z0-9_]*))?", line)
    if match is None:
        raise LarkError(f"{line.split()[0]!r}: only '%import common.NAME' is supported (the input is decoded as "
                        "written, nothing ignored)")
    if match[1] not in COMMON:
        raise LarkError(f"common.{match[1]} is not among the importable terminals ({', '.join(sorted(COMMON))})")
    out[match[2] or match[1]] = [("pattern", COMMON[match[1]])]


def _tokens(line: str, number: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    at = 0
    while at < len(line):
        match = _TOKEN.match(line, at)
        if match is None:
            raise LarkError(f"line {number}: unexpected {line[at:at + 10]!r}")
        at = match.end()
        kind = match.lastgroup or ""
        if kind != "ws":
            out.append((kind, match[kind]))
    return out


class _Inliner:
    """Writes definitions as patterns, each name inlined where it is used; a name met again
    while it is being written is a recursion, which no pattern can hold."""

    def __init__(self, definitions: dict[str, list[tuple[str, str]]]) -> None:
        self.definitions = definitions
        self.done: dict[str, str] = {}
        self.open: list[str] = []
        self.tokens: list[tuple[str, str]] = []
        self.at = 0

    def name(self, name: str) -> str:
        if name in self.done:
            return self.done[name]
        if name in self.open:
            raise LarkError(f"rule {name!r} is recursive ({' -> '.join([*self.open[self.open.index(name):], name])}): "
                            "a custom tool's grammar is decoded as a regular language here")
        if name not in self.definitions:
            raise LarkError(f"unknown name {name!r}")
        self.open.append(name)
        saved = self.tokens, self.at
        self.tokens, self.at = self.definitions[name], 0
        pattern = self._alternatives()
        if self.at != len(self.tokens):
            raise LarkError(f"{name}: unexpected {self.tokens[self.at][1]!r}")
        self.tokens, self.at = saved
        self.open.pop()
        if len(pattern) > MAX_PATTERN:
            raise LarkError(f"the grammar is too large written out as a pattern (over {MAX_PATTERN} characters)")
        self.done[name] = pattern
        return pattern

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _alternatives(self) -> str:
        options = [self._sequence()]
        while self._peek() == ("op", "|"):
            self.at += 1
            options.append(self._sequence())
        return options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"

    def _sequence(self) -> str:
        parts = []
        while (token := self._peek()) is not None and token not in (("op", "|"), ("op", ")"), ("op", "]")):
            if token[0] == "arrow":  # an alias names the tree's node: nothing to decode
                self.at += 2
                continue
            parts.append(self._repeated())
        return "".join(parts)

    def _repeated(self) -> str:
        atom = self._atom()
        token = self._peek()
        if token in (("op", "?"), ("op", "*"), ("op", "+")):
            self.at += 1
            return f"(?:{atom}){token[1]}"  # type: ignore[index]
        if token == ("op", "~"):
            low = self._number(self.at + 1)
            self.at += 2
            if self._peek() == ("range", ".."):
                high = self._number(self.at + 1)
                self.at += 2
                return f"(?:{atom}){{{low},{high}}}"
            return f"(?:{atom}){{{low}}}"
        return atom

    def _number(self, at: int) -> int:
        if at >= len(self.tokens) or self.tokens[at][0] != "number":
            raise LarkError("'~' takes a count (n or n..m)")
        return int(self.tokens[at][1])

    def _atom(self) -> str:
        token = self._peek()
        if token is None:
            raise LarkError("an expression ends early")
        self.at += 1
        kind, text = token
        if (kind, text) in (("op", "("), ("op", "[")):
            inner = self._alternatives()
            close = ")" if text == "(" else "]"
            if self._peek() != ("op", close):
                raise LarkError(f"missing {close!r}")
            self.at += 1
            return f"(?:{inner})" if text == "(" else f"(?:{inner})?"
        if kind == "string":
            if self._peek() == ("range", ".."):
                end = self.tokens[self.at + 1] if self.at + 1 < len(self.tokens) else ("", "")
                if end[0] != "string":
                    raise LarkError("a range is two strings: \"a\"..\"z\"")
                self.at += 2
                return f"[{_class_char(_string(text))}-{_class_char(_string(end[1]))}]"
            literal = "".join(_char(c) for c in _string(text))
            return f"(?i:{literal})" if text.endswith("i") else literal
        if kind == "regexp":
            body, _, flags = text[1:].rpartition("/")
            body = body.replace("\\/", "/")
            return f"(?{flags}:{body})" if flags else f"(?:{body})"
        if kind == "pattern":
            return f"(?:{text})"
        if kind == "name":
            return self.name(text)
        raise LarkError(f"unexpected {text!r}")


def _string(token: str) -> str:
    try:
        value = ast.literal_eval(token.removesuffix("i"))
    except (ValueError, SyntaxError):
        raise LarkError(f"not a string: {token}") from None
    if not isinstance(value, str):
        raise LarkError(f"not a string: {token}")
    return value


def _char(c: str) -> str:
    if c in _META:
        return "\\" + c
    if c == "\n":
        return "\\n"
    if c == "\t":
        return "\\t"
    if c == "\r":
        return "\\r"
    if ord(c) < 0x20:
        return f"\\x{ord(c):02x}"
    return c


def _class_char(text: str) -> str:
    if len(text) != 1:
        raise LarkError(f"a range's ends are single characters, not {text!r}")
    return _char(text)
