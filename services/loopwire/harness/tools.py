"""A session's tools: the list a new session shows the model (sorted by name, fixed per session)
and `execute`, which runs a call through the built-in registry (`builtin_tools.BUILTINS`) after the
session's extensions (`extensions.Extensions`: tool_search, the deferred tools it found, exec_js).

Every failure becomes an error result the model can read (bad JSON, unknown tool, a path
outside the workspace, a missing sandbox); nothing a model sends can crash the loop.
"""

from __future__ import annotations

import json

from loopwire.harness import extensions
from loopwire.harness.builtin_tools import BUILTINS, FINISH
from loopwire.harness.config import HarnessConfig
from loopwire.harness.tool_registry import ToolContext, ToolOutcome
from loopwire.v1 import common_pb2

__all__ = ["FINISH", "TOOLS", "ToolContext", "ToolOutcome", "execute", "finish_answer", "requires_tools",
           "tool_list"]

TOOLS = BUILTINS.tools


def tool_list(config: HarnessConfig | None = None, start: object = None, window: int = 0) -> list[common_pb2.Tool]:
    """The tool list of a new session: sorted by name so the prompt prefix never varies.

    With deferred tools configured it also holds `tool_search` (or, when they fit a share of the
    model's ``window``, the deferred tools themselves); the tools a search finds are appended to
    the transcript, never added here."""
    extra = extensions.core_tools(config, start, window) if config is not None else []  # type: ignore[arg-type]
    by_name = {**TOOLS, **{t.name: t for t in extra}}
    if config is not None and config.tool_set == "shell":  # all a small model can choose between
        by_name = {name: tool for name, tool in by_name.items() if name in ("shell", FINISH)}
    if not requires_tools(start):
        by_name.pop(FINISH, None)
    return [by_name[name] for name in sorted(by_name)]


def requires_tools(start: object) -> bool:
    """Whether the session calls a tool every turn (and so has `finish`)."""
    model = getattr(start, "model", None)
    return model is not None and model.tool_choice.mode == common_pb2.TOOL_CHOICE_MODE_REQUIRED


def finish_answer(call: common_pb2.FunctionCall) -> str:
    """The answer of a `finish` call ('' when its arguments do not hold one)."""
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return ""
    return str(args.get("answer", "")) if isinstance(args, dict) else ""


async def execute(call: common_pb2.FunctionCall, ctx: ToolContext) -> ToolOutcome:
    """Run one call to completion (or to a background handle); never raises for bad input."""
    return await BUILTINS.dispatch(call, ctx)
