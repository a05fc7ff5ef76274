"""Request validation: every problem names its field and fails only that request."""

from __future__ import annotations

import functools
import math
from collections.abc import Container, Sequence

import jsonschema

from loopwire.common import json_limits
from loopwire.common.errors import invalid
from loopwire.v1 import common_pb2, gateway_pb2

_ROOT = "create_response"

# The most alternatives per output token a request may ask for (OpenAI's limit).
MAX_TOP_LOGPROBS = 20


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
    if s.HasField("top_logprobs") and s.top_logprobs > MAX_TOP_LOGPROBS:
        raise invalid(f"{_ROOT}.sampling.top_logprobs", f"must be in [0, {MAX_TOP_LOGPROBS}]")


def check_schema(text: str, field: str) -> None:
    """A tool's parameters must be a valid JSON Schema (its draft's meta-schema, by jsonschema)
    describing an object (empty means no parameters): the grammar and the clients rely on both."""
    problem = _schema_problem(text) if text else ""
    if problem:
        raise invalid(field, problem)


@functools.lru_cache(maxsize=4096)
def _schema_problem(text: str) -> str:
    """What is wrong with one schema text ('' when nothing): cached, as a session sends the same
    tools on every turn and a meta-schema check costs about half a millisecond."""
    try:
        schema = json_limits.loads(text)
    except json_limits.JsonTooDeep as e:
        return f"{e} (the most any JSON may nest)"
    except ValueError as e:
        return f"not valid JSON: {e}"
    if not isinstance(schema, dict):
        return "a JSON Schema must be an object"
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as e:
        at = "/" + "/".join(str(p) for p in e.absolute_path)
        return f"not a valid JSON Schema (at {at}): {e.message[:300]}"
    kind = schema.get("type", "object")
    if "object" not in (kind if isinstance(kind, list) else [kind]):
        return f"a tool's parameters describe an object, not {kind!r}"
    return ""


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
            _check_arguments_depth(call.arguments, f"{field}.function_call.arguments")
            seen.add(call.call_id)
        elif kind == "function_call_output":
            call_id = item.function_call_output.call_id
            if call_id not in seen and call_id not in known_call_ids:
                raise invalid(f"{field}.function_call_output.call_id", f"no function call with call_id {call_id!r}")
        elif kind == "tool_search_output":
            for j, tool in enumerate(item.tool_search_output.tools):
                check_schema(tool.parameters, f"{field}.tool_search_output.tools[{j}].parameters")


def _check_arguments_depth(arguments: str, field: str) -> None:
    """A call's arguments may be any text, but JSON nested past the shared bound is refused here,
    as the api and the harness refuse it, before the template renders it."""
    if arguments.lstrip()[:1] in ("{", "["):
        try:
            json_limits.loads(arguments)
        except json_limits.JsonTooDeep as e:
            raise invalid(field, f"{e} (the most any JSON may nest)") from None
        except ValueError:
            pass  # not JSON: rendered as the text it is
