"""The harness's own tools: shell, files, wait, the pty tools and finish, each a handler of the
built-in registry (`tool_registry`), schemas sorted by name and fixed per session."""

from __future__ import annotations

import json
from pathlib import Path

from loopwire.harness import exec_sessions, file_edit, file_pool, workspace_files, workspace_grep
from loopwire.harness.sandbox_limits import SandboxUnavailable
from loopwire.harness.tool_registry import ToolContext, ToolHandler, ToolOutcome, ToolRegistry, text_outcome
from loopwire.harness.workspace_files import ToolInputError
from loopwire.v1 import common_pb2


def _tool(name: str, description: str, properties: dict, required: list[str]) -> common_pb2.Tool:
    parameters = json.dumps({"type": "object", "properties": properties, "required": required,
                             "additionalProperties": False}, sort_keys=True)
    return common_pb2.Tool(name=name, description=description, parameters=parameters)


_STR, _INT, _NUMBER, _BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
# The tool that ends a session whose every turn must call a tool (tool choice "required").
FINISH = "finish"


async def _read_file(args: dict, ctx: ToolContext) -> ToolOutcome:
    return text_outcome(await file_pool.run_tool(ctx.sandbox, ctx.workspace, workspace_files.read_file, args["path"],
                                                 args.get("offset", 1), args.get("limit", 400)), ctx)


async def _list(args: dict, ctx: ToolContext) -> ToolOutcome:
    return text_outcome(await file_pool.run_tool(ctx.sandbox, ctx.workspace, workspace_files.list_dir,
                                                 args.get("path", "."), args.get("depth", 2)), ctx)


async def _grep(args: dict, ctx: ToolContext) -> ToolOutcome:
    return text_outcome(await file_pool.run_tool(ctx.sandbox, ctx.workspace, workspace_grep.grep, args["pattern"],
                                                 args.get("path", "."), args.get("glob", "")), ctx)


async def _edit_file(args: dict, ctx: ToolContext) -> ToolOutcome:
    return text_outcome(await file_pool.run_tool(ctx.sandbox, ctx.workspace, _edit, args), ctx)


def _edit(ws: Path, args: dict) -> str:
    if "diff" in args:
        return file_edit.apply_diff(ws, args["path"], args["diff"])
    return file_edit.search_replace(ws, args["path"], args.get("search", ""), args.get("replace", ""),
                                    args.get("replace_all", False))


async def _finish(args: dict, ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome("finished: the session ends with this answer")


async def _shell(args: dict, ctx: ToolContext) -> ToolOutcome:
    command = args["command"]
    timeout = min(max(args.get("timeout_seconds", ctx.shell_timeout), 0.1), ctx.max_shell_timeout)
    try:
        process = await ctx.background.start(ctx.sandbox, ctx.workspace, command, network=args.get("network", False))
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


# Typed reads of checked arguments, with defaults (the pty tools' handlers).
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


async def _exec_command(args: dict, ctx: ToolContext) -> ToolOutcome:
    return await _exec("exec_command", args, ctx)


async def _write_stdin(args: dict, ctx: ToolContext) -> ToolOutcome:
    return await _exec("write_stdin", args, ctx)


async def _wait(args: dict, ctx: ToolContext) -> ToolOutcome:
    handle = args["handle"]
    timeout = min(max(args.get("timeout_seconds", ctx.shell_timeout), 0.0), ctx.max_shell_timeout)
    task = await ctx.background.wait(handle, timeout)
    if task is None and handle in ctx.background.lost:
        raise ToolInputError(f"{handle} was lost when the harness restarted; run the command again if needed")
    if task is None:
        raise ToolInputError(f"no background command with handle {handle!r}")
    if task.result is None:
        return ToolOutcome(f"{handle} is still running after waiting {timeout:g}s", handle=handle)
    r = task.result
    return shell_outcome(f"{handle} finished:\n{r.output.text}", r.exit_code, r.timed_out, 0, r.output.truncated)


BUILTINS = ToolRegistry([
    ToolHandler(_tool(
        "shell", "Run a bash command in the workspace (sandboxed; no network unless `network` is true). "
        "Long commands return a handle; their result arrives later by itself, or use `wait`.",
        {"command": _STR, "timeout_seconds": _NUMBER, "network": _BOOL}, ["command"]), _shell),
    ToolHandler(_tool(
        "read_file", "Read a text file of the workspace with line numbers.",
        {"path": _STR, "offset": _INT, "limit": _INT}, ["path"]), _read_file),
    ToolHandler(_tool(
        "edit_file", "Edit a file: replace the unique `search` text with `replace` (empty `search` creates "
        "the file), or apply a unified `diff`.",
        {"path": _STR, "search": _STR, "replace": _STR, "replace_all": _BOOL, "diff": _STR}, ["path"]),
        _edit_file),
    ToolHandler(_tool(
        "list", "List files and directories of the workspace.",
        {"path": _STR, "depth": _INT}, []), _list),
    ToolHandler(_tool(
        "grep", "Search workspace files for a regular expression; prints path:line:text.",
        {"pattern": _STR, "path": _STR, "glob": _STR}, ["pattern"]), _grep),
    ToolHandler(_tool(
        FINISH, "Call this when the task is done: `answer` is what the user reads (the result, or "
        "why it cannot be done). The session ends here.",
        {"answer": _STR}, ["answer"]), _finish),
    ToolHandler(_tool(
        "exec_command", "Run a command on a terminal in the workspace (sandboxed, no network), for interactive "
        "programs (a REPL, a prompt, a debugger). Returns its output once it ended or its output settled, "
        "waiting at most `yield_time_ms` (250-30000, default 1000), and, while it still runs, a session_id to use "
        "with write_stdin; or its exit code once it ended.",
        {"cmd": _STR, "yield_time_ms": _INT}, ["cmd"]), _exec_command),
    ToolHandler(_tool(
        "write_stdin", "Type `chars` into a running exec_command session (\\n is Enter, \\u0003 is Ctrl-C, "
        "\\u0004 is Ctrl-D; empty only reads) and return what it printed since the last read once its output "
        "settled or it exited (waiting at most `yield_time_ms`), and whether it exited.",
        {"session_id": _INT, "chars": _STR, "yield_time_ms": _INT}, ["session_id"]), _write_stdin),
    ToolHandler(_tool(
        "wait", "Block until a background command (by handle) finishes or the timeout passes.",
        {"handle": _STR, "timeout_seconds": _NUMBER}, ["handle"]), _wait),
])
