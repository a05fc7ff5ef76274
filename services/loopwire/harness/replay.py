"""Replay of a recorded session: each turn asks the engine to emit the recorded output, and
the recorded followups (tool outputs, user messages) come back instead of running tools,
unless `run_tools` is set, when the harness's real tools run (recorded `bash` → `shell`), and
so do its context tools where the harness has them configured: `tool_search` (over its deferred
tools and MCP servers), the tools a search found, and `exec_js` (code mode). A recorded call the
harness has no tool for gets its recorded output.

SWE-agent's own tools (its editor and search commands: `open`, `edit`, `create`, `submit` ...) are
no shell commands, though a thought/action session records them as its `bash` calls: they are
marked not runnable (``not_runnable``), named `swe-agent <tool>`, so they get their recorded output
as any tool the harness lacks, and the replay reports how many there were, never running them as
commands that do not exist.
"""

from __future__ import annotations

import json

from loopwire.v1 import common_pb2, harness_pb2

# Recorded tool names that map onto a harness tool taking the same arguments.
_TOOL_ALIASES = {"bash": "shell"}
# SWE-agent's tools (its agent-computer interface, 0.x and 1.x bundles): each keeps state of its own (the open
# file, its window) in SWE-agent's process, which the harness does not have.
SWE_AGENT_TOOLS = frozenset({
    "open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "append", "submit", "search_file",
    "search_dir", "find_file", "filemap", "str_replace_editor", "view_image", "exit_forfeit", "exit_cost",
    "exit_context", "exit_format", "exit_error", "skip", "review_on_submit_m", "_state", "_state_anthropic",
})


def swe_agent_action(command: str) -> str:
    """The SWE-agent tool a recorded shell command calls ('' when it is a shell command)."""
    words = command.split(maxsplit=1)
    return words[0] if words and words[0] in SWE_AGENT_TOOLS else ""


def not_runnable(call: common_pb2.FunctionCall) -> str:
    """The SWE-agent tool a recorded call is (by its name, or as the command of a `bash` call), else ''."""
    if call.name in SWE_AGENT_TOOLS:
        return call.name
    if call.name != "bash":
        return ""
    try:
        command = json.loads(call.arguments).get("command", "")
    except (ValueError, AttributeError):
        return ""
    return swe_agent_action(command) if isinstance(command, str) else ""


class ReplayPlan:
    def __init__(self, script: harness_pb2.ReplayScript) -> None:
        self.script = script
        self.turns = list(script.turns)
        self.run_tools = script.run_tools

    def map_name(self, name: str) -> str:
        return _TOOL_ALIASES.get(name, name) if self.run_tools else name

    def map_call(self, call: common_pb2.FunctionCall) -> common_pb2.FunctionCall:
        """The harness tool a recorded call runs as; a SWE-agent tool becomes `swe-agent <tool>`, which no
        harness tool is, so its recorded output is used."""
        tool = not_runnable(call) if self.run_tools else ""
        name = f"swe-agent {tool}" if tool else self.map_name(call.name)
        return common_pb2.FunctionCall(call_id=call.call_id, name=name, arguments=call.arguments)

    def followups(self, turn_index: int, calls: list[common_pb2.FunctionCall]) -> list[common_pb2.Item]:
        """Recorded followups of a turn, their call ids matched by position to the calls the
        gateway actually emitted (it may name calls differently from the recording)."""
        if not 0 <= turn_index < len(self.turns):
            return []
        turn = self.turns[turn_index]
        rename = {r.call_id: a.call_id for r, a in zip(turn.output.function_calls, calls, strict=False)}
        items = []
        for item in turn.followups:
            copy = common_pb2.Item()
            copy.CopyFrom(item)
            if copy.WhichOneof("item") == "function_call_output":
                out = copy.function_call_output
                out.call_id = rename.get(out.call_id, out.call_id)
            items.append(copy)
        return items
