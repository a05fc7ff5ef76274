"""Transcript items to the chat template's messages, and tool calls in the model's own format.

The template is the model's; this module only decides what it is given. Tools go to the
template when it lays them out itself, and otherwise into the system message in the
Hermes layout (which SmolLM2, Qwen 2.5 and Hermes models follow). An assistant turn the
model produced is given back as the exact text it generated (``raw``), so the next
rendering extends the ids the replica already holds instead of re-formatting them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loopwire.common import json_limits
from loopwire.common.model_def import ModelDefinition
from loopwire.v1 import common_pb2

ROLE_NAMES = {
    common_pb2.ROLE_SYSTEM: "system",
    common_pb2.ROLE_DEVELOPER: "system",
    common_pb2.ROLE_USER: "user",
    common_pb2.ROLE_ASSISTANT: "assistant",
}

HERMES_TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
HERMES_TOOLS_EPILOGUE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\n</tool_call>"
)


def json_or_text(text: str) -> Any:
    """Parsed JSON, or the text itself where it is not JSON (or nests past the shared bound)."""
    try:
        return json_limits.loads(text) if text else {}
    except ValueError:
        return text


def tool_schema(tool: common_pb2.Tool) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": tool.name, "description": tool.description, "parameters": json_or_text(tool.parameters)}}


def _schema_lines(tools: Sequence[common_pb2.Tool]) -> str:
    """One JSON schema a line, each after a newline (the Hermes ``<tools>`` block's body)."""
    return "".join("\n" + json.dumps(tool_schema(t), ensure_ascii=False) for t in tools)


def render_call(call: common_pb2.FunctionCall) -> str:
    """One call as the model writes it (Hermes): ``<tool_call>\\n{json}\\n</tool_call>``.

    Arguments that are JSON are written as they are (the parser hands back exactly that text,
    so a recorded or replayed call keeps its bytes); anything else becomes a JSON string.
    """
    args = call.arguments.strip() or "{}"
    try:
        json_limits.loads(args)
    except ValueError:
        args = json.dumps(call.arguments, ensure_ascii=False)
    return f'<tool_call>\n{{"name": {json.dumps(call.name, ensure_ascii=False)}, "arguments": {args}}}\n</tool_call>'


def assistant_text(text: str, calls: Sequence[common_pb2.FunctionCall]) -> str:
    """The assistant turn's whole output text: its prose, then each call."""
    parts = [text] if text else []
    parts += [render_call(c) for c in calls]
    return "\n".join(parts)


def group_turns(items: Sequence[common_pb2.Item]) -> list[list[int]]:
    """Indexes of items grouped into messages: an assistant message with the calls after it is one."""
    groups: list[list[int]] = []
    for i, item in enumerate(items):
        kind = item.WhichOneof("item")
        if kind == "function_call" and groups and _opens_turn(items[groups[-1][0]]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def last_turn_start(items: Sequence[common_pb2.Item]) -> int:
    """Where the assistant turn that ends ``items`` starts, as ``group_turns`` groups it (its
    message and the calls after it), found by walking back over that turn's own items;
    ``len(items)`` when ``items`` do not end in one."""
    i = len(items)
    while i and items[i - 1].WhichOneof("item") == "function_call":
        i -= 1
    if i and _opens_turn(items[i - 1]):  # the assistant message the calls follow
        i -= 1
    return i


def _opens_turn(item: common_pb2.Item) -> bool:
    kind = item.WhichOneof("item")
    return kind == "function_call" or (kind == "message" and item.message.role == common_pb2.ROLE_ASSISTANT)


@dataclass
class ChatPrompt:
    """Renders a conversation with the model's template."""

    model: ModelDefinition

    def system_message(self, instructions: str, tools: Sequence[common_pb2.Tool]) -> dict[str, Any] | None:
        text = instructions
        if tools and not self.model.template.handles_tools:
            text += HERMES_TOOLS_PREAMBLE + _schema_lines(tools) + HERMES_TOOLS_EPILOGUE
        return {"role": "system", "content": text} if text else None

    def messages(self, instructions: str, tools: Sequence[common_pb2.Tool], items: Sequence[common_pb2.Item],
                 raw: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
        """``raw`` maps the index of an item that opens a model turn to the text the model generated."""
        raw = raw or {}
        out: list[dict[str, Any]] = []
        system = self.system_message(instructions, tools)
        if system is not None:
            out.append(system)
        for group in group_turns(items):
            first = items[group[0]]
            if _opens_turn(first):
                out.append(self._assistant(first, [items[i] for i in group], raw.get(group[0])))
            else:
                out.append(self._message(first))
        return out

    def _assistant(self, first: common_pb2.Item, group: list[common_pb2.Item], raw: str | None) -> dict[str, Any]:
        text = "".join(p.text for p in first.message.content) if first.WhichOneof("item") == "message" else ""
        calls = [g.function_call for g in group if g.WhichOneof("item") == "function_call"]
        if raw is not None:
            return {"role": "assistant", "content": raw}
        if calls and self.model.template.handles_tool_calls:
            return {"role": "assistant", "content": text, "tool_calls": [
                {"id": c.call_id, "type": "function",
                 "function": {"name": c.name, "arguments": json_or_text(c.arguments)}} for c in calls]}
        return {"role": "assistant", "content": assistant_text(text, calls)}

    def _message(self, item: common_pb2.Item) -> dict[str, Any]:
        kind = item.WhichOneof("item")
        if kind == "message":
            return {"role": ROLE_NAMES.get(item.message.role, "user"),
                    "content": "".join(p.text for p in item.message.content)}
        if kind == "function_call_output":
            out = item.function_call_output
            if self.model.template.handles_tools:
                return {"role": "tool", "content": out.output, "tool_call_id": out.call_id}
            return {"role": "user", "content": f"<tool_response>\n{out.output}\n</tool_response>"}
        if kind == "tool_search_output":
            lines = _schema_lines(item.tool_search_output.tools)
            return {"role": "system", "content": "# Tools found\n<tools>" + lines + "\n</tools>"}
        if kind == "compaction_summary":
            return {"role": "system",
                    "content": "# Summary of the conversation so far\n" + item.compaction_summary.summary}
        raise ValueError("item has no content")

    def render(self, instructions: str, tools: Sequence[common_pb2.Tool], items: Sequence[common_pb2.Item],
               raw: Mapping[int, str] | None = None, add_generation_prompt: bool = False) -> str:
        template = self.model.template
        schemas = [tool_schema(t) for t in tools] if template.handles_tools else None
        return template.render(self.messages(instructions, tools, items, raw), schemas, add_generation_prompt)

    def encode_conversation(self, instructions: str, tools: Sequence[common_pb2.Tool],
                            items: Sequence[common_pb2.Item], add_generation_prompt: bool = False) -> list[int]:
        """The naive way and the reference: render everything, tokenize it in one call."""
        return self.model.tokenizer.encode(self.render(instructions, tools, items, None, add_generation_prompt))

    def output_ids(self, text: str, calls: Sequence[common_pb2.FunctionCall]) -> list[int]:
        """Ids a model would emit for this turn, stop token included (replay oracles)."""
        return [*self.model.tokenizer.encode(assistant_text(text, calls)), self.model.stop_token_ids[0]]
