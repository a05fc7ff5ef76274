"""The OpenAI request bodies the api takes, as pydantic models, and the one place their
validation errors become OpenAI's ``param``/``code``.

Every object forbids unknown keys (``unknown_parameter``, as OpenAI answers them) and is strict
(no coercion: ``"1"`` is no integer, ``true`` no number). Input items, content parts, tools,
tool choices and formats are unions discriminated by their ``type`` (chat messages by their
``role``); a value of no known kind is refused naming that key. What the models cannot say
(a call's arguments nested past the shared JSON bound, a compaction made elsewhere, a JSON
Schema that is none) is said by validators that raise the OpenAI code itself as the error type.

The body reaches these models already parsed by ``items.json_object``, which bounds its nesting
(``common.json_limits``) and refuses values no later tier can hold.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import jsonschema
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from loopwire.api.errors import ApiError
from loopwire.common import json_limits

T = TypeVar("T")

SEPARATOR = "."  # joins a namespace to its tools' names as the model writes them (tools.py)
# A compaction item's ``encrypted_content`` made here: a version tag, then the summary text in
# base64url. Opaque to clients (as the specification has it); not a secret: it holds nothing the
# tenant could not send as a message, so it needs no key and any replica can read it.
COMPACTION_TAG = "lwc1."
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# The tools OpenAI runs on its side: accepted, never offered to the model (tools.py).
NOT_OFFERED = frozenset({
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "file_search", "code_interpreter",
    "image_generation", "computer_use_preview", "computer", "mcp", "local_shell", "shell", "apply_patch",
    "tool_search",
})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# -- validators that speak OpenAI's codes --------------------------------------------------------


def _bounded_json(text: str) -> str:
    """A call's ``arguments``: kept as they are (a model may write invalid JSON, and clients send it
    back); when it is JSON, the gateway parses it, so its nesting is bounded as every tier's."""
    if text.lstrip()[:1] in ("[", "{"):
        try:
            json_limits.loads(text)
        except json_limits.JsonTooDeep as e:
            raise PydanticCustomError("invalid_json", "JSON nested deeper than this server's limit of {limit} "
                                      "levels", {"limit": e.limit}) from None
        except ValueError:
            pass
    return text


def compaction_summary(content: str) -> str:
    """The summary a compaction item made here carries; another server's content cannot be read."""
    body = content.removeprefix(COMPACTION_TAG)
    try:
        if body == content:
            raise ValueError
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (ValueError, binascii.Error):
        raise PydanticCustomError("invalid_value", "not the content of a compaction made by this server "
                                  "(POST /v1/responses/compact)") from None


def _tool_name(name: str) -> str:
    if not name or SEPARATOR in name:
        raise PydanticCustomError("invalid_value", f"a non-empty name without {SEPARATOR!r}, which joins a "
                                  "namespace to its tools")
    return name


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Checked against the JSON Schema meta-schema, so a typo is a 400 that points into it; the
    gateway then compiles it into the grammar (and refuses what it cannot)."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise PydanticCustomError("invalid_schema", "{problem}", {"where": e.json_path[1:], "problem": e.message}) \
            from None
    return schema


def _stream_id(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,256}", value):
        raise PydanticCustomError("invalid_stream_id", "must be a non-empty string with at most 256 characters "
                                  "and may only contain letters, numbers, underscores, hyphens, and periods")
    return value


Arguments = Annotated[str, AfterValidator(_bounded_json)]
ToolName = Annotated[str, AfterValidator(_tool_name)]
JsonSchema = Annotated[dict[str, Any], AfterValidator(_json_schema)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
TopLogprobs = Annotated[int, Field(ge=0, le=20)]
MaxTokens = Annotated[int, Field(ge=1)]
StreamId = Annotated[str, AfterValidator(_stream_id)]


def _by(key: str, first: str, *, code: str, what: str, default: str | None = None,
        alias: Callable[[str], str] | None = None) -> Discriminator:
    """A union discriminated by ``value[key]`` (``default`` when absent). A value of no known kind
    is ``code`` at ``<path>.<key>`` (its error type says both: ``code@key``); one that is no object is handed to the member ``first``,
    whose model then says it expected an object. Tags are written ``key=value``, so a tag never
    reads as a key of the object when an error's location is resolved (``_param``)."""

    def tag(value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"{key}={first}"
        given = value.get(key, default)
        if not isinstance(given, str):
            return None
        return f"{key}={alias(given) if alias else given}"

    return Discriminator(tag, custom_error_type=f"{code}@{key}", custom_error_message=what)


def _shape(value: Any) -> str | None:
    """A ``string or array`` value's tag; anything else fits neither."""
    return "(string)" if isinstance(value, str) else "(array)" if isinstance(value, list) else None


def _string_or(expected: str) -> Discriminator:
    return Discriminator(_shape, custom_error_type="invalid_type", custom_error_message=f"expected {expected}")


# -- content parts -------------------------------------------------------------------------------


class TextPart(BaseModel):
    """A text part. Parts sent back carry what the server that wrote them added (annotations,
    logprobs, ...), so a part's other keys are ignored, not refused."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    type: Literal["input_text", "output_text", "text"]
    text: str


class RefusalPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    type: Literal["refusal"]
    refusal: str

    @property
    def text(self) -> str:
        return self.refusal


def _part_kind(kind: str) -> str:
    return "text" if kind in ("input_text", "output_text", "text") else kind


Part = Annotated[
    Annotated[TextPart, Tag("type=text")] | Annotated[RefusalPart, Tag("type=refusal")],
    _by("type", "text", code="unsupported_parameter", what="content part type (only text)", alias=_part_kind)]
Content = Annotated[Annotated[str, Tag("(string)")] | Annotated[list[Part], Tag("(array)")],
                    _string_or("a string or an array of content parts")]


class ReasoningText(Strict):
    type: Literal["reasoning_text"]
    text: str


ReasoningPart = Annotated[Annotated[ReasoningText, Tag("type=reasoning_text")],
                          _by("type", "reasoning_text", code="unsupported_parameter", what="reasoning content type (only "
                              "reasoning_text)")]


# -- tools ---------------------------------------------------------------------------------------


class FunctionTool(Strict):
    type: Literal["function"]
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None


class NamespacedFunction(FunctionTool):
    name: ToolName


class TextGrammar(Strict):
    type: Literal["text"]


class Grammar(Strict):
    type: Literal["grammar"]
    syntax: Literal["regex", "lark"]
    definition: str


CustomFormat = Annotated[
    Annotated[TextGrammar, Tag("type=text")] | Annotated[Grammar, Tag("type=grammar")],
    _by("type", "text", code="invalid_value", what="a custom tool's format type (expected 'text' or 'grammar')")]


class CustomTool(Strict):
    type: Literal["custom"]
    name: ToolName
    description: str | None = None
    format: CustomFormat | None = None
    defer_loading: bool | None = None


NamespaceMember = Annotated[
    Annotated[NamespacedFunction, Tag("type=function")] | Annotated[CustomTool, Tag("type=custom")],
    _by("type", "function", code="unsupported_parameter", what="tool type in a namespace (only function and custom)")]


class NamespaceTool(Strict):
    type: Literal["namespace"]
    name: ToolName
    description: str | None = None
    tools: list[NamespaceMember]


class HostedTool(BaseModel):
    """A tool OpenAI runs on its side: its settings are OpenAI's, and it is never offered here."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)
    type: str


def _tool_kind(kind: str) -> str:
    return "hosted" if kind in NOT_OFFERED else kind


Tool = Annotated[
    Annotated[FunctionTool, Tag("type=function")] | Annotated[CustomTool, Tag("type=custom")]
    | Annotated[NamespaceTool, Tag("type=namespace")] | Annotated[HostedTool, Tag("type=hosted")],
    _by("type", "function", code="unsupported_parameter", alias=_tool_kind,
        what=f"tool type (function, custom and namespace tools are offered; {', '.join(sorted(NOT_OFFERED))} "
             "are accepted and not offered)")]


class ChatFunction(Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(Strict):
    type: Literal["function"]
    function: ChatFunction


ChatToolU = Annotated[Annotated[ChatTool, Tag("type=function")],
                      _by("type", "function", code="unsupported_parameter", what="tool type (only function tools)")]


# -- tool choice ---------------------------------------------------------------------------------


class FunctionChoice(Strict):
    """``{"type": "function", "name"}`` (Responses) or ``{"type": "function", "function": {"name"}}``
    (Chat Completions)."""

    type: Literal["function"]
    name: str


class FunctionName(Strict):
    name: str


class ChatFunctionChoice(Strict):
    type: Literal["function"]
    function: FunctionName


class CustomChoice(Strict):
    type: Literal["custom"]
    name: str


def _choice_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "(string)"
    if not isinstance(value, dict):
        return "type=function"  # its model says it expected an object
    kind = value.get("type")
    if kind == "function" and "function" in value:
        return "type=chat_function"
    return f"type={kind}" if isinstance(kind, str) else "type=?"


ToolChoice = Annotated[
    Annotated[Literal["auto", "none", "required"], Tag("(string)")]
    | Annotated[FunctionChoice, Tag("type=function")] | Annotated[ChatFunctionChoice, Tag("type=chat_function")]
    | Annotated[CustomChoice, Tag("type=custom")],
    Discriminator(_choice_tag, custom_error_type="unsupported_parameter@type",
                  custom_error_message="tool_choice type (only function and custom)")]


# -- text formats --------------------------------------------------------------------------------


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
    _by("type", "text", code="invalid_value", what=_FORMAT_WHAT)]
ResponseFormat = Annotated[
    Annotated[TextFormatText, Tag("type=text")] | Annotated[TextFormatJsonObject, Tag("type=json_object")]
    | Annotated[ChatJsonSchema, Tag("type=json_schema")],
    _by("type", "text", code="invalid_value", what=_FORMAT_WHAT)]


class Text(Strict):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class Reasoning(Strict):
    effort: Literal[REASONING_EFFORTS] | None = None  # type: ignore[valid-type]
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


# -- Responses input items -----------------------------------------------------------------------


class Message(Strict):
    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: Content = ""
    id: str | None = None
    status: str | None = None
    # An assistant message's phase (Codex labels its preambles): a label, the transcript is the same.
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCall(Strict):
    type: Literal["function_call"]
    call_id: str
    name: str
    namespace: str | None = None
    arguments: Arguments = "{}"
    id: str | None = None
    status: str | None = None


class CustomToolCall(Strict):
    type: Literal["custom_tool_call"]
    call_id: str
    name: str
    namespace: str | None = None
    input: str = ""
    id: str | None = None
    status: str | None = None


class ToolOutput(Strict):
    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: str
    output: Content = ""
    id: str | None = None
    status: str | None = None


class Compaction(Strict):
    type: Literal["compaction"]
    encrypted_content: Annotated[str, AfterValidator(compaction_summary)]
    id: str | None = None
    created_by: str | None = None


class ReasoningItem(Strict):
    type: Literal["reasoning"]
    summary: list[Any] = []
    content: list[ReasoningPart] | None = None
    encrypted_content: str | None = None
    id: str | None = None
    status: str | None = None


class CompactionTrigger(Strict):
    """Compaction v2: at the end of a create request's input, it asks for the conversation
    compacted into one ``compaction`` item instead of a turn (compact.py)."""

    type: Literal["compaction_trigger"]
    id: str | None = None


class AdditionalTools(Strict):
    """Responses Lite: tools the request adds where the item stands (Codex sends its tools so,
    namespaces included); they join the request's ``tools``."""

    type: Literal["additional_tools"]
    tools: list[Tool]
    id: str | None = None


def _item_kind(kind: str) -> str:
    return "function_call_output" if kind == "custom_tool_call_output" else kind


InputItem = Annotated[
    Annotated[Message, Tag("type=message")] | Annotated[FunctionCall, Tag("type=function_call")]
    | Annotated[CustomToolCall, Tag("type=custom_tool_call")]
    | Annotated[ToolOutput, Tag("type=function_call_output")]
    | Annotated[Compaction, Tag("type=compaction")] | Annotated[ReasoningItem, Tag("type=reasoning")]
    | Annotated[CompactionTrigger, Tag("type=compaction_trigger")]
    | Annotated[AdditionalTools, Tag("type=additional_tools")],
    _by("type", "message", code="unsupported_parameter", what="input item type", default="message",
        alias=_item_kind)]
Input = Annotated[Annotated[str, Tag("(string)")] | Annotated[list[InputItem], Tag("(array)")],
                  _string_or("a string or an array of input items")]
INPUT: TypeAdapter[str | list[Any]] = TypeAdapter(Input)


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
    _by("role", "message", code="invalid_value", what="a message role", default="",
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
                    _string_or("a string or an array of strings")] | None = None
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


# -- errors --------------------------------------------------------------------------------------

_EXPECTED = {"string_type": "a string", "bool_type": "a boolean", "int_type": "an integer", "float_type": "a number",
             "list_type": "an array", "dict_type": "an object", "model_type": "an object",
             "model_attributes_type": "an object"}
# Errors whose type is an OpenAI code already (raised by the validators above).
_CODES = {"invalid_json", "invalid_value", "unsupported_parameter", "invalid_stream_id"}


def validate(model: type[T] | TypeAdapter[T], value: Any, prefix: str = "") -> T:
    """``value`` as ``model``; its first problem as the OpenAI error naming where it is (under
    ``prefix``, the request path of ``value``)."""
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(value)
        return model.model_validate(value)  # type: ignore[attr-defined,no-any-return]
    except ValidationError as e:
        raise api_error(e, value, prefix) from None


def api_error(e: ValidationError, value: Any, prefix: str = "") -> ApiError:
    """The one mapping of pydantic's errors to OpenAI's: an unknown key first (as each object's keys
    were checked before its values), then the first error; its location as the request's path."""
    errors = e.errors(include_url=False)
    first = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    kind = first["type"]
    path = _param(first["loc"], value, prefix, missing=kind == "missing")
    if "@" in kind:  # a discriminated union's: ``code@key`` (``_by``)
        return _union_error(first, value, path)
    if kind == "extra_forbidden":
        return ApiError(400, f"Unknown parameter: '{path}'.", param=path, code="unknown_parameter")
    if kind == "missing":
        return ApiError(400, f"Missing required parameter: '{path}'.", param=path, code="missing_required_parameter")
    if kind in _EXPECTED or kind == "invalid_type":
        expected = _EXPECTED.get(kind) or first["msg"].removeprefix("expected ")
        return ApiError(400, f"Invalid type for '{path}': expected {expected}.", param=path, code="invalid_type")
    if kind == "invalid_schema":
        where = f"{path}{first['ctx']['where']}"
        return ApiError(400, f"Invalid JSON Schema in '{where}': {first['msg']}.", param=path, code="invalid_value")
    if kind == "invalid_json":
        return ApiError(400, f"'{path}': {first['msg']}", param=path, code="invalid_json")
    code = kind if kind in _CODES else "invalid_value"
    given = first.get("input")
    shown = f" {given!r}" if isinstance(given, str | int | float | bool) else ""
    return ApiError(400, f"Invalid value for '{path}'{shown}: {first['msg']}.", param=path, code=code)


def _union_error(first: Any, value: Any, path: str | None) -> ApiError:
    """A value of no kind its union knows: named by its discriminating key (``input[0].type``),
    or by the union's own path when it is not even an object."""
    code, key = first["type"].split("@")
    node = _resolve(first["loc"], value)
    if not isinstance(node, dict):
        return ApiError(400, f"Invalid type for '{path}': expected an object.", param=path, code="invalid_type")
    param = f"{path}.{key}" if path else key
    given = node.get(key)
    if code == "unsupported_parameter":
        return ApiError(400, f"'{param}': {first['msg']} {given!r} is not supported by loopwire.", param=param,
                        code="unsupported_parameter")
    return ApiError(400, f"Invalid value for '{param}': {given!r} ({first['msg']}).", param=param,
                    code="invalid_value")


def _param(loc: tuple[int | str, ...], value: Any, prefix: str, *, missing: bool) -> str | None:
    """An error's location as the request's path (``input[2].content[0].text``): the steps that
    are keys and indexes of the value; the others are the union tags pydantic adds (left out). A
    missing key is named though it is not in the value."""
    out, node = prefix, value
    for i, step in enumerate(loc):
        if isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            out, node = f"{out}[{step}]", node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            out, node = f"{out}.{step}" if out else step, node[step]
        elif missing and i == len(loc) - 1 and isinstance(node, dict):
            out = f"{out}.{step}" if out else str(step)
    return out or None


def _resolve(loc: tuple[int | str, ...], value: Any) -> Any:
    node = value
    for step in loc:
        if isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            node = node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            node = node[step]
    return node
