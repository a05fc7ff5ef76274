"""Import recorded agent sessions (mini-swe-agent ``.traj.json``, SWE-agent ``.traj``,
OpenAI chat-completions JSON) into one shape the mesh can replay and analyze.

A session is instructions + task + tools + turns; a turn is what the assistant said
(text and tool calls) followed by what came back (tool outputs, user messages).

Nothing the recorded model generated is dropped: a reasoning model's ``reasoning_content``
stays in the turn's text, in the ``<think>`` block such models emit, so its output tokens
count. SWE-agent demonstrations (``is_demo`` messages) are part of the prompt prefix, kept
with the instructions; the task is the first user message that is not a demonstration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from loopwire.v1 import common_pb2, harness_pb2

_GENERIC_TOOL_SCHEMA = json.dumps({"type": "object", "additionalProperties": True})
_KNOWN_TOOL_SCHEMAS = {
    "bash": json.dumps(
        {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    ),
}


@dataclass
class RecordedTurn:
    text: str
    calls: list[common_pb2.FunctionCall]
    # What came back after the turn: function_call_output and user message items, in order.
    followups: list[common_pb2.Item] = field(default_factory=list)

    @property
    def tool_outputs(self) -> list[common_pb2.FunctionCallOutput]:
        return [i.function_call_output for i in self.followups if i.WhichOneof("item") == "function_call_output"]


@dataclass
class RecordedSession:
    source: str
    format: str
    instructions: str
    task: str
    tools: list[common_pb2.Tool]
    turns: list[RecordedTurn]

    def replay_script(self, run_tools: bool = False) -> harness_pb2.ReplayScript:
        return harness_pb2.ReplayScript(
            source=f"{self.source} ({self.format})",
            tools=self.tools,
            run_tools=run_tools,
            turns=[
                harness_pb2.ReplayTurn(
                    output=common_pb2.ReplayOutput(text=t.text, function_calls=t.calls),
                    followups=t.followups,
                )
                for t in self.turns
            ],
        )

    def items(self) -> list[common_pb2.Item]:
        """The whole transcript as items (task, then each turn and its followups)."""
        out = [user_item(self.task)]
        for t in self.turns:
            if t.text or not t.calls:
                out.append(common_pb2.Item(message=common_pb2.Message(
                    role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=t.text)])))
            out += [common_pb2.Item(function_call=c) for c in t.calls]
            out += t.followups
        return out


def user_item(text: str) -> common_pb2.Item:
    return common_pb2.Item(
        message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)])
    )


def load_session(path: str | Path) -> RecordedSession:
    """Read a recorded session; the format is recognised from its content."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not a readable JSON session: {e}") from e
    if isinstance(data, dict) and data.get("trajectory_format", "").startswith("mini-swe-agent"):
        return _from_messages(path.name, "mini-swe-agent", data["messages"], [])
    if isinstance(data, dict) and "history" in data:
        return _from_messages(path.name, "swe-agent", data["history"], [])
    if isinstance(data, dict) and "messages" in data:
        return _from_messages(path.name, "openai-chat", data["messages"], data.get("tools") or [])
    if isinstance(data, list):
        return _from_messages(path.name, "openai-chat", data, [])
    raise ValueError(f"{path}: unknown session format (expected mini-swe-agent, SWE-agent or OpenAI chat JSON)")


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _assistant_text(m: dict) -> str:
    text = _text(m.get("content"))
    reasoning = m.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning.strip():
        return f"<think>\n{reasoning.strip()}\n</think>\n\n{text}" if text else f"<think>\n{reasoning.strip()}\n</think>"
    return text


def _from_messages(source: str, fmt: str, messages: list[dict], tool_specs: list[dict]) -> RecordedSession:
    instructions_parts: list[str] = []
    task = ""
    turns: list[RecordedTurn] = []
    tool_names: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        text = _text(m.get("content"))
        if (role == "system" or m.get("is_demo")) and not turns:
            instructions_parts.append(text)
        elif role == "user" and not turns and not task:
            task = text
        elif role == "assistant":
            calls = []
            for j, tc in enumerate(m.get("tool_calls") or []):
                fn = tc.get("function") or {}
                args = fn.get("arguments", "")
                if not isinstance(args, str):
                    args = json.dumps(args)
                name = fn.get("name", "")
                if name and name not in tool_names:
                    tool_names.append(name)
                calls.append(common_pb2.FunctionCall(call_id=tc.get("id") or f"call_{i}_{j}", name=name, arguments=args))
            turns.append(RecordedTurn(text=_assistant_text(m), calls=calls))
        elif role == "tool" and turns:
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            call_id = ids[0] if ids and ids[0] else (turns[-1].calls[0].call_id if turns[-1].calls else "")
            turns[-1].followups.append(
                common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=call_id, output=text))
            )
        elif role == "user" and turns:
            turns[-1].followups.append(user_item(text))
        # "exit" (mini-swe-agent's submission record) and late system messages are metadata.
    if not turns:
        raise ValueError(f"{source}: no assistant turns")
    tools = _tools(tool_specs, tool_names)
    return RecordedSession(source, fmt, "\n\n".join(instructions_parts), task, tools, turns)


def _tools(tool_specs: list[dict], used: list[str]) -> list[common_pb2.Tool]:
    tools = {}
    for spec in tool_specs:
        fn = spec.get("function", spec)
        tools[fn["name"]] = common_pb2.Tool(
            name=fn["name"], description=fn.get("description", ""), parameters=json.dumps(fn.get("parameters") or {})
        )
    for name in used:
        tools.setdefault(name, common_pb2.Tool(name=name, parameters=_KNOWN_TOOL_SCHEMAS.get(name, _GENERIC_TOOL_SCHEMA)))
    return [tools[n] for n in sorted(tools)]
