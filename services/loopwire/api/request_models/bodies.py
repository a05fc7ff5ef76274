"""The request bodies: the Responses ones (create, count, compact, and a WebSocket create)
and Chat Completions', with the text formats and reasoning settings they carry."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import jsonschema
from pydantic import AfterValidator, Field, Tag
from pydantic_core import PydanticCustomError

from loopwire.api.request_models.fields import (
    Arguments,
    MaxTokens,
    Penalty,
    Strict,
    Temperature,
    TopLogprobs,
    TopP,
    string_or,
    tagged_by,
)
from loopwire.api.request_models.input_items import Content, Input
from loopwire.api.request_models.tools import ChatToolU, Tool, ToolChoice

REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Checked against the JSON Schema meta-schema, so a typo is a 400 that points into it; the
    gateway then compiles it into the grammar (and refuses what it cannot)."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise PydanticCustomError("invalid_schema", "{problem}", {"where": e.json_path[1:], "problem": e.message}) \
            from None
    return schema


JsonSchema = Annotated[dict[str, Any], AfterValidator(_json_schema)]


class TextFormatText(Strict):
    type: Literal["text"]


class TextFormatJsonObject(Strict):
    type: Literal["json_object"]


class JsonSchemaSpec(Strict):
    name: str
    schema_: JsonSchema = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextFormatJsonSchema(JsonSchemaSpec):
    type: Literal["json_schema"]


class ChatJsonSchema(Strict):
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


_FORMAT_WHAT = "a format type (expected 'text', 'json_object' or 'json_schema')"
TextFormat = Annotated[
    Annotated[TextFormatText, Tag("type=text")] | Annotated[TextFormatJsonObject, Tag("type=json_object")]
    | Annotated[TextFormatJsonSchema, Tag("type=json_schema")],
    tagged_by("type", "text", code="invalid_value", what=_FORMAT_WHAT)]
ResponseFormat = Annotated[
    Annotated[TextFormatText, Tag("type=text")] | Annotated[TextFormatJsonObject, Tag("type=json_object")]
    | Annotated[ChatJsonSchema, Tag("type=json_schema")],
    tagged_by("type", "text", code="invalid_value", what=_FORMAT_WHAT)]


class Text(Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class Reasoning(Strict):
    effort: Literal[REASONING_EFFORTS] | None = None  # type: ignore[valid-type]
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


# -- the extension that replays a recorded turn --------------------------------------------------


class ReplayCall(Strict):
    call_id: str = ""
    name: str
    arguments: Arguments = "{}"


class Replay(Strict):
    text: str = ""
    function_calls: list[ReplayCall] = []


# -- Responses bodies ----------------------------------------------------------------------------


class Conversation(Strict):
    """The fields every Responses body shares (``/v1/responses/compact`` takes these and ``store``)."""

    model: str
    input: Input = []
    previous_response_id: str | None = None
    instructions: str | None = None
    tools: list[Tool] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: Reasoning | None = None
    text: Text | None = None
    prompt_cache_key: str | None = None
    loopwire_replay: Replay | None = None  # extension: replay a recorded assistant turn (tests, benchmarks)


class CompactBody(Conversation):
    store: bool | None = None


class CountBody(Conversation):
    """``/v1/responses/input_tokens``: a create request without what only a run means."""

    tool_choice: ToolChoice | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    metadata: dict[str, str] | None = None
    presence_penalty: Penalty | None = None  # 0 only: the engine has no penalties
    frequency_penalty: Penalty | None = None
    top_logprobs: TopLogprobs | None = None
    include: list[str] | None = None
    # Accepted so that real clients (Codex, the Agents SDK) work; they change nothing here (the
    # Response object echoes them as the specification asks).
    user: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    store_options: Any = None
    client_metadata: Any = None
    max_tool_calls: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None  # hosted tools' calls: none here


class CreateBody(CountBody):
    """``POST /v1/responses``."""

    store: bool | None = None
    stream: bool | None = None
    background: bool | None = None  # HTTP only, with store: run in a task of the api process (background.py)


class SocketCreateBody(CreateBody):
    """A WebSocket-mode ``response.create`` (its ``stream_id`` names the lane: websocket.py)."""

    type: Literal["response.create"] = "response.create"
    generate: bool | None = None


# -- Chat Completions ----------------------------------------------------------------------------


class ChatCallFunction(Strict):
    name: str
    arguments: Arguments = "{}"


class ChatToolCall(Strict):
    id: str
    type: Literal["function"] = "function"
    function: ChatCallFunction
    index: int | None = None  # what a client accumulating streamed deltas keeps


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant"]
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    refusal: str | None = None


class ChatToolMessage(Strict):
    role: Literal["tool"]
    tool_call_id: str
    content: Content | None = None
    name: str | None = None


ChatMessageU = Annotated[
    Annotated[ChatMessage, Tag("role=message")] | Annotated[ChatToolMessage, Tag("role=tool")],
    tagged_by("role", "message", code="invalid_value", what="a message role", default="",
        alias=lambda role: "tool" if role == "tool" else "message")]


class StreamOptions(Strict):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class ChatBody(Strict):
    """``POST /v1/chat/completions``."""

    model: str
    messages: Annotated[list[ChatMessageU], Field(min_length=1)]
    tools: list[ChatToolU] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    max_tokens: MaxTokens | None = None
    max_completion_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    stop: Annotated[Annotated[str, Tag("(string)")] | Annotated[list[str], Tag("(array)")],
                    string_or("a string or an array of strings")] | None = None
    seed: int | None = None
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    reasoning_effort: Literal[REASONING_EFFORTS] | None = None  # type: ignore[valid-type]
    # Accepted and ignored (penalties: the engine has none).
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    loopwire_replay: Replay | None = None
