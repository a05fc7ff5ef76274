"""The Responses API's tool types as the model sees them and as their calls come back.

The gateway knows one kind of tool, a function with JSON Schema parameters. Here:

- ``function``: offered as is; its calls are ``function_call`` items.
- ``custom`` (free-form input): offered as a function of one string, ``input`` (a ``regex``
  grammar becomes that string's ``pattern``, so decoding keeps to it; a ``lark`` grammar too,
  written as the pattern of its language: lark_grammar.py); its calls are
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

import functools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from loopwire.api import items, lark_grammar
from loopwire.api import request_models as rm
from loopwire.api.errors import bad_request
from loopwire.api.items import CUSTOM_INPUT, joined
from loopwire.api.request_models import SEPARATOR
from loopwire.v1 import common_pb2


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


def parse(value: list[tuple[str, Any]]) -> tuple[list[common_pb2.Tool], list[dict[str, Any]], list[str]]:
    """The request's validated tools (``request_models.Tool``), each with its path in the request
    (a grammar's error names its definition there), as the gateway's tools, the Response's echo
    of them, and the types of those not offered (in order, once each)."""
    tools: list[common_pb2.Tool] = []
    echo: list[dict[str, Any]] = []
    not_offered: list[str] = []
    seen: set[str] = set()
    for path, tool in value:
        key = tool.model_dump_json(warnings=False)  # a union field serializes as its own model
        if key in seen:  # sent again (in ``tools`` and an ``additional_tools`` item): offered once
            continue
        seen.add(key)
        if isinstance(tool, rm.HostedTool):
            if tool.type not in not_offered:
                not_offered.append(tool.type)
        elif isinstance(tool, rm.FunctionTool):
            tools.append(items.function_tool(tool))
            echo.append(_function_json(tool))
        elif isinstance(tool, rm.CustomTool):
            tools.append(_custom(tool, path))
            echo.append(_custom_json(tool))
        elif isinstance(tool, rm.NamespaceTool):
            ns_tools, ns_echo = _namespace(tool, path)
            tools += ns_tools
            echo.append(ns_echo)
    return tools, echo, not_offered


def _function_json(tool: rm.FunctionTool) -> dict[str, Any]:
    """A function tool as the Response object echoes it: every field the specification's
    FunctionTool requires, null where the request left it out."""
    return {"type": "function", "name": tool.name, "description": tool.description, "parameters": tool.parameters,
            "strict": tool.strict}


def _custom(tool: rm.CustomTool, path: str, namespace: str = "") -> common_pb2.Tool:
    text: dict[str, Any] = {"type": "string", "description": "The tool's free-form input."}
    fmt = tool.format
    if isinstance(fmt, rm.Grammar) and fmt.syntax == "regex":
        text["pattern"] = f"^(?:{fmt.definition})$"
    elif isinstance(fmt, rm.Grammar):
        try:
            text["pattern"] = _lark_pattern(fmt.definition)
        except lark_grammar.LarkError as e:
            param = f"{path}.format.definition"
            raise bad_request(f"Invalid value for '{param}': custom tool {tool.name!r}'s Lark grammar: {e}", param,
                              "invalid_value") from None
    schema = {"type": "object", "properties": {CUSTOM_INPUT: text}, "required": [CUSTOM_INPUT],
              "additionalProperties": False}
    return common_pb2.Tool(name=joined(namespace, tool.name) if namespace else tool.name,
                           description=tool.description or "", parameters=json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _lark_pattern(definition: str) -> str:
    """Clients send the same grammar every turn: each is read and checked once."""
    return lark_grammar.to_pattern(definition)


def _custom_json(tool: rm.CustomTool) -> dict[str, Any]:
    fmt = tool.format.model_dump() if tool.format is not None else {"type": "text"}
    return {"type": "custom", "name": tool.name, "description": tool.description, "format": fmt}


def _namespace(ns: rm.NamespaceTool, path: str) -> tuple[list[common_pb2.Tool], dict[str, Any]]:
    description = ns.description or ""
    tools: list[common_pb2.Tool] = []
    echo: list[dict[str, Any]] = []
    for j, member in enumerate(ns.tools):
        if isinstance(member, rm.CustomTool):
            tool = _custom(member, f"{path}.tools[{j}]", ns.name)
            echo.append(_custom_json(member))
        else:
            tool = items.function_tool(member, joined(ns.name, member.name))
            echo.append(_function_json(member))
        # The namespace's description reaches the model with each of its tools.
        if description:
            tool.description = f"{description}\n{tool.description}" if tool.description else description
        tools.append(tool)
    return tools, {"type": "namespace", "name": ns.name, "description": description, "tools": echo}


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
