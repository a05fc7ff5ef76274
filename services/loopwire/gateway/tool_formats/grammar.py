"""Grammar pieces the formats share: strict JSON schemas, JSON lexemes, texts that avoid a word,
and free text that turns into calls once the format's opener comes."""

from __future__ import annotations

import copy
import json
from typing import Any

from loopwire.v1 import common_pb2

# Compact JSON: separators as the Hermes examples write them, no runs of whitespace for a
# small model to loop in.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_REGEX_META = set("\\.+*?()|[]{}^$#&-~")
ANY_TEXT = "TEXT: /(.|\\n)*/"


def strict_schema(schema: Any) -> Any:
    """A copy with ``additionalProperties: false`` on every object schema that leaves it open."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) if k in ("properties", "items", "anyOf", "oneOf", "allOf", "prefixItems",
                                        "$defs", "definitions", "not", "if", "then", "else") else copy.deepcopy(v)
           for k, v in schema.items()}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: strict_schema(s) for name, s in schema[key].items()}
    required = out.get("required")
    if isinstance(out.get("properties"), dict) and isinstance(required, list):
        # Required properties first (the grammar writes them in this order): a small model fills
        # what the call needs before it can wander into optional fields, and may stop after them.
        props = out["properties"]
        out["properties"] = {**{k: props[k] for k in required if k in props},
                             **{k: v for k, v in props.items() if k not in required}}
    kinds = out.get("type")
    is_object = kinds == "object" or (isinstance(kinds, list) and "object" in kinds) or "properties" in out
    if is_object and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def parameters(tool: common_pb2.Tool) -> Any:
    return json.loads(tool.parameters) if tool.parameters else {"type": "object", "properties": {}}


def call_schema(tool: common_pb2.Tool, key: str = "arguments", id_schema: Any = None) -> dict[str, Any]:
    """The JSON object of one call: its name and its strict arguments (under ``key``)."""
    props = {"name": {"const": tool.name}, key: strict_schema(parameters(tool))}
    if id_schema is not None:  # Mistral's past calls carry a 9-character id after the arguments
        props["id"] = id_schema
    return {"type": "object", "properties": props, "required": ["name", key], "additionalProperties": False}


def json_rule(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps({**schema, "x-guidance": JSON_OPTIONS}, ensure_ascii=False)


def avoiding(word: str) -> str:
    """A regex of every text that does not contain ``word`` (whose first character occurs only
    first in it): runs of the first character, each followed by a wrong continuation, or at the end
    a proper prefix."""
    head, rest = word[0], word[1:]
    assert head not in rest
    esc = ("\\" + head) if head in _REGEX_META else head

    def lit(s: str) -> str:
        return "".join("\\" + c if c in _REGEX_META else ("\\n" if c == "\n" else c) for c in s)

    def cls(c: str) -> str:
        return "\\" + c if c in _REGEX_META or c == "]" else ("\\n" if c == "\n" else c)

    wrong = "|".join(f"{lit(rest[:k])}[^{cls(rest[k])}{cls(head)}]" for k in range(len(rest)))
    tail = "|".join(lit(rest[:k]) for k in range(1, len(rest)))
    return f"([^{cls(head)}]|{esc}+({wrong}))*({esc}+({tail})?)?"


def opened(opener: str) -> str:
    """Free text up to ``opener`` as a lazy lexeme: the opener is the trigger that forces a call."""
    return f"opened[lazy]: TEXT {json.dumps(opener)}"


def text_without(opener: str) -> str:
    """A whole grammar of text that never contains ``opener``."""
    return f"start: TEXT\nTEXT: /{avoiding(opener)}/\n"
