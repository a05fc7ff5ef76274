"""The Responses API create body (HTTP ``POST /v1/responses`` and WebSocket ``response.create``)
as one gateway ``CreateResponse``.

A field is implemented, accepted and ignored (said in docs/openai-api.md), or refused: the
body's models (``request_models``) say which, and refuse an unknown field as OpenAI does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from loopwire.api import items, tool_calls, tools
from loopwire.api.errors import ApiError, bad_request, unsupported
from loopwire.api.request_models.bodies import (
    ChatJsonSchema,
    Conversation,
    CreateBody,
    Reasoning,
    Replay,
    SocketCreateBody,
    Text,
    TextFormatJsonObject,
    TextFormatJsonSchema,
    TextFormatText,
)
from loopwire.api.request_models.input_items import AdditionalTools, CompactionTrigger
from loopwire.api.request_models.tools import ChatFunctionChoice, CustomChoice, FunctionChoice
from loopwire.api.request_models.validation import validate
from loopwire.v1 import common_pb2, gateway_pb2


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
    tool_kinds: tool_calls.ToolKinds = field(default_factory=tool_calls.ToolKinds)
    not_offered: list[str] = field(default_factory=list)
    # Compaction v2: the input ends with a ``compaction_trigger`` item (compact.compaction_turn).
    compaction_trigger: bool = False


def parse_create(body: dict[str, Any], *, models: list[str], websocket: bool = False,
                 schema: type[Conversation] | None = None, context_length: int = 0) -> ParsedCreate:
    """A Responses body (``schema``: which one; a create request's by default) as the gateway's
    CreateResponse and what the Response object echoes; ``context_length``: the served model's
    window (0: unknown), which ``max_output_tokens`` must fit."""
    if schema is None:
        schema = SocketCreateBody if websocket else CreateBody
    given = validate(schema, body)
    # A compact or count body's fields are a create body's: the rest take their defaults.
    req = given if isinstance(given, CreateBody) else CreateBody.model_construct(**dict(given))
    background = req.background is True
    if background and websocket:
        raise unsupported("background", "background mode over a WebSocket (the connection runs its responses)")
    if models and req.model not in models:
        raise ApiError(404, f"The model '{req.model}' does not exist; this server serves {', '.join(models)}.",
                       param="model", code="model_not_found")
    create = gateway_pb2.CreateResponse(model=req.model, previous_response_id=req.previous_response_id or "",
                                        instructions=req.instructions or "")
    create.input.extend(items.input_items(req.input))
    offered, tools_json, not_offered = tools.parse(_sent_tools(req))
    create.tools.extend(offered)
    # A delta without tools inherits the conversation's: only the gateway knows them then.
    known = [t.name for t in create.tools] if create.tools or not req.previous_response_id else None
    choice, choice_json = tool_choice(req.tool_choice, known)
    if choice is not None:
        create.tool_choice.CopyFrom(choice)
    sampling(create.sampling, req.temperature, req.top_p, req.max_output_tokens, "max_output_tokens", context_length)
    effort = None if req.reasoning is None else req.reasoning.effort
    if effort in THINK_BUDGETS:
        create.sampling.reasoning_budget_tokens = THINK_BUDGETS[effort]
    if req.reasoning is not None:  # a template that takes enable_thinking thinks unless told "none"
        create.sampling.enable_thinking = effort != "none"
    top = logprobs_param(req)
    if top is not None:
        create.sampling.top_logprobs = top
    store = req.store is not False
    create.no_store = not store
    if background and not store:  # polled by GET /v1/responses/{id}: it must be stored
        raise bad_request("Background mode requires 'store' to be true.", "background", "invalid_value")
    metadata = req.metadata or {}
    if req.parallel_tool_calls is not None:
        create.parallel_tool_calls = req.parallel_tool_calls
    text = req.text or Text()
    fmt = text.format or TextFormatText(type="text")
    text_format = output_format(fmt)
    if text_format is not None:
        create.text_format.CopyFrom(text_format)
    if req.loopwire_replay is not None:
        create.replay.CopyFrom(replay_output(req.loopwire_replay))
    text_json = {} if text.verbosity is None else {"verbosity": text.verbosity}
    generate = not isinstance(req, SocketCreateBody) or req.generate is not False
    trigger = _compaction_trigger(req, background)
    return ParsedCreate(create, req.stream is True, store, generate, metadata, req.parallel_tool_calls is not False,
                        tools_json, choice_json, {**text_json, "format": format_json(fmt)}, echo(req),
                        items.input_json(body.get("input", [])), background, tool_calls.kinds(tools_json), not_offered,
                        trigger)


def _sent_tools(req: CreateBody) -> list[tuple[str, Any]]:
    """The request's tools, each with its path in the request. Responses Lite: the tools an
    ``additional_tools`` input item adds join the request's."""
    sent: list[tuple[str, Any]] = [(f"tools[{i}]", t) for i, t in enumerate(req.tools or [])]
    for k, item in enumerate(req.input if isinstance(req.input, list) else []):
        if isinstance(item, AdditionalTools):
            sent += [(f"input[{k}].tools[{j}]", t) for j, t in enumerate(item.tools)]
    return sent


def _compaction_trigger(req: CreateBody, background: bool) -> bool:
    """Whether the input ends with a ``compaction_trigger`` item (compaction v2); one anywhere
    else, or more than one, or one in background mode is refused."""
    triggers = [k for k, item in enumerate(req.input if isinstance(req.input, list) else [])
                if isinstance(item, CompactionTrigger)]
    if triggers and triggers != [len(req.input) - 1]:
        param = f"input[{triggers[0]}]"
        raise bad_request(f"Invalid value for '{param}': a compaction_trigger item ends the input (once).", param,
                          "invalid_value")
    if triggers and background:
        raise unsupported("background", "background mode with a compaction_trigger item")
    return bool(triggers)


def format_json(fmt: TextFormatText | TextFormatJsonObject | TextFormatJsonSchema) -> dict[str, Any]:
    """``text.format`` as the Response object echoes it: a JSON Schema format with every field the
    specification requires (``description`` null and ``strict`` false when the request left them out)."""
    if not isinstance(fmt, TextFormatJsonSchema):
        return {"type": fmt.type}
    return {"type": "json_schema", "name": fmt.name, "description": fmt.description, "schema": fmt.schema_,
            "strict": fmt.strict is True}


def echo(req: CreateBody) -> dict[str, Any]:
    """The accepted-and-ignored fields as the Response object reports them: what the request
    said where it is only a label, what was really applied where it would change the output."""
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise unsupported(name, f"a nonzero {name}")
    return {
        "safety_identifier": req.safety_identifier, "prompt_cache_key": req.prompt_cache_key,
        "max_tool_calls": req.max_tool_calls,
        "top_logprobs": logprobs_param(req) or 0,  # what is produced: 0 when no logprobs were asked
        # A reasoning model's think block is returned as a reasoning item (never summarized); the
        # effort becomes a thinking budget (sampling.reasoning_budget_tokens, set by parse_create).
        "reasoning": {"effort": _echoed_effort(req.reasoning), "summary": None},
        "service_tier": "default",  # the only tier there is
        "presence_penalty": 0.0, "frequency_penalty": 0.0,
    }


def _echoed_effort(reasoning: Reasoning | None) -> str | None:
    effort = None if reasoning is None else reasoning.effort
    return ECHOED_EFFORT.get(effort, effort) if isinstance(effort, str) else None


LOGPROBS_INCLUDE = "message.output_text.logprobs"


def logprobs_param(req: CreateBody) -> int | None:
    """How many alternatives per output token the request asks for (None: no logprobs): asked by
    ``include: ["message.output_text.logprobs"]`` (with ``top_logprobs`` alternatives, 0 if not
    given) or by a ``top_logprobs`` above 0 alone."""
    asked = LOGPROBS_INCLUDE in (req.include or [])
    top = req.top_logprobs
    if top is not None and (asked or top > 0):
        return top
    return 0 if asked else None


# Tokens of reasoning each effort allows before the think block's closer is forced (the gateway's
# reasoning_budget_tokens; "none" and "xhigh" set no budget: the model's own end of thinking).
THINK_BUDGETS = {"minimal": 256, "low": 1024, "medium": 4096, "high": 16384}
# Efforts OpenAI takes that the Open Responses specification's enumeration lacks, echoed as its
# nearest value (the budget applied is still the asked effort's).
ECHOED_EFFORT = {"minimal": "low"}

_MODES = {"auto": common_pb2.TOOL_CHOICE_MODE_UNSPECIFIED, "none": common_pb2.TOOL_CHOICE_MODE_NONE,
          "required": common_pb2.TOOL_CHOICE_MODE_REQUIRED}
Choice = str | FunctionChoice | ChatFunctionChoice | CustomChoice


def tool_choice(value: Choice | None, tools: list[str] | None) -> tuple[common_pb2.ToolChoice | None,
                                                                        str | dict[str, str]]:
    """``tool_choice`` as the gateway's ToolChoice (None: auto, the gateway's default) and as the
    Responses API echoes it.

    A named function takes the Responses shape ``{"type": "function", "name"}`` or the Chat
    Completions one ``{"type": "function", "function": {"name"}}``; a custom tool is a function
    of one string to the model. It is checked against ``tools`` here (when they are known) so the
    error names the request's field; the gateway, which builds the grammar, checks again.
    """
    if value is None:
        return None, "auto"
    if isinstance(value, str):
        return (common_pb2.ToolChoice(mode=_MODES[value]) if value != "auto" else None), value
    name = value.function.name if isinstance(value, ChatFunctionChoice) else value.name
    kind = "custom" if isinstance(value, CustomChoice) else "function"
    if tools is not None and name not in tools:
        offered = ", ".join(repr(t) for t in tools) or "none"
        what = f"custom tool {name!r}" if kind == "custom" else f"function {name!r}"
        raise bad_request(f"Invalid value for 'tool_choice': {what} is not among the request's tools ({offered}).",
                          "tool_choice", "invalid_value")
    return (common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_FUNCTION, function_name=name),
            {"type": kind, "name": name})


def output_format(value: Any) -> gateway_pb2.TextFormat | None:
    """``text.format`` (Responses) or ``response_format`` (Chat Completions: the schema under
    ``json_schema``) as the gateway's TextFormat; None for free text. The schema was checked
    against the JSON Schema meta-schema by its model; the gateway compiles it into the grammar
    (and refuses what it cannot)."""
    if isinstance(value, TextFormatText):
        return None
    if isinstance(value, TextFormatJsonObject):
        return gateway_pb2.TextFormat()
    spec = value.json_schema if isinstance(value, ChatJsonSchema) else value
    return gateway_pb2.TextFormat(name=spec.name, json_schema=json.dumps(spec.schema_), strict=spec.strict is True)


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


# What an omitted temperature and top_p mean, as the API defines them: sampling, never greedy
# unless asked (temperature 0). A model that ships generation defaults (GGUF general.sampling.*)
# would set its own here; the bundled SmolLM2 ships none.
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0


def sampling(out: common_pb2.SamplingParams, temperature: float | None, top_p: float | None, limit: int | None,
             limit_param: str, context_length: int) -> None:
    """The request's sampling as the gateway's: omitted values take the API's defaults (the
    gateway's 0 would mean greedy), and an output limit that cannot fit the window is a 400
    naming it (the gateway would cap it silently, as its gRPC clients expect)."""
    out.temperature = DEFAULT_TEMPERATURE if temperature is None else temperature
    out.top_p = DEFAULT_TOP_P if top_p is None else top_p
    if limit is None:
        return
    if context_length and limit >= context_length:
        raise bad_request(f"Invalid '{limit_param}': {limit} output tokens cannot fit the model's context window of "
                          f"{context_length} tokens (with the prompt's at least one token, at most "
                          f"{context_length - 1}).", limit_param, "invalid_value")
    out.max_output_tokens = min(limit, 2**31 - 1)


def replay_output(replay: Replay) -> common_pb2.ReplayOutput:
    return common_pb2.ReplayOutput(text=replay.text, function_calls=[
        common_pb2.FunctionCall(call_id=call.call_id, name=call.name, arguments=call.arguments)
        for call in replay.function_calls])
