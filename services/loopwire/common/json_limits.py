"""One nesting bound for every JSON a client sends (tool schemas, arguments, bodies), the same in
the api, the gateway and the harness, so a value one tier accepts is never refused deeper in.

``json.loads`` recurses in C and raises ``RecursionError`` near the interpreter's limit; below it a
deep value would still reach recursive code later (jsonschema, grammar compilation, protobuf's
``json_format``). So parsing is bounded here, once, and the depth is measured without recursion.
"""

from __future__ import annotations

import json
from typing import Any

MAX_JSON_DEPTH = 64
"""Deepest nesting accepted anywhere (the outermost object or array is level 1)."""


class JsonTooDeep(ValueError):
    """A JSON value nested deeper than ``MAX_JSON_DEPTH``."""

    def __init__(self, limit: int = MAX_JSON_DEPTH) -> None:
        super().__init__(f"nested deeper than {limit} levels")
        self.limit = limit


def depth(value: Any) -> int:
    """Nesting depth of a parsed value (a scalar is 0), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            level += 1
            stack.extend((v, level) for v in node.values())
        elif isinstance(node, list):
            level += 1
            stack.extend((v, level) for v in node)
        deepest = max(deepest, level)
    return deepest


def loads(text: str | bytes, limit: int = MAX_JSON_DEPTH, **kwargs: Any) -> Any:
    """``json.loads`` that raises ``JsonTooDeep`` (a ``ValueError``) past ``limit`` levels, however
    deep the text is, instead of a ``RecursionError`` or a value that breaks recursive code later."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise JsonTooDeep(limit) from None
    if isinstance(value, (dict, list)) and depth(value) > limit:
        raise JsonTooDeep(limit)
    return value
