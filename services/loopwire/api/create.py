"""The Responses API create body (HTTP ``POST /v1/responses`` and WebSocket ``response.create``)
as one gateway ``CreateResponse``.

A field is implemented, accepted and ignored (said in docs/openai-api.md), or refused: an
unknown field is a 400 ``unknown_parameter``, as OpenAI answers it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from loopwire.api import items, tools
from loopwire.api.errors import ApiError, bad_request, invalid_type, unsupported
from loopwire.v1 import common_pb2, gateway_pb2

IMPLEMENTED = {
    "model", "input", "instructions", "previous_response_id", "store", "stream", "tools", "tool_choice",
    "max_output_tokens", "temperature", "top_p", "metadata", "parallel_tool_calls", "text",
    "background",  # HTTP only, with store: the api process runs it in a task of its own (background.py)
    "presence_penalty", "frequency_penalty",  # 0 only: the engine has no penalties
    "top_logprobs",  # with include message.output_text.logprobs (logprobs_param); reasoning and include too
    "loopwire_replay",  # extension: replay a recorded assistant turn (tests, benchmarks)
}
# Accepted so that real clients (Codex, the Agents SDK) work; they change nothing here (the
# Response object echoes them as the specification asks).
IGNORED = {
    "user", "prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier", "stream_options",
    "include", "reasoning", "truncation", "store_options", "client_metadata",
    "max_tool_calls",  # counts calls of hosted tools, which are dropped here
}
WEBSOCKET_ONLY = {"type", "generate", "stream_id"}  # stream_id: the lane (websocket.py), read there


@dataclass
class ParsedCreate:
    create: gateway_pb2.CreateResponse
    stream: bool
    store: bool
    generate: bool
    metadata: dict[str, str] = field(default_factory=dict)
    parallel_tool_calls: bool = True
    tools_json: list[dict[str, Any]] = field(default_factory=list)
    # Echoed in the Response object as the client sent them (OpenAI's shapes).
    tool_choice: str | dict[str, str] = "auto"
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    # The other request fields the Response object echoes (Open Responses requires them all).
    echo: dict[str, Any] = field(default_factory=dict)
    # The request's input items as stored for ``GET /v1/responses/{id}/input_items``.
    input_json: list[dict[str, Any]] = field(default_factory=list)
    # Runs in a task of the api process, polled by GET /v1/responses/{id} (background.py).
    background: bool = False
    # Which offered tools are custom or namespaces (their calls' shapes), and the hosted tool
    # types that were not offered (tools.py).
    tool_kinds: tools.ToolKinds = field(default_factory=tools.ToolKinds)
    not_offered: list[str] = field(default_factory=list)


def parse_create(body: dict[str, Any], *, models: list[str], websocket: bool = False) -> ParsedCreate:
    allowed = IMPLEMENTED | IGNORED | (WEBSOCKET_ONLY if websocket else set())
    items.check_keys(body, allowed, "")
    background = body.get("background")
    background = background is not None and items.want(background, bool, "background", "a boolean")
    if background and websocket:
        raise unsupported("background", "background mode over a WebSocket (the connection runs its responses)")
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
    offered, tools_json, not_offered = tools.parse(body.get("tools") or [])
    create.tools.extend(offered)
    # A delta without tools inherits the conversation's: only the gateway knows them then.
    known = [t.name for t in create.tools] if create.tools or not previous else None
    choice, choice_json = tool_choice(body.get("tool_choice"), known)
    if choice is not None:
        create.tool_choice.CopyFrom(choice)
    _sampling(body, create.sampling)
    effort = reasoning_param(body.get("reasoning"))
    if effort in THINK_BUDGETS:
        create.sampling.reasoning_budget_tokens = THINK_BUDGETS[effort]
    if body.get("reasoning") is not None:  # a template that takes enable_thinking thinks unless told "none"
        create.sampling.enable_thinking = effort != "none"
    top = logprobs_param(body)
    if top is not None:
        create.sampling.top_logprobs = top
    store = body.get("store", True)
    items.want(store, bool, "store", "a boolean")
    create.no_store = not store
    if background and not store:  # polled by GET /v1/responses/{id}: it must be stored
        raise bad_request("Background mode requires 'store' to be true.", "background", "invalid_value")
    stream = body.get("stream", False)
    items.want(stream, bool, "stream", "a boolean")
    generate = body.get("generate", True)
    items.want(generate, bool, "generate", "a boolean")
    metadata = body.get("metadata") or {}
    items.want(metadata, dict, "metadata", "an object of strings")
    if any(not isinstance(v, str) for v in metadata.values()):
        raise invalid_type("metadata", "an object of strings")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None:
        create.parallel_tool_calls = items.want(parallel, bool, "parallel_tool_calls", "a boolean")
    text = {} if body.get("text") is None else items.want(body["text"], dict, "text", "an object")
    items.check_keys(text, {"format", "verbosity"}, "text")  # verbosity: accepted, ignored
    fmt = {"type": "text"} if text.get("format") is None else text["format"]
    text_format = output_format(fmt, "text.format", nested=False)
    if text_format is not None:
        create.text_format.CopyFrom(text_format)
    if body.get("loopwire_replay") is not None:
        create.replay.CopyFrom(replay_output(body["loopwire_replay"]))
    return ParsedCreate(create, stream, store, generate, metadata, parallel is not False, tools_json,
                        choice_json, {**text, "format": format_json(fmt)}, echo(body),
                        items.input_json(body.get("input", [])), background, tools.kinds(tools_json), not_offered)


def format_json(fmt: dict[str, Any]) -> dict[str, Any]:
    """``text.format`` as the Response object echoes it: a JSON Schema format with every field the
    specification requires (``description`` null and ``strict`` false when the request left them out)."""
    if fmt.get("type") != "json_schema":
        return fmt
    return {"type": "json_schema", "name": fmt["name"], "description": fmt.get("description"),
            "schema": fmt["schema"], "strict": fmt.get("strict") is True}


def echo(body: dict[str, Any]) -> dict[str, Any]:
    """The accepted-and-ignored fields as the Response object reports them: what the request
    said where it is only a label, what was really applied where it would change the output."""
    out: dict[str, Any] = {}
    for name in ("safety_identifier", "prompt_cache_key"):
        value = body.get(name)
        out[name] = None if value is None else items.want(value, str, name, "a string")
    for name, low, high in (("top_logprobs", 0, 20), ("max_tool_calls", 1, 2**31 - 1)):
        value = body.get(name)
        if value is not None:
            items.want(value, int, name, "an integer")
            if not low <= value <= high:
                raise bad_request(f"Invalid '{name}': {value} is not in [{low}, {high}].", name, "invalid_value")
        out[name] = value
    out["top_logprobs"] = logprobs_param(body) or 0  # what is produced: 0 when no logprobs were asked
    # A reasoning model's think block is returned as a reasoning item (never summarized); the effort
    # becomes a thinking budget (sampling.reasoning_budget_tokens, set by parse_create).
    out["reasoning"] = {"effort": reasoning_param(body.get("reasoning")), "summary": None}
    tier = body.get("service_tier")
    if tier is not None:
        items.want(tier, str, "service_tier", "a string")
    out["service_tier"] = "default"  # the only tier there is
    for name in ("presence_penalty", "frequency_penalty"):
        value = body.get(name)
        if value is None:
            out[name] = 0.0
            continue
        items.want(value, (int, float), name, "a number")
        if not math.isfinite(value) or not -2.0 <= value <= 2.0:
            raise bad_request(f"Invalid '{name}': {value} is not in [-2, 2].", name, "invalid_value")
        if value != 0:
            raise unsupported(name, f"a nonzero {name}")
        out[name] = 0.0
    return out


LOGPROBS_INCLUDE = "message.output_text.logprobs"


def logprobs_param(body: dict[str, Any]) -> int | None:
    """How many alternatives per output token the request asks for (None: no logprobs): asked by
    ``include: ["message.output_text.logprobs"]`` (with ``top_logprobs`` alternatives, 0 if not
    given) or by a ``top_logprobs`` above 0 alone."""
    top = body.get("top_logprobs")
    include = body.get("include") or []
    asked = isinstance(include, list) and LOGPROBS_INCLUDE in include
    if isinstance(top, int) and not isinstance(top, bool) and 0 <= top <= 20 and (asked or top > 0):
        return top
    return 0 if asked else None


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# Tokens of reasoning each effort allows before the think block's closer is forced (the gateway's
# reasoning_budget_tokens; "none" and "xhigh" set no budget: the model's own end of thinking).
THINK_BUDGETS = {"minimal": 256, "low": 1024, "medium": 4096, "high": 16384}
REASONING_SUMMARIES = ("auto", "concise", "detailed")


def reasoning_param(value: Any) -> str | None:
    """``reasoning`` checked: its ``effort`` (None when not given)."""
    if value is None:
        return None
    items.want(value, dict, "reasoning", "an object")
    items.check_keys(value, {"effort", "summary", "generate_summary"}, "reasoning")
    for name, allowed in (("effort", REASONING_EFFORTS), ("summary", REASONING_SUMMARIES),
                          ("generate_summary", REASONING_SUMMARIES)):
        given = value.get(name)
        if given is not None and not (isinstance(given, str) and given in allowed):
            raise bad_request(f"Invalid value for 'reasoning.{name}': {given!r} (expected one of "
                              f"{', '.join(map(repr, allowed))}).", f"reasoning.{name}", "invalid_value")
    effort = value.get("effort")
    return effort if isinstance(effort, str) else None


_MODES = {"auto": common_pb2.TOOL_CHOICE_MODE_UNSPECIFIED, "none": common_pb2.TOOL_CHOICE_MODE_NONE,
          "required": common_pb2.TOOL_CHOICE_MODE_REQUIRED}


def tool_choice(value: Any, tools: list[str] | None) -> tuple[common_pb2.ToolChoice | None, str | dict[str, str]]:
    """``tool_choice`` as the gateway's ToolChoice (None: auto, the gateway's default) and as the
    Responses API echoes it.

    A named function takes the Responses shape ``{"type": "function", "name"}`` or the Chat
    Completions one ``{"type": "function", "function": {"name"}}``. It is checked against
    ``tools`` here (when they are known) so the error names the request's field; the gateway,
    which builds the grammar, checks again.
    """
    if value is None:
        return None, "auto"
    if isinstance(value, str):
        if value not in _MODES:
            raise bad_request(f"Invalid value for 'tool_choice': {value!r} (expected 'auto', 'none', 'required' or "
                              "a function).", "tool_choice", "invalid_value")
        return (common_pb2.ToolChoice(mode=_MODES[value]) if value != "auto" else None), value
    items.want(value, dict, "tool_choice", "a string or an object")
    if value.get("type") == "custom":  # a custom tool is a function of one string to the model
        items.check_keys(value, {"type", "name"}, "tool_choice")
        name = items.want(value.get("name"), str, "tool_choice.name", "a string")
        if tools is not None and name not in tools:
            raise bad_request(f"Invalid value for 'tool_choice': custom tool {name!r} is not among the request's "
                              "tools.", "tool_choice", "invalid_value")
        return (common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_FUNCTION, function_name=name),
                {"type": "custom", "name": name})
    if value.get("type") != "function":
        raise unsupported("tool_choice.type", f"tool_choice type {value.get('type')!r} (only function and custom)")
    if "function" in value:
        items.check_keys(value, {"type", "function"}, "tool_choice")
        fn = items.want(value["function"], dict, "tool_choice.function", "an object")
        items.check_keys(fn, {"name"}, "tool_choice.function")
        name = items.want(fn.get("name"), str, "tool_choice.function.name", "a string")
    else:
        items.check_keys(value, {"type", "name"}, "tool_choice")
        name = items.want(value.get("name"), str, "tool_choice.name", "a string")
    if tools is not None and name not in tools:
        offered = ", ".join(repr(t) for t in tools) or "none"
        raise bad_request(f"Invalid value for 'tool_choice': function {name!r} is not among the request's tools "
                          f"({offered}).", "tool_choice", "invalid_value")
    return (common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_FUNCTION, function_name=name),
            {"type": "function", "name": name})


def output_format(value: Any, path: str, *, nested: bool) -> gateway_pb2.TextFormat | None:
    """``text.format`` (Responses) or ``response_format`` (Chat Completions, ``nested``: the schema
    under ``json_schema``) as the gateway's TextFormat; None for free text.

    The schema is checked against the JSON Schema meta-schema here, so a typo is a 400 that
    points into it; the gateway then compiles it into the grammar (and refuses what it cannot).
    """
    items.want(value, dict, path, "an object")
    kind = value.get("type")
    if kind in ("text", "json_object"):
        items.check_keys(value, {"type"}, path)
        return None if kind == "text" else gateway_pb2.TextFormat()
    if kind != "json_schema":
        raise bad_request(f"Invalid value for '{path}.type': {kind!r} (expected 'text', 'json_object' or "
                          "'json_schema').", f"{path}.type", "invalid_value")
    spec, p = value, path
    if nested:
        items.check_keys(value, {"type", "json_schema"}, path)
        spec, p = items.want(value.get("json_schema"), dict, f"{path}.json_schema", "an object"), f"{path}.json_schema"
    items.check_keys(spec, {"name", "schema", "description", "strict"} | (set() if nested else {"type"}), p)
    for key in ("name", "schema"):
        if spec.get(key) is None:
            raise bad_request(f"Missing required parameter: '{p}.{key}'.", f"{p}.{key}", "missing_required_parameter")
    name = items.want(spec["name"], str, f"{p}.name", "a string")
    schema = items.want(spec["schema"], dict, f"{p}.schema", "a JSON Schema object")
    items.want(spec.get("description") or "", str, f"{p}.description", "a string")
    strict = spec.get("strict")
    strict = strict is not None and items.want(strict, bool, f"{p}.strict", "a boolean")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        where = f"{p}.schema{e.json_path[1:]}"
        raise bad_request(f"Invalid JSON Schema in '{where}': {e.message}.", f"{p}.schema", "invalid_value") from None
    return gateway_pb2.TextFormat(name=name, json_schema=json.dumps(schema), strict=strict)


# The gateway's names of the fields filled above, as the request's (the first that prefixes it).
GATEWAY_PARAMS = {"tool_choice": "tool_choice", "text_format.json_schema": "text.format.schema",
                  "text_format": "text.format"}


def request_param(error: ApiError, names: dict[str, str]) -> ApiError:
    """``error`` with its param in the request's terms (the gateway names proto fields)."""
    param = error.param or ""
    for gateway_name, name in names.items():
        if param == gateway_name or param.startswith(gateway_name + "."):
            error.param = name
            break
    return error


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
            arguments=items.call_arguments(call.get("arguments", "{}"), f"{p}.arguments"),
        ))
    return out
