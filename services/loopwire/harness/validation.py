"""Checks of RunRequest actions; a bad one fails in-stream with the offending field named.

Sizes come first (``bounds``): a request's texts and tool schemas are measured against the
harness's limits on receipt, before anything stores, counts or forwards them, so an oversized
task costs its sender an INVALID_ARGUMENT, not the harness (and the gateway) seconds of CPU.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from loopwire.common import json_limits
from loopwire.common.errors import Code, RequestError, invalid
from loopwire.v1 import common_pb2, harness_pb2

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_TURNS_LIMIT = 100_000


def session_id(value: str, field: str) -> str:
    if not value:
        raise invalid(field, "required")
    if not _SESSION_ID.match(value):
        raise invalid(field, "must be 1-128 characters of letters, digits, '.', '_' or '-'")
    return value


@dataclass(frozen=True)
class Bounds:
    """The harness's limits on what one RunRequest carries (flags --max-input-bytes and
    --max-tool-schema-bytes); JSON nesting is `json_limits.MAX_JSON_DEPTH`, as in every tier."""

    input_bytes: int = 1 << 20
    tool_schema_bytes: int = 64 << 10


def _over(text: str, limit: int) -> str:
    """'' when ``text`` is at most ``limit`` bytes of UTF-8, else its size in words. A character
    takes 1 to 4 bytes, so only a text that could be either way is encoded to tell."""
    if len(text) > limit:
        return f"{len(text)} characters"  # at least as many bytes: no need to encode megabytes to refuse them
    if len(text) * 4 <= limit:
        return ""
    size = len(text.encode())
    return f"{size} bytes" if size > limit else ""


def _text(field: str, text: str, limit: int) -> None:
    if size := _over(text, limit):
        raise invalid(field, f"{size}, over the harness's limit of {limit} bytes (--max-input-bytes)")


def tool_schema(field: str, parameters: str, limit: int) -> None:
    """A tool's parameters: at most ``limit`` bytes of JSON nested at most MAX_JSON_DEPTH deep."""
    if size := _over(parameters, limit):
        raise invalid(field, f"{size}, over the harness's limit of {limit} bytes for a tool schema "
                             "(--max-tool-schema-bytes)")
    if not parameters:
        return
    try:
        json_limits.loads(parameters)
    except json_limits.JsonTooDeep as e:
        raise invalid(field, f"a JSON schema {e} (the limit of every loopwire tier)") from None
    except ValueError as e:
        raise invalid(field, f"not JSON ({e})") from None


def bounds(request: harness_pb2.RunRequest, limits: Bounds) -> None:
    """The sizes of a request's texts and tool schemas, before anything else looks at them."""
    kind = request.WhichOneof("action")
    if kind == "start":
        start = request.start
        _text("start.task", start.task, limits.input_bytes)
        _text("start.instructions", start.instructions, limits.input_bytes)
        for n, tool in enumerate(start.replay.tools):
            _text(f"start.replay.tools[{n}].description", tool.description, limits.input_bytes)
            tool_schema(f"start.replay.tools[{n}].parameters", tool.parameters, limits.tool_schema_bytes)
    elif kind == "user_message":
        _text("user_message.text", request.user_message.text, limits.input_bytes)
    elif kind == "approval":
        _text("approval.reason", request.approval.reason, limits.input_bytes)  # the model reads it


def start_task(start: harness_pb2.StartTask) -> None:
    if not start.task.strip():
        raise invalid("start.task", "required")
    if start.session_id:
        session_id(start.session_id, "start.session_id")
    if "\0" in start.workspace:
        raise invalid("start.workspace", "contains a NUL byte")
    if start.max_turns > MAX_TURNS_LIMIT:
        raise invalid("start.max_turns", f"at most {MAX_TURNS_LIMIT}")
    _model_options(start.model)
    _approval_policy(start.approval_policy)
    if start.HasField("replay"):
        if not start.replay.turns:
            raise invalid("start.replay.turns", "a replay needs at least one recorded turn")
        for n, replay_tool in enumerate(start.replay.tools):
            if not replay_tool.name:
                raise invalid(f"start.replay.tools[{n}].name", "required")


def _model_options(model: harness_pb2.ModelOptions) -> None:
    if model.conversation_mode not in harness_pb2.ConversationMode.values():
        raise invalid("start.model.conversation_mode", f"unknown value {model.conversation_mode}")
    choice = model.tool_choice
    if choice.mode not in common_pb2.ToolChoiceMode.values():
        raise invalid("start.model.tool_choice.mode", f"unknown value {choice.mode}")
    if choice.mode == common_pb2.TOOL_CHOICE_MODE_FUNCTION or choice.function_name:
        raise invalid("start.model.tool_choice", "a session chooses auto, required or none; a named function is "
                                                 "for single responses (the gateway's Converse)")
    sampling = model.sampling
    if not math.isfinite(sampling.temperature) or sampling.temperature < 0:
        raise invalid("start.model.sampling.temperature", "must be a finite number >= 0")
    if not math.isfinite(sampling.top_p) or not 0 <= sampling.top_p <= 1:
        raise invalid("start.model.sampling.top_p", "must be in [0, 1]")


def _approval_policy(policy: harness_pb2.ApprovalPolicy) -> None:
    if policy.default_mode not in harness_pb2.ApprovalMode.values():
        raise invalid("start.approval_policy.default_mode", f"unknown value {policy.default_mode}")
    for tool, mode in policy.per_tool.items():
        if mode not in harness_pb2.ApprovalMode.values():
            raise invalid(f"start.approval_policy.per_tool[{tool}]", f"unknown value {mode}")


def action(request: harness_pb2.RunRequest) -> str:
    kind = request.WhichOneof("action")
    if kind is None:
        raise invalid("action", "set one of start, resume, approval, user_message, cancel")
    return kind


def not_found(field: str, what: str) -> RequestError:
    return RequestError(Code.ERROR_CODE_NOT_FOUND, f"{field}: {what} not found", field)


def already_exists(field: str, what: str) -> RequestError:
    return RequestError(Code.ERROR_CODE_ALREADY_EXISTS, f"{field}: {what} already exists", field)
