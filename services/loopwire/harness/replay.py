"""Replay of a recorded session: each turn asks the engine to emit the recorded output, and
the recorded followups (tool outputs, user messages) come back instead of running tools,
unless `run_tools` is set, when the harness's real tools run (recorded `bash` → `shell`), and
so do its context tools where the harness has them configured: `tool_search` (over its deferred
tools and MCP servers), the tools a search found, and `exec_js` (code mode). A recorded call the
harness has no tool for gets its recorded output.
"""

from __future__ import annotations

from loopwire.v1 import common_pb2, harness_pb2

# Recorded tool names that map onto a harness tool taking the same arguments.
_TOOL_ALIASES = {"bash": "shell"}


class ReplayPlan:
    def __init__(self, script: harness_pb2.ReplayScript) -> None:
        self.script = script
        self.turns = list(script.turns)
        self.run_tools = script.run_tools

    def map_name(self, name: str) -> str:
        return _TOOL_ALIASES.get(name, name) if self.run_tools else name

    def map_call(self, call: common_pb2.FunctionCall) -> common_pb2.FunctionCall:
        return common_pb2.FunctionCall(call_id=call.call_id, name=self.map_name(call.name), arguments=call.arguments)

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
