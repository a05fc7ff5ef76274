"""The tools a request offers (Responses: function, custom, namespace and the hosted kinds;
Chat Completions: function) and its ``tool_choice``. How they reach the model: ../tools.py."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Tag
from pydantic_core import PydanticCustomError

from loopwire.api.request_models.fields import Strict, tagged_by

SEPARATOR = "."  # joins a namespace to its tools' names as the model writes them (tools.py)
# The tools OpenAI runs on its side: accepted, never offered to the model (tools.py).
NOT_OFFERED = frozenset({
    "web_search", "web_search_preview", "web_search_preview_2025_03_11", "file_search", "code_interpreter",
    "image_generation", "computer_use_preview", "computer", "mcp", "local_shell", "shell", "apply_patch",
    "tool_search",
})


def _tool_name(name: str) -> str:
    if not name or SEPARATOR in name:
        raise PydanticCustomError("invalid_value", f"a non-empty name without {SEPARATOR!r}, which joins a "
                                  "namespace to its tools")
    return name


ToolName = Annotated[str, AfterValidator(_tool_name)]


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
    tagged_by("type", "text", code="invalid_value", what="a custom tool's format type (expected 'text' or 'grammar')")]


class CustomTool(Strict):
    type: Literal["custom"]
    name: ToolName
    description: str | None = None
    format: CustomFormat | None = None
    defer_loading: bool | None = None


NamespaceMember = Annotated[
    Annotated[NamespacedFunction, Tag("type=function")] | Annotated[CustomTool, Tag("type=custom")],
    tagged_by("type", "function", code="unsupported_parameter", what="tool type in a namespace (only function and custom)")]


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
    tagged_by("type", "function", code="unsupported_parameter", alias=_tool_kind,
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
                      tagged_by("type", "function", code="unsupported_parameter", what="tool type (only function tools)")]


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
