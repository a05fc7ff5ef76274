"""The Responses API's tool types as the model sees them and as their calls come back.

The gateway knows one kind of tool, a function with JSON Schema parameters. Here:

- ``function``: offered as is; its calls are ``function_call`` items.
- ``custom`` (free-form input): offered as a function of one string, ``input`` (a ``regex``
  grammar becomes that string's ``pattern``, so decoding keeps to it); its calls are
  ``custom_tool_call`` items whose ``input`` is that string, and ``custom_tool_call_output``
  answers them.
- ``namespace``: its functions and custom tools are offered as ``<namespace>.<name>`` (the dot is
  how OpenAI's own models write a namespaced call); their calls come back with ``name`` and
  ``namespace`` apart, and an input call with a ``namespace`` is rendered with the joined name
  again, so the transcript is the one the model wrote.
- the tools OpenAI runs on its side (``web_search``, ``file_search``, ``code_interpreter``, ...):
  nothing here can run them, so they are not offered to the model (a model that does not see a
  tool does not call it) and not echoed; the response lists them under
  ``loopwire.tools_not_offered``. Refusing them instead would break clients that always send
  some (Codex sends ``web_search`` and others by default).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from loopwire.api import items
from loopwire.api.errors import bad_request, unsupported
from loopwire.api.items import CUSTOM_INPUT, SEPARATOR, joined
from loopwire.v1 import common_pb2

NOT_OFFERED = {
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "file_search", "code_interpreter",
    "image_generation", "computer_use_preview", "computer", "mcp", "local_shell", "shell", "apply_patch",
    "tool_search",
}


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
    """The kinds of the tools a Response echoes (``tools_json``, as :func:`parse` made them)."""
    custom: set[str] = set()
    namespaces: set[str] = set()
    for tool in tools_json:
        if tool.get("type") == "custom":
            custom.add(tool["name"])
        elif tool.get("type") == "namespace":
            namespaces.add(tool["name"])
            custom.update(joined(tool["name"], t["name"]) for t in tool["tools"] if t.get("type") == "custom")
    return ToolKinds(frozenset(custom), frozenset(namespaces))


def parse(value: Any, path: str = "tools") -> tuple[list[common_pb2.Tool], list[dict[str, Any]], list[str]]:
    """The request's ``tools`` as the gateway's tools, the Response's echo of them, and the types
    of those not offered (in order, once each)."""
    items.want(value, list, path, "an array of tools")
    tools: list[common_pb2.Tool] = []
    echo: list[dict[str, Any]] = []
    not_offered: list[str] = []
    for i, raw in enumerate(value):
        p = f"{path}[{i}]"
        items.want(raw, dict, p, "an object")
        kind = raw.get("type")
        if isinstance(kind, str) and kind in NOT_OFFERED:
            if kind not in not_offered:
                not_offered.append(kind)
            continue
        if kind == "function":
            items.check_keys(raw, {"type", "name", "description", "parameters", "strict", "defer_loading"}, p)
            tools.append(items.function_tool(raw, p))
            echo.append(items.tool_json(raw))
        elif kind == "custom":
            tools.append(_custom(raw, p))
            echo.append(_custom_json(raw))
        elif kind == "namespace":
            ns_tools, ns_echo = _namespace(raw, p)
            tools += ns_tools
            echo.append(ns_echo)
        else:
            raise unsupported(f"{p}.type", f"tool type {kind!r} (function, custom and namespace tools are offered; "
                              f"{', '.join(sorted(NOT_OFFERED))} are accepted and not offered)")
    return tools, echo, not_offered


def _custom(raw: dict[str, Any], p: str, namespace: str = "") -> common_pb2.Tool:
    items.check_keys(raw, {"type", "name", "description", "format", "defer_loading"}, p)
    name = _name(raw, p)
    description = items.want(raw.get("description") or "", str, f"{p}.description", "a string")
    text: dict[str, Any] = {"type": "string", "description": "The tool's free-form input."}
    fmt = raw.get("format")
    if fmt is not None:
        items.want(fmt, dict, f"{p}.format", "an object")
        kind = fmt.get("type")
        if kind == "grammar":
            items.check_keys(fmt, {"type", "syntax", "definition"}, f"{p}.format")
            syntax = fmt.get("syntax")
            definition = items.want(fmt.get("definition"), str, f"{p}.format.definition", "a string")
            if syntax != "regex":
                raise unsupported(f"{p}.format.syntax", f"grammar syntax {syntax!r} (only 'regex')")
            text["pattern"] = f"^(?:{definition})$"
        elif kind == "text":
            items.check_keys(fmt, {"type"}, f"{p}.format")
        else:
            raise bad_request(f"Invalid value for '{p}.format.type': {kind!r} (expected 'text' or 'grammar').",
                              f"{p}.format.type", "invalid_value")
    schema = {"type": "object", "properties": {CUSTOM_INPUT: text}, "required": [CUSTOM_INPUT],
              "additionalProperties": False}
    return common_pb2.Tool(name=joined(namespace, name) if namespace else name, description=description,
                           parameters=json.dumps(schema, sort_keys=True))


def _custom_json(raw: dict[str, Any]) -> dict[str, Any]:
    return {"type": "custom", "name": raw["name"], "description": raw.get("description"),
            "format": raw.get("format") or {"type": "text"}}


def _namespace(raw: dict[str, Any], p: str) -> tuple[list[common_pb2.Tool], dict[str, Any]]:
    items.check_keys(raw, {"type", "name", "description", "tools"}, p)
    namespace = _name(raw, p)
    description = items.want(raw.get("description") or "", str, f"{p}.description", "a string")
    members = items.want(raw.get("tools"), list, f"{p}.tools", "an array of function or custom tools")
    tools: list[common_pb2.Tool] = []
    echo: list[dict[str, Any]] = []
    for j, member in enumerate(members):
        mp = f"{p}.tools[{j}]"
        items.want(member, dict, mp, "an object")
        if member.get("type") == "function":
            items.check_keys(member, {"type", "name", "description", "parameters", "strict", "defer_loading"}, mp)
            tool = items.function_tool(member, mp)
            tool.name = joined(namespace, _name(member, mp))
            echo.append(items.tool_json(member))
        elif member.get("type") == "custom":
            tool = _custom(member, mp, namespace)
            echo.append(_custom_json(member))
        else:
            raise unsupported(f"{mp}.type", f"tool type {member.get('type')!r} in a namespace (only function and "
                              "custom)")
        # The namespace's description reaches the model with each of its tools.
        if description:
            tool.description = f"{description}\n{tool.description}" if tool.description else description
        tools.append(tool)
    return tools, {"type": "namespace", "name": namespace, "description": description, "tools": echo}


def _name(raw: dict[str, Any], p: str) -> str:
    name = items.want(raw.get("name"), str, f"{p}.name", "a string")
    if not name or SEPARATOR in name:
        raise bad_request(f"Invalid value for '{p}.name': {name!r} (a non-empty name without {SEPARATOR!r}, which "
                          "joins a namespace to its tools).", f"{p}.name", "invalid_value")
    return name


# -- calls -------------------------------------------------------------------------------------


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


def inherited(response: dict[str, Any] | None, own: ToolKinds) -> ToolKinds:
    """A delta that sends no tools has its conversation's: their kinds as the response it
    continues (stored by this api) echoed them."""
    if own.custom or own.namespaces or response is None:
        return own
    return kinds(response.get("tools") or [])
