"""The tool registry: one handler per tool (schema, run), arguments parsed once and
checked against the schema before a handler sees them; the built-ins are registered that way."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwire.harness import tools
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.builtin_tools import BUILTINS
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.tool_registry import (
    ToolContext,
    ToolHandler,
    ToolOutcome,
    ToolRegistry,
    check_arguments,
)
from loopwire.harness.workspace_files import ToolInputError
from loopwire.v1 import common_pb2

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}, "count": {"type": "integer"},
                                           "share": {"type": "number"}, "on": {"type": "boolean"}},
          "required": ["text"], "additionalProperties": False}


def _registry(seen: list[dict]) -> ToolRegistry:
    async def run(args: dict, ctx: ToolContext) -> ToolOutcome:
        seen.append(args)
        return ToolOutcome("ran")

    tool = common_pb2.Tool(name="echo", description="d", parameters=json.dumps(SCHEMA))
    return ToolRegistry([ToolHandler(tool, run)])


def _ctx(tmp_path) -> ToolContext:
    return ToolContext(tmp_path, Sandbox(output_limit=2048), BackgroundTasks(), shell_timeout=10, background_after=5)


def _call(name: str, args: object) -> common_pb2.FunctionCall:
    return common_pb2.FunctionCall(call_id="c", name=name, arguments=json.dumps(args))


@pytest.mark.parametrize(("args", "error"), [
    ({}, "missing required argument `text`"),
    ({"text": None}, "missing required argument `text`"),
    ({"text": 3}, "argument `text` has the wrong type (int)"),
    ({"text": "a", "count": True}, "argument `count` has the wrong type (bool)"),
    ({"text": "a", "count": 1.5}, "argument `count` has the wrong type (float)"),
    ({"text": "a", "on": 1}, "argument `on` has the wrong type (int)"),
    ([], "arguments must be a JSON object"),
])
async def test_a_call_against_its_schema_never_reaches_the_handler(tmp_path, args, error) -> None:
    seen: list[dict] = []
    out = await _registry(seen).dispatch(_call("echo", args), _ctx(tmp_path))
    assert out.is_error and error in out.output and seen == []


async def test_checked_arguments_reach_the_handler_once(tmp_path) -> None:
    seen: list[dict] = []
    args = {"text": "a", "count": 2, "share": 1, "on": False, "share_null": None, "extra": [1]}
    out = await _registry(seen).dispatch(_call("echo", args), _ctx(tmp_path))
    assert out.output == "ran" and seen == [{"text": "a", "count": 2, "share": 1, "on": False, "extra": [1]}]


async def test_an_unknown_tool_names_the_registered_ones(tmp_path) -> None:
    out = await _registry([]).dispatch(_call("nope", {}), _ctx(tmp_path))
    assert out.is_error and "unknown tool `nope`; available: echo" in out.output


def test_every_built_in_is_a_handler_with_its_schema() -> None:
    assert set(tools.TOOLS) == set(BUILTINS.handlers)
    for name, handler in BUILTINS.handlers.items():
        schema = json.loads(handler.tool.parameters)
        assert schema["type"] == "object" and set(schema["required"]) <= set(schema["properties"]), name


@given(st.dictionaries(st.sampled_from(["text", "count", "share", "on", "other"]),
                       st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()))
def test_checked_arguments_hold_only_values_of_their_declared_type(args: dict) -> None:
    try:
        checked = check_arguments(args, SCHEMA)
    except ToolInputError:
        return
    kinds = {"text": str, "count": int, "share": (int, float), "on": bool}
    for key, value in checked.items():
        assert value is not None
        if key in kinds:
            assert isinstance(value, kinds[key]) and (key == "on" or not isinstance(value, bool))  # type: ignore[arg-type]
