"""The harness's own tools: schemas (sorted by name, fixed per session) and their execution.

Every failure becomes an error result the model can read (bad JSON, unknown tool, a path
outside the workspace, a missing sandbox); nothing a model sends can crash the loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loopwire.harness import exec_sessions, file_edit, file_pool, workspace_files, workspace_grep
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.output import cap, to_text
from loopwire.harness.sandbox import Sandbox, SandboxUnavailable
from loopwire.harness.workspace_files import ToolInputError
from loopwire.v1 import common_pb2

if TYPE_CHECKING:
    from loopwire.harness.config import HarnessConfig
    from loopwire.harness.extensions import Extensions


def _schema(properties: dict, required: list[str]) -> str:
    return json.dumps({"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False}, sort_keys=True)


_STR = {"type": "string"}
# The tool that ends a session whose every turn must call a tool (tool choice "required").
FINISH = "finish"
_INT = {"type": "integer"}
TOOLS = {
    t.name: t
    for t in [
        common_pb2.Tool(
            name="shell",
            description="Run a bash command in the workspace (sandboxed; no network unless `network` is true). "
            "Long commands return a handle; their result arrives later by itself, or use `wait`.",
            parameters=_schema({"command": _STR, "timeout_seconds": {"type": "number"},
                                "network": {"type": "boolean"}}, ["command"]),
        ),
        common_pb2.Tool(
            name="read_file",
            description="Read a text file of the workspace with line numbers.",
            parameters=_schema({"path": _STR, "offset": _INT, "limit": _INT}, ["path"]),
        ),
        common_pb2.Tool(
            name="edit_file",
            description="Edit a file: replace the unique `search` text with `replace` (empty `search` creates "
            "the file), or apply a unified `diff`.",
            parameters=_schema({"path": _STR, "search": _STR, "replace": _STR, "replace_all": {"type": "boolean"},
                                "diff": _STR}, ["path"]),
        ),
        common_pb2.Tool(
            name="list",
            description="List files and directories of the workspace.",
            parameters=_schema({"path": _STR, "depth": _INT}, []),
        ),
        common_pb2.Tool(
            name="grep",
            description="Search workspace files for a regular expression; prints path:line:text.",
            parameters=_schema({"pattern": _STR, "path": _STR, "glob": _STR}, ["pattern"]),
        ),
        common_pb2.Tool(
            name=FINISH,
            description="Call this when the task is done: `answer` is what the user reads (the result, or "
            "why it cannot be done). The session ends here.",
            parameters=_schema({"answer": _STR}, ["answer"]),
        ),
        common_pb2.Tool(
            name="exec_command",
            description="Run a command on a terminal in the workspace (sandboxed, no network), for interactive "
            "programs (a REPL, a prompt, a debugger). Returns its output once it ended or its output settled, "
            "waiting at most `yield_time_ms` (250-30000, default 1000), and, while it still runs, a session_id to use "
            "with write_stdin; or its exit code once it ended.",
            parameters=_schema({"cmd": _STR, "yield_time_ms": _INT}, ["cmd"]),
        ),
        common_pb2.Tool(
            name="write_stdin",
            description="Type `chars` into a running exec_command session (\\n is Enter, \\u0003 is Ctrl-C, "
            "\\u0004 is Ctrl-D; empty only reads) and return what it printed since the last read once its output "
            "settled or it exited (waiting at most `yield_time_ms`), and whether it exited.",
            parameters=_schema({"session_id": _INT, "chars": _STR, "yield_time_ms": _INT}, ["session_id"]),
        ),
        common_pb2.Tool(
            name="wait",
            description="Block until a background command (by handle) finishes or the timeout passes.",
            parameters=_schema({"handle": _STR, "timeout_seconds": {"type": "number"}}, ["handle"]),
        ),
    ]
}


def tool_list(config: HarnessConfig | None = None, start: object = None, window: int = 0) -> list[common_pb2.Tool]:
    """The tool list of a new session: sorted by name so the prompt prefix never varies.

    With deferred tools configured it also holds `tool_search` (or, when they fit a share of the
    model's ``window``, the deferred tools themselves); the tools a search finds are appended to
    the transcript, never added here."""
    extra = []
    if config is not None:
        from loopwire.harness import extensions

        extra = extensions.core_tools(config, start, window)  # type: ignore[arg-type]
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


def _args(call: common_pb2.FunctionCall) -> dict:
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


_MISSING = object()


def _get(args: dict, key: str, kind: type | tuple[type, ...], default: object = _MISSING) -> object:
    value = args.get(key, default)
    if value is _MISSING or value is None:
        raise ToolInputError(f"missing required argument `{key}`")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ToolInputError(f"argument `{key}` has the wrong type ({type(value).__name__})")
    return value


def _str(args: dict, key: str, default: object = _MISSING) -> str:
    return str(_get(args, key, str, default))


def _int(args: dict, key: str, default: object = _MISSING) -> int:
    return int(_get(args, key, int, default))  # type: ignore[call-overload]


def _number(args: dict, key: str, default: object = _MISSING) -> float:
    return float(_get(args, key, (int, float), default))  # type: ignore[arg-type]


def _bool(args: dict, key: str, default: object = _MISSING) -> bool:
    return bool(_get(args, key, bool, default))


async def execute(call: common_pb2.FunctionCall, ctx: ToolContext) -> ToolOutcome:
    """Run one call to completion (or to a background handle); never raises for bad input."""
    try:
        args = _args(call)
        if ctx.extra is not None and ctx.extra.handles(call.name):
            result = await ctx.extra.execute(call.name, args, ctx)
            capped = cap(result.output, ctx.sandbox.output_limit)
            return ToolOutcome(capped.text, is_error=result.is_error, exit_code=1 if result.is_error else 0,
                               truncated=capped.truncated)
        if call.name == "shell":
            return await _shell(args, ctx)
        if call.name == "wait":
            return await _wait(args, ctx)
        if call.name in ("exec_command", "write_stdin"):
            return await _exec(call.name, args, ctx)
        if call.name == FINISH:
            return ToolOutcome("finished: the session ends with this answer")
        ws = ctx.workspace
        if call.name == "read_file":
            text = await file_pool.run_tool(ctx.sandbox, ws, workspace_files.read_file, _str(args, "path"),
                                            _int(args, "offset", 1), _int(args, "limit", 400))
        elif call.name == "list":
            text = await file_pool.run_tool(ctx.sandbox, ws, workspace_files.list_dir, _str(args, "path", "."),
                                            _int(args, "depth", 2))
        elif call.name == "grep":
            text = await file_pool.run_tool(ctx.sandbox, ws, workspace_grep.grep, _str(args, "pattern"),
                                            _str(args, "path", "."), _str(args, "glob", ""))
        elif call.name == "edit_file":
            text = await file_pool.run_tool(ctx.sandbox, ws, _edit, args)
        else:
            hint = "; use tool_search to find more tools" if ctx.extra is not None and ctx.extra.enabled else ""
            raise ToolInputError(f"unknown tool `{to_text(call.name)}`; available: {', '.join(sorted(TOOLS))}{hint}")
    except ToolInputError as e:
        return ToolOutcome(f"error: {to_text(str(e))}", is_error=True, exit_code=1)
    except OSError as e:
        return ToolOutcome(f"error: {to_text(str(e))}", is_error=True, exit_code=1)
    capped = cap(text, ctx.sandbox.output_limit)
    return ToolOutcome(capped.text, truncated=capped.truncated)


def _edit(ws: Path, args: dict) -> str:
    path = _str(args, "path")
    if "diff" in args:
        return file_edit.apply_diff(ws, path, _str(args, "diff"))
    return file_edit.search_replace(ws, path, _str(args, "search", ""), _str(args, "replace", ""),
                                    _bool(args, "replace_all", False))


async def _shell(args: dict, ctx: ToolContext) -> ToolOutcome:
    command = _str(args, "command")
    timeout = min(max(_number(args, "timeout_seconds", ctx.shell_timeout), 0.1), ctx.max_shell_timeout)
    network = _bool(args, "network", False)
    try:
        process = await ctx.background.start(ctx.sandbox, ctx.workspace, command, network=network)
    except SandboxUnavailable as e:
        return ToolOutcome(f"error: {e}", is_error=True, exit_code=126)
    try:
        if timeout > ctx.background_after and not await process.wait(ctx.background_after):
            handle = ctx.background.detach(process, command, timeout - ctx.background_after)
            return ToolOutcome(
                f"still running after {ctx.background_after:g}s; detached as handle {handle}. Its result will be "
                f"added to the conversation when it finishes, or call wait with handle {handle}.",
                handle=handle,
            )
        result = await process.result(timeout)
    except BaseException:
        process.kill()
        raise
    return shell_outcome(result.output.text, result.exit_code, result.timed_out, timeout, result.output.truncated)


def shell_outcome(text: str, exit_code: int, timed_out: bool, timeout: float, truncated: bool) -> ToolOutcome:
    if timed_out:
        text += f"\n[killed: timed out after {timeout:g}s]"
    else:
        text += f"\n[exit code {exit_code}]"
    return ToolOutcome(text, is_error=timed_out or exit_code != 0, exit_code=exit_code, truncated=truncated)


async def _exec(name: str, args: dict, ctx: ToolContext) -> ToolOutcome:
    window = exec_sessions.yield_seconds(_number(args, "yield_time_ms", exec_sessions.DEFAULT_YIELD_MS))
    sessions = ctx.background.exec
    try:
        if name == "exec_command":
            reply = await sessions.start(ctx.sandbox, ctx.workspace, _str(args, "cmd"), window)
        else:
            reply = await sessions.write(_int(args, "session_id"), _str(args, "chars", ""), window)
    except SandboxUnavailable as e:
        return ToolOutcome(f"error: {e}", is_error=True, exit_code=126)
    text = reply.output.text + (f"\n{reply.note}" if reply.note else "")
    if reply.exit_code is None:
        n = reply.number
        return ToolOutcome(f"{text}\n[exec session {n} still running (waited at most {window:g}s); write_stdin with "
                           f"session_id {n} to type into it or read more]", truncated=reply.output.truncated)
    ended = f"exec session {args['session_id']} exited with code" if name == "write_stdin" else "exit code"
    return ToolOutcome(f"{text}\n[{ended} {reply.exit_code}]", is_error=reply.exit_code != 0,
                       exit_code=reply.exit_code, truncated=reply.output.truncated)


async def _wait(args: dict, ctx: ToolContext) -> ToolOutcome:
    handle = _str(args, "handle")
    timeout = min(max(_number(args, "timeout_seconds", ctx.shell_timeout), 0.0), ctx.max_shell_timeout)
    task = await ctx.background.wait(handle, timeout)
    if task is None and handle in ctx.background.lost:
        raise ToolInputError(f"{handle} was lost when the harness restarted; run the command again if needed")
    if task is None:
        raise ToolInputError(f"no background command with handle {handle!r}")
    if task.result is None:
        return ToolOutcome(f"{handle} is still running after waiting {timeout:g}s", handle=handle)
    r = task.result
    return shell_outcome(f"{handle} finished:\n{r.output.text}", r.exit_code, r.timed_out, 0, r.output.truncated)
