"""Request validation: every problem names its field and fails only that request."""

from __future__ import annotations

import json
import math
from collections.abc import Container, Sequence

from loopwire.common.errors import invalid
from loopwire.v1 import common_pb2, gateway_pb2

_ROOT = "create_response"
_SCHEMA_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


def check_size(request: gateway_pb2.CreateResponse, max_bytes: int) -> int:
    size = request.ByteSize()
    if size > max_bytes:
        raise invalid(_ROOT, f"request is {size} bytes, over the {max_bytes}-byte limit")
    return size


def check_header(request: gateway_pb2.CreateResponse) -> None:
    """Fields outside the transcript: tools, sampling."""
    names: set[str] = set()
    for i, tool in enumerate(request.tools):
        field = f"{_ROOT}.tools[{i}]"
        if not tool.name:
            raise invalid(f"{field}.name", "tool name is empty")
        if tool.name in names:
            raise invalid(f"{field}.name", f"duplicate tool name {tool.name!r}")
        names.add(tool.name)
        check_schema(tool.parameters, f"{field}.parameters")
    s = request.sampling
    if not math.isfinite(s.temperature) or s.temperature < 0:
        raise invalid(f"{_ROOT}.sampling.temperature", "must be a finite number >= 0")
    if not math.isfinite(s.top_p) or not 0 <= s.top_p <= 1:
        raise invalid(f"{_ROOT}.sampling.top_p", "must be in [0, 1]")
    if s.max_output_tokens < 0:
        raise invalid(f"{_ROOT}.sampling.max_output_tokens", "must be >= 0")
    for i, stop in enumerate(s.stop):
        if not stop:
            raise invalid(f"{_ROOT}.sampling.stop[{i}]", "stop string is empty")


def check_schema(text: str, field: str) -> None:
    """A tool's parameters must be a JSON Schema object (empty means no parameters)."""
    if not text:
        return
    try:
        schema = json.loads(text)
    except ValueError as e:
        raise invalid(field, f"not valid JSON: {e}") from None
    if not isinstance(schema, dict):
        raise invalid(field, "a JSON Schema must be an object")
    kind = schema.get("type", "object")
    kinds = kind if isinstance(kind, list) else [kind]
    if not kinds or any(k not in _SCHEMA_TYPES for k in kinds):
        raise invalid(field, f"unknown JSON Schema type {kind!r}")
    props = schema.get("properties", {})
    if not isinstance(props, dict) or any(not isinstance(v, dict) for v in props.values()):
        raise invalid(field, "'properties' must map names to schema objects")
    required = schema.get("required", [])
    if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
        raise invalid(field, "'required' must be a list of property names")


def check_items(items: Sequence[common_pb2.Item], known_call_ids: Container[str], offset: int = 0) -> None:
    """Malformed items and outputs of calls the conversation never made."""
    seen: set[str] = set()
    for i, item in enumerate(items):
        field = f"{_ROOT}.input[{i + offset}]"
        kind = item.WhichOneof("item")
        if kind is None:
            raise invalid(field, "item is empty")
        if kind == "message":
            if item.message.role == common_pb2.ROLE_UNSPECIFIED:
                raise invalid(f"{field}.message.role", "role is unspecified")
            if any(p.WhichOneof("part") is None for p in item.message.content):
                raise invalid(f"{field}.message.content", "content part is empty")
        elif kind == "function_call":
            call = item.function_call
            if not call.call_id:
                raise invalid(f"{field}.function_call.call_id", "call_id is empty")
            if not call.name:
                raise invalid(f"{field}.function_call.name", "name is empty")
            seen.add(call.call_id)
        elif kind == "function_call_output":
            call_id = item.function_call_output.call_id
            if call_id not in seen and call_id not in known_call_ids:
                raise invalid(f"{field}.function_call_output.call_id", f"no function call with call_id {call_id!r}")
        elif kind == "tool_search_output":
            for j, tool in enumerate(item.tool_search_output.tools):
                check_schema(tool.parameters, f"{field}.tool_search_output.tools[{j}].parameters")
