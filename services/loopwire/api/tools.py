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
from typing import Any

from loopwire.api import items, lark_grammar
from loopwire.api.errors import bad_request
from loopwire.api.request_models.tools import CustomTool, FunctionTool, Grammar, HostedTool, NamespaceTool
from loopwire.api.tool_calls import CUSTOM_INPUT, joined
from loopwire.v1 import common_pb2


def parse(value: list[tuple[str, Any]]) -> tuple[list[common_pb2.Tool], list[dict[str, Any]], list[str]]:
    """The request's validated tools (``request_models.tools.Tool``), each with its path in the request
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
        if isinstance(tool, HostedTool):
            if tool.type not in not_offered:
                not_offered.append(tool.type)
        elif isinstance(tool, FunctionTool):
            tools.append(items.function_tool(tool))
            echo.append(_function_json(tool))
        elif isinstance(tool, CustomTool):
            tools.append(_custom(tool, path))
            echo.append(_custom_json(tool))
        elif isinstance(tool, NamespaceTool):
            ns_tools, ns_echo = _namespace(tool, path)
            tools += ns_tools
            echo.append(ns_echo)
    return tools, echo, not_offered


def _function_json(tool: FunctionTool) -> dict[str, Any]:
    """A function tool as the Response object echoes it: every field the specification's
    FunctionTool requires, null where the request left it out."""
    return {"type": "function", "name": tool.name, "description": tool.description, "parameters": tool.parameters,
            "strict": tool.strict}


def _custom(tool: CustomTool, path: str, namespace: str = "") -> common_pb2.Tool:
    text: dict[str, Any] = {"type": "string", "description": "The tool's free-form input."}
    fmt = tool.format
    if isinstance(fmt, Grammar) and fmt.syntax == "regex":
        text["pattern"] = f"^(?:{fmt.definition})$"
    elif isinstance(fmt, Grammar):
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


def _custom_json(tool: CustomTool) -> dict[str, Any]:
    fmt = tool.format.model_dump() if tool.format is not None else {"type": "text"}
    return {"type": "custom", "name": tool.name, "description": tool.description, "format": fmt}


def _namespace(ns: NamespaceTool, path: str) -> tuple[list[common_pb2.Tool], dict[str, Any]]:
    description = ns.description or ""
    tools: list[common_pb2.Tool] = []
    echo: list[dict[str, Any]] = []
    for j, member in enumerate(ns.tools):
        if isinstance(member, CustomTool):
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
