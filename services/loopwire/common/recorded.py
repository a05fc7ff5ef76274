"""Import recorded agent sessions (mini-swe-agent ``.traj.json``, SWE-agent ``.traj``,
OpenAI chat-completions JSON) into one shape the mesh can replay and analyze.

A session is instructions + task + tools + turns; a turn is what the assistant said
(text and tool calls) followed by what came back (tool outputs, user messages).

Nothing the recorded model generated is dropped: a reasoning model's ``reasoning_content``
stays in the turn's text, in the ``<think>`` block such models emit, so its output tokens
count. SWE-agent demonstrations (``is_demo`` messages) are part of the prompt prefix, kept
with the instructions; the task is the first user message that is not a demonstration.

SWE-agent with a thought/action parser records no ``tool_calls``: its command is the message's
``action``. Such a turn becomes a ``bash`` call of that command, its ``thought`` the turn's
text and the observation that follows the call's output, so the replay goes on past it (a turn
without calls is the model's final answer to the harness).

:func:`load_sessions` is the one decision every command shares on which files are sessions and
which are skipped, and why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
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


SESSION_SUFFIXES = (".json", ".traj")  # .traj.json too


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories as the session files under them (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.suffix in SESSION_SUFFIXES and q.is_file())
        else:
            out.append(p)
    return out


def load_sessions(paths: Iterable[str | Path], on_skip: Callable[[str], None]) -> list[tuple[Path, RecordedSession]]:
    """Every session under ``paths``; each file that is not one (unreadable, unknown format, no
    assistant turn) is left out with one ``skipped PATH: why`` line to ``on_skip``, so replay,
    analyze and the benchmarks skip the same files with the same words instead of one crashing."""
    loaded = []
    for path in expand_paths(paths):
        try:
            loaded.append((path, load_session(path)))
        except ValueError as e:
            on_skip(f"skipped {e}")
    return loaded


def load_session(path: str | Path) -> RecordedSession:
    """Read a recorded session; the format is recognised from its content. Anything that is not a
    replayable session raises ValueError naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: not a readable JSON session: {e}") from e
    specs: list[dict] = []
    if isinstance(data, dict) and str(data.get("trajectory_format", "")).startswith("mini-swe-agent"):
        fmt, messages = "mini-swe-agent", data.get("messages")
    elif isinstance(data, dict) and "history" in data:
        fmt, messages = "swe-agent", data["history"]
    elif isinstance(data, dict) and "messages" in data:
        fmt, messages, specs = "openai-chat", data["messages"], data.get("tools") or []
    elif isinstance(data, list):
        fmt, messages = "openai-chat", data
    else:
        raise ValueError(f"{path}: unknown session format (expected mini-swe-agent, SWE-agent or OpenAI chat JSON)")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ValueError(f"{path}: malformed {fmt} session: its messages are not a list of objects")
    try:
        return _from_messages(path.name, fmt, messages, specs)
    except _NotASession as e:
        raise ValueError(f"{path}: {e}") from None
    except (KeyError, TypeError, AttributeError) as e:  # a field of the wrong shape
        raise ValueError(f"{path}: malformed {fmt} session: {type(e).__name__}: {e}") from e


class _NotASession(Exception):
    """Why a well-formed file still has nothing to replay (load_session adds its path)."""


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _assistant_text(m: dict, text: str | None = None) -> str:
    text = _text(m.get("content")) if text is None else text
    reasoning = m.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning.strip():
        return f"<think>\n{reasoning.strip()}\n</think>\n\n{text}" if text else f"<think>\n{reasoning.strip()}\n</think>"
    return text


def _from_messages(source: str, fmt: str, messages: list[dict], tool_specs: list[dict]) -> RecordedSession:
    instructions_parts: list[str] = []
    task = ""
    turns: list[RecordedTurn] = []
    tool_names: list[str] = []
    awaiting = ""  # the call of a SWE-agent action turn whose observation has not come yet
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
            action = m.get("action")
            awaiting = ""
            if fmt == "swe-agent" and not calls and isinstance(action, str) and action.strip():
                # A thought/action turn: the command ran in SWE-agent's shell (its own commands included).
                awaiting = f"call_{i}_0"
                calls.append(common_pb2.FunctionCall(call_id=awaiting, name="bash",
                                                     arguments=json.dumps({"command": action})))
                if "bash" not in tool_names:
                    tool_names.append("bash")
                thought = m.get("thought")
                text = _assistant_text(m, thought if isinstance(thought, str) else None)
            else:
                text = _assistant_text(m)
            turns.append(RecordedTurn(text=text, calls=calls))
        elif role == "user" and awaiting and m.get("message_type", "observation") == "observation":
            turns[-1].followups.append(
                common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=awaiting, output=text))
            )
            awaiting = ""
        elif role == "tool" and turns:
            awaiting = ""
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            call_id = ids[0] if ids and ids[0] else (turns[-1].calls[0].call_id if turns[-1].calls else "")
            turns[-1].followups.append(
                common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=call_id, output=text))
            )
        elif role == "user" and turns:
            turns[-1].followups.append(user_item(text))
        # "exit" (mini-swe-agent's submission record) and late system messages are metadata.
    if not turns:
        raise _NotASession("no assistant turns, nothing to replay")
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
