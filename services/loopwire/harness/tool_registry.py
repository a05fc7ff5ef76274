"""A registry of tool handlers, as Codex's ``ToolRegistry``: each handler is the tool's schema as the
model sees it, whether it changes the workspace, and the function that runs it. A call's arguments
are parsed once, checked against that schema, and only then handed to its handler.

Every failure becomes an error result the model can read (bad JSON, an unknown tool, a wrong
argument); nothing a model sends can crash the loop. A session's extensions (``ToolContext.extra``:
tool_search, the deferred tools it found, exec_js) are asked first, so a call reaches them through
the same dispatch.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopwire.harness.background import BackgroundTasks
from loopwire.harness.output import cap, to_text
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.workspace_files import ToolInputError
from loopwire.v1 import common_pb2

if TYPE_CHECKING:  # it runs its calls through this registry (exec_js), so only its type here
    from loopwire.harness.extensions import Extensions


@dataclass
class ToolOutcome:
    output: str
    is_error: bool = False
    exit_code: int = 0
    truncated: bool = False
    handle: str = ""


@dataclass
class ToolContext:
    workspace: Path
    sandbox: Sandbox
    background: BackgroundTasks
    shell_timeout: float
    background_after: float
    max_shell_timeout: float = 3600.0
    extra: Extensions | None = None  # tool_search and deferred tools, when the session has them


Run = Callable[[dict, ToolContext], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class ToolHandler:
    tool: common_pb2.Tool  # name, description and the JSON schema of its arguments
    run: Run


class ToolRegistry:
    def __init__(self, handlers: Iterable[ToolHandler]) -> None:
        self.handlers = {h.tool.name: h for h in handlers}
        self.tools = {name: h.tool for name, h in self.handlers.items()}
        self._schemas = {name: json.loads(h.tool.parameters) for name, h in self.handlers.items()}

    async def dispatch(self, call: common_pb2.FunctionCall, ctx: ToolContext) -> ToolOutcome:
        """Run one call to completion (or to a background handle); never raises for bad input."""
        try:
            args = parse_arguments(call)
            if ctx.extra is not None and ctx.extra.handles(call.name):
                result = await ctx.extra.execute(call.name, args, ctx)
                capped = cap(result.output, ctx.sandbox.output_limit)
                return ToolOutcome(capped.text, is_error=result.is_error, exit_code=1 if result.is_error else 0,
                                   truncated=capped.truncated)
            handler = self.handlers.get(call.name)
            if handler is None:
                hint = "; use tool_search to find more tools" if ctx.extra is not None and ctx.extra.enabled else ""
                raise ToolInputError(f"unknown tool `{to_text(call.name)}`; available: "
                                     f"{', '.join(sorted(self.handlers))}{hint}")
            return await handler.run(check_arguments(args, self._schemas[call.name]), ctx)
        except (ToolInputError, OSError) as e:
            return ToolOutcome(f"error: {to_text(str(e))}", is_error=True, exit_code=1)


def text_outcome(text: str, ctx: ToolContext) -> ToolOutcome:
    """A tool's text output as the model reads it: capped at the sandbox's output limit."""
    capped = cap(text, ctx.sandbox.output_limit)
    return ToolOutcome(capped.text, truncated=capped.truncated)


def parse_arguments(call: common_pb2.FunctionCall) -> dict:
    """The call's arguments: a JSON object whose every string is Unicode text."""
    try:
        args = json.loads(call.arguments) if call.arguments.strip() else {}
    except (ValueError, RecursionError) as e:
        raise ToolInputError(f"arguments are not valid JSON: {e}") from None
    if not isinstance(args, dict):
        raise ToolInputError("arguments must be a JSON object")
    for key, value in args.items():
        if not _is_unicode(key) or not _is_unicode(value):
            raise ToolInputError(f"{to_text(key)} is not valid Unicode text (it holds a lone surrogate)")
    return args


_KINDS: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                       "boolean": (bool,), "object": (dict,), "array": (list,)}


def check_arguments(args: dict, schema: dict[str, Any]) -> dict:
    """``args`` checked against the schema's properties: the required ones present, each declared one
    of its type (a null optional one counts as absent). Undeclared keys are left for the handler to
    ignore."""
    properties: dict[str, Any] = schema.get("properties", {})
    for key in schema.get("required", []):
        if args.get(key) is None:
            raise ToolInputError(f"missing required argument `{key}`")
    checked = {}
    for key, value in args.items():
        if value is None:
            continue
        kinds = _KINDS.get(properties.get(key, {}).get("type", ""))
        if kinds is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
            raise ToolInputError(f"argument `{key}` has the wrong type ({type(value).__name__})")
        checked[key] = value
    return checked


def _is_unicode(value: object) -> bool:
    """Whether every string in a parsed JSON value encodes to UTF-8: JSON's "\\ud800" escapes
    decode to lone surrogates, which no file name, file body or command can hold."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(v, dict):
            stack.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return True
