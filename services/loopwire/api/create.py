"""The Responses API create body (HTTP ``POST /v1/responses`` and WebSocket ``response.create``)
as one gateway ``CreateResponse``.

A field is implemented, accepted and ignored (said in docs/openai-api.md), or refused: an
unknown field is a 400 ``unknown_parameter``, as OpenAI answers it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loopwire.api import items
from loopwire.api.errors import ApiError, bad_request, invalid_type, unsupported
from loopwire.v1 import common_pb2, gateway_pb2

IMPLEMENTED = {
    "model", "input", "instructions", "previous_response_id", "store", "stream", "tools", "tool_choice",
    "max_output_tokens", "temperature", "top_p", "metadata", "parallel_tool_calls",
    "loopwire_replay",  # extension: replay a recorded assistant turn (tests, benchmarks)
}
# Accepted so that real clients (Codex, the Agents SDK) work; they change nothing here.
IGNORED = {
    "user", "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier", "stream_options",
    "include", "reasoning", "text", "truncation", "store_options", "client_metadata", "top_logprobs",
}
WEBSOCKET_ONLY = {"type", "generate"}


@dataclass
class ParsedCreate:
    create: gateway_pb2.CreateResponse
    stream: bool
    store: bool
    generate: bool
    metadata: dict[str, str] = field(default_factory=dict)
    parallel_tool_calls: bool = True
    tools_json: list[dict[str, Any]] = field(default_factory=list)


def parse_create(body: dict[str, Any], *, models: list[str], websocket: bool = False) -> ParsedCreate:
    allowed = IMPLEMENTED | IGNORED | (WEBSOCKET_ONLY if websocket else set())
    items.check_keys(body, allowed, "")
    if websocket and body.get("background"):
        raise unsupported("background", "background mode over WebSocket")
    model = body.get("model")
    if model is None:
        raise bad_request("Missing required parameter: 'model'.", "model", "missing_required_parameter")
    items.want(model, str, "model", "a string")
    if models and model not in models:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves {', '.join(models)}.",
                       param="model", code="model_not_found")
    create = gateway_pb2.CreateResponse(model=model)
    previous = body.get("previous_response_id")
    if previous is not None:
        create.previous_response_id = items.want(previous, str, "previous_response_id", "a string")
    if body.get("instructions") is not None:
        create.instructions = items.want(body["instructions"], str, "instructions", "a string")
    create.input.extend(items.response_input(body.get("input", [])))
    create.tools.extend(items.response_tools(body.get("tools") or []))
    tools_json = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    _tool_choice(body.get("tool_choice"))
    _sampling(body, create.sampling)
    store = body.get("store", True)
    items.want(store, bool, "store", "a boolean")
    create.no_store = not store
    stream = body.get("stream", False)
    items.want(stream, bool, "stream", "a boolean")
    generate = body.get("generate", True)
    items.want(generate, bool, "generate", "a boolean")
    metadata = body.get("metadata") or {}
    items.want(metadata, dict, "metadata", "an object of strings")
    if any(not isinstance(v, str) for v in metadata.values()):
        raise invalid_type("metadata", "an object of strings")
    parallel = body.get("parallel_tool_calls", True)
    items.want(parallel, bool, "parallel_tool_calls", "a boolean")
    if body.get("text") is not None:
        fmt = (items.want(body["text"], dict, "text", "an object").get("format") or {"type": "text"})
        if items.want(fmt, dict, "text.format", "an object").get("type", "text") != "text":
            raise unsupported("text.format.type", f"output format {fmt.get('type')!r} (only text)")
    if body.get("loopwire_replay") is not None:
        create.replay.CopyFrom(replay_output(body["loopwire_replay"]))
    return ParsedCreate(create, stream, store, generate, metadata, parallel, list(tools_json))


def _tool_choice(value: Any) -> None:
    """Only 'auto' (and 'none' / 'required' are not faked): the gateway does not constrain decoding."""
    if value is None or value == "auto":
        return
    if isinstance(value, str | dict):
        shown = value if isinstance(value, str) else value.get("type")
        raise unsupported("tool_choice", f"tool_choice {shown!r} (only 'auto': decoding is not constrained)")
    raise invalid_type("tool_choice", "a string or an object")


def _sampling(body: dict[str, Any], sampling: common_pb2.SamplingParams) -> None:
    for name, low, high in (("temperature", 0.0, 2.0), ("top_p", 0.0, 1.0)):
        value = body.get(name)
        if value is None:
            continue
        items.want(value, (int, float), name, "a number")
        if not math.isfinite(value) or not low <= value <= high:
            raise bad_request(f"Invalid '{name}': {value} is not in [{low:g}, {high:g}].", name, "invalid_value")
        setattr(sampling, name, float(value))
    limit = body.get("max_output_tokens")
    if limit is not None:
        items.want(limit, int, "max_output_tokens", "an integer")
        if limit < 1:
            raise bad_request(f"Invalid 'max_output_tokens': {limit} must be at least 1.", "max_output_tokens",
                              "invalid_value")
        sampling.max_output_tokens = min(limit, 2**31 - 1)


def replay_output(value: Any) -> common_pb2.ReplayOutput:
    items.want(value, dict, "loopwire_replay", "an object")
    items.check_keys(value, {"text", "function_calls"}, "loopwire_replay")
    out = common_pb2.ReplayOutput(text=items.want(value.get("text", ""), str, "loopwire_replay.text", "a string"))
    for i, call in enumerate(items.want(value.get("function_calls", []), list, "loopwire_replay.function_calls",
                                        "an array")):
        p = f"loopwire_replay.function_calls[{i}]"
        items.want(call, dict, p, "an object")
        out.function_calls.append(common_pb2.FunctionCall(
            call_id=items.want(call.get("call_id", ""), str, f"{p}.call_id", "a string"),
            name=items.want(call.get("name"), str, f"{p}.name", "a string"),
            arguments=items.want(call.get("arguments", "{}"), str, f"{p}.arguments", "a string"),
        ))
    return out
