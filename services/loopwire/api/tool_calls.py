"""A model's tool calls in their tool's shape, both ways.

The gateway knows one kind of call, a function's name and JSON arguments. A custom tool's call
carries one string (its arguments are ``{"input": ...}``) and a namespaced tool's name is joined
to its namespace (``<namespace>.<name>``, as OpenAI's own models write it). Here: a call sent
back as the call the model wrote, and a call of the model as its tool's output item
(``function_call`` or ``custom_tool_call``, namespace apart). Both the input items (items.py)
and the tools (tools.py) build on this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from loopwire.api.request_models.tools import SEPARATOR
from loopwire.v1 import common_pb2

# The one argument of a custom tool.
CUSTOM_INPUT = "input"


def joined(namespace: str, name: str) -> str:
    return f"{namespace}{SEPARATOR}{name}"


def call_name(name: str, namespace: str | None) -> str:
    """A call's tool name as the model wrote it: a namespaced one joined to its namespace."""
    return name if namespace is None else joined(namespace, name)


def custom_arguments(text: str) -> str:
    """A custom tool call's input as the function arguments the model writes for it."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)


def custom_input(arguments: str) -> str:
    """The input string out of a custom tool's arguments (decoding kept them one JSON object of
    one string; anything else is passed on as the text it is)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments


@dataclass(frozen=True)
class ToolKinds:
    """What the api must know to give a call back in its tool's shape: the model-facing names of
    custom tools, and the namespaces."""

    custom: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()

    def split(self, name: str) -> tuple[str | None, str]:
        """A model-facing name as (namespace, name); no namespace unless the prefix is one."""
        namespace, dot, rest = name.partition(SEPARATOR)
        if dot and namespace in self.namespaces:
            return namespace, rest
        return None, name


def kinds(tools_json: Iterable[dict[str, Any]]) -> ToolKinds:
    """The kinds of the tools a Response echoes (``tools_json``, as ``tools.parse`` made them)."""
    custom: set[str] = set()
    namespaces: set[str] = set()
    for tool in tools_json:
        if tool.get("type") == "custom":
            custom.add(tool["name"])
        elif tool.get("type") == "namespace":
            namespaces.add(tool["name"])
            custom.update(joined(tool["name"], t["name"]) for t in tool["tools"] if t.get("type") == "custom")
    return ToolKinds(frozenset(custom), frozenset(namespaces))


def inherited(response: dict[str, Any] | None, own: ToolKinds) -> ToolKinds:
    """A delta that sends no tools has its conversation's: their kinds as the response it
    continues (stored by this api) echoed them."""
    if own.custom or own.namespaces or response is None:
        return own
    return kinds(response.get("tools") or [])


def call_item(call: common_pb2.FunctionCall, tools: ToolKinds, status: str = "completed") -> dict[str, Any]:
    """A call of the model as its tool's output item: ``custom_tool_call`` for a custom tool,
    else ``function_call``; a namespaced one names its namespace apart."""
    namespace, name = tools.split(call.name)
    ns = {} if namespace is None else {"namespace": namespace}
    item_id = f"ctc_{call.call_id.removeprefix('call_')}" if call.name in tools.custom else \
        f"fc_{call.call_id.removeprefix('call_')}"
    if call.name in tools.custom:
        return {"type": "custom_tool_call", "id": item_id, "call_id": call.call_id, "name": name, **ns,
                "input": custom_input(call.arguments) if status == "completed" else "", "status": status}
    return {"type": "function_call", "id": item_id, "call_id": call.call_id, "name": name, **ns,
            "arguments": call.arguments, "status": status}
