"""A Responses request's ``input``: content parts and the input items (messages, calls and
their outputs, reasoning, compaction, and the Responses Lite and compaction v2 items). How they
become loopwire items: ../items.py."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Tag, TypeAdapter
from pydantic_core import PydanticCustomError

from loopwire.api.request_models.fields import Arguments, Strict, string_or, tagged_by
from loopwire.api.request_models.tools import Tool

# A compaction item's ``encrypted_content`` made here: a version tag, then the summary text in
# base64url. Opaque to clients (as the specification has it); not a secret: it holds nothing the
# tenant could not send as a message, so it needs no key and any replica can read it.
COMPACTION_TAG = "lwc1."


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
    tagged_by("type", "text", code="unsupported_parameter", what="content part type (only text)", alias=_part_kind)]
Content = Annotated[Annotated[str, Tag("(string)")] | Annotated[list[Part], Tag("(array)")],
                    string_or("a string or an array of content parts")]


class ReasoningText(Strict):
    type: Literal["reasoning_text"]
    text: str


ReasoningPart = Annotated[Annotated[ReasoningText, Tag("type=reasoning_text")],
                          tagged_by("type", "reasoning_text", code="unsupported_parameter", what="reasoning content type (only "
                              "reasoning_text)")]


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
    tagged_by("type", "message", code="unsupported_parameter", what="input item type", default="message",
        alias=_item_kind)]
Input = Annotated[Annotated[str, Tag("(string)")] | Annotated[list[InputItem], Tag("(array)")],
                  string_or("a string or an array of input items")]
INPUT: TypeAdapter[str | list[Any]] = TypeAdapter(Input)
