"""OpenAI JSON <-> loopwire protobuf: input items, tools, output items, usage.

Only the shape changes here; what the items mean (rendering, tokenizing, call-id checks) is
the gateway's. The requests' shapes are checked by their models (``request_models``) first.
"""

from __future__ import annotations

import base64
import json
import math
import secrets
from typing import Any

from pydantic_core import PydanticCustomError

from loopwire.api.errors import ApiError, bad_request
from loopwire.api.request_models.bodies import ChatMessage, ChatToolMessage
from loopwire.api.request_models.input_items import (
    COMPACTION_TAG,
    INPUT,
    AdditionalTools,
    Compaction,
    CompactionTrigger,
    CustomToolCall,
    FunctionCall,
    Message,
    ReasoningItem,
    RefusalPart,
    TextPart,
    ToolOutput,
)
from loopwire.api.request_models.input_items import (
    compaction_summary as checked_summary,
)
from loopwire.api.request_models.tools import ChatFunction, FunctionTool
from loopwire.api.request_models.validation import validate
from loopwire.api.tool_calls import ToolKinds, call_item, call_name, custom_arguments
from loopwire.common import json_limits
from loopwire.v1 import common_pb2

ROLES = {
    "system": common_pb2.ROLE_SYSTEM,
    "developer": common_pb2.ROLE_DEVELOPER,
    "user": common_pb2.ROLE_USER,
    "assistant": common_pb2.ROLE_ASSISTANT,
}
# The think markers of reasoning models (Qwen3, DeepSeek-R1): output that opens with a think block
# has its reasoning returned as a ``reasoning`` item, and a reasoning item sent back is rendered
# into its assistant turn between them again, as the model wrote it (so the prefix stays cached).
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Between the closer and the answer, as such models write it (the answer is returned without it).
THINK_GAP = "\n\n"
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
              "compaction": "cmp", "custom_tool_call": "ctc", "custom_tool_call_output": "ctco"}


def text_item(role: int, text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=role, content=[common_pb2.ContentPart(text=text)]))  # type: ignore[arg-type]


def _parts(content: str | list[TextPart | RefusalPart] | None) -> list[common_pb2.ContentPart]:
    if content is None:
        return []
    if isinstance(content, str):
        return [common_pb2.ContentPart(text=content)]
    return [common_pb2.ContentPart(text=part.text) for part in content]


def _output_text(output: str | list[TextPart | RefusalPart]) -> str:
    return output if isinstance(output, str) else "".join(part.text for part in output)


def response_input(value: Any) -> list[common_pb2.Item]:
    """The Responses API ``input`` (a string or a list of items, as sent or as stored) as loopwire
    items; a problem is the OpenAI error naming its path under ``input``."""
    return input_items(validate(INPUT, value, "input"))


def input_items(value: str | list[Any]) -> list[common_pb2.Item]:
    """A validated ``input`` (``request_models.input_items.Input``) as loopwire items. The items
    that are no turn of the conversation (``additional_tools``, ``compaction_trigger``) are the caller's."""
    if isinstance(value, str):
        return [text_item(common_pb2.ROLE_USER, value)]
    items: list[common_pb2.Item] = []
    think: str | None = None  # a reasoning item's block, waiting for the assistant turn it opens
    for raw in value:
        if isinstance(raw, ReasoningItem):
            block = _reasoning_block(raw)
            if block is not None:
                think = block if think is None else think + block
            continue
        if isinstance(raw, AdditionalTools | CompactionTrigger):
            continue
        think_prefix = ""  # the block, for the assistant message being read
        if think is not None:
            if isinstance(raw, Message) and raw.role == "assistant":
                think_prefix = think
            else:  # the turn was reasoning alone (or its calls): the block is its text
                items.append(text_item(common_pb2.ROLE_ASSISTANT, think))
            think = None
        item = _turn_item(raw, think_prefix)
        if item is not None:
            items.append(item)
    if think is not None:
        items.append(text_item(common_pb2.ROLE_ASSISTANT, think))
    return items


def _turn_item(raw: Any, think_prefix: str) -> common_pb2.Item | None:
    """One input item that is a turn of the conversation as a loopwire item; an assistant message
    opens with ``think_prefix``, the think block of the reasoning items before it."""
    if isinstance(raw, Message):
        parts = _parts(raw.content)
        if think_prefix:
            if not parts:
                parts.append(common_pb2.ContentPart(text=""))
            parts[0].text = think_prefix + (THINK_GAP + parts[0].text if parts[0].text else "")
        return common_pb2.Item(message=common_pb2.Message(role=ROLES[raw.role], content=parts))  # type: ignore[arg-type]
    if isinstance(raw, FunctionCall):
        return common_pb2.Item(function_call=common_pb2.FunctionCall(
            call_id=raw.call_id, name=call_name(raw.name, raw.namespace), arguments=raw.arguments))
    if isinstance(raw, CustomToolCall):
        return common_pb2.Item(function_call=common_pb2.FunctionCall(
            call_id=raw.call_id, name=call_name(raw.name, raw.namespace), arguments=custom_arguments(raw.input)))
    if isinstance(raw, Compaction):  # its content, validated, is the summary it carries
        return common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=raw.encrypted_content))
    if isinstance(raw, ToolOutput):
        return common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(
            call_id=raw.call_id, output=_output_text(raw.output)))
    return None


def compaction_content(summary: str) -> str:
    return COMPACTION_TAG + base64.urlsafe_b64encode(summary.encode("utf-8")).decode("ascii").rstrip("=")


def compaction_summary(content: str) -> str:
    """The summary a compaction item made here carries (ValueError: not one made here)."""
    try:
        return checked_summary(content)
    except PydanticCustomError as e:
        raise ValueError(str(e)) from None


def _reasoning_block(raw: ReasoningItem) -> str | None:
    """A reasoning input item as the think block the model wrote (None: it carries no reasoning
    text, only a summary or encrypted content, which another model wrote: dropped)."""
    texts = [part.text for part in raw.content or []]
    return THINK_OPEN + "".join(texts) + THINK_CLOSE if texts else None


def split_think(text: str) -> tuple[str | None, str, bool]:
    """An assistant text as (reasoning, answer, closed): the reasoning between the think markers
    when the text opens with a think block (None otherwise), the answer after it without the
    whitespace that follows the closer."""
    body = text.lstrip()
    if not body.startswith(THINK_OPEN):
        return None, text, True
    body = body[len(THINK_OPEN):]
    at = body.find(THINK_CLOSE)
    if at < 0:
        return body, "", False
    return body[:at], body[at + len(THINK_CLOSE):].lstrip(), True


# Input items that are no turn of the conversation: never stored nor listed as input items.
NOT_CONVERSATION = {"additional_tools", "compaction_trigger"}


def input_json(value: Any) -> list[dict[str, Any]]:
    """An already validated ``input`` as the specification's input items, as ``input_items`` lists
    them: a string becomes a user message, string content becomes a part, each item gets an id."""
    raw_items = [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else value
    out: list[dict[str, Any]] = []
    for raw in raw_items if isinstance(raw_items, list) else []:
        if not isinstance(raw, dict) or raw.get("type") in NOT_CONVERSATION:
            continue
        item = {"type": "message", **raw}
        kind = item["type"] if isinstance(item["type"], str) else "item"
        if not isinstance(item.get("id"), str) or not item["id"]:
            item["id"] = f"{_ID_PREFIX.get(kind, 'item')}_{secrets.token_hex(12)}"
        item.setdefault("status", "completed")
        if kind == "message":
            if item.get("phase", "") is None:  # a label left unset is no label (the item's phase is a string)
                del item["phase"]
            if isinstance(item.get("content"), str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": item["content"]}]
            if isinstance(item.get("content"), list):
                item["content"] = [{"annotations": [], **c} if isinstance(c, dict) and c.get("type") == "output_text"
                                   else c for c in item["content"]]
        out.append(item)
    return out


def function_tool(tool: FunctionTool | ChatFunction, name: str | None = None) -> common_pb2.Tool:
    """A function tool (Responses or Chat Completions) as the gateway's tool."""
    return common_pb2.Tool(
        name=tool.name if name is None else name,
        description=tool.description or "",
        # Sorted keys: the same schema always renders the same prompt prefix.
        parameters=json.dumps(tool.parameters, sort_keys=True) if tool.parameters is not None else "",
    )


def tool_json(raw: dict[str, Any]) -> dict[str, Any]:
    """A function tool of the request as the Response object echoes it: every field the
    specification's FunctionTool requires, null where the request left it out."""
    return {"type": "function", "name": raw.get("name"), "description": raw.get("description"),
            "parameters": raw.get("parameters"), "strict": raw.get("strict")}


def chat_messages(messages: list[ChatMessage | ChatToolMessage]) -> list[common_pb2.Item]:
    """Chat Completions ``messages`` as loopwire items (assistant tool_calls become function_call items)."""
    items: list[common_pb2.Item] = []
    for raw in messages:
        if isinstance(raw, ChatToolMessage):
            items.append(common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(
                call_id=raw.tool_call_id, output=_output_text(raw.content or ""))))
            continue
        if raw.content is not None and raw.content != "" or not raw.tool_calls:
            items.append(common_pb2.Item(message=common_pb2.Message(
                role=ROLES[raw.role], content=_parts(raw.content or ""))))  # type: ignore[arg-type]
        for call in raw.tool_calls or []:
            items.append(common_pb2.Item(function_call=common_pb2.FunctionCall(
                call_id=call.id, name=call.function.name, arguments=call.function.arguments)))
    return items


# -- output -------------------------------------------------------------------------------------


def message_id(response_id: str, index: int) -> str:
    return f"msg_{response_id.removeprefix('resp_')}_{index}"


def function_call_id(call_id: str) -> str:
    return f"fc_{call_id.removeprefix('call_')}"


def output_message(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [output_text(text)]}


def output_text(text: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An output_text part; ``logprobs`` is an empty list unless the request asked for them."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def reasoning_id(response_id: str, index: int) -> str:
    return f"rs_{response_id.removeprefix('resp_')}_{index}"


def output_reasoning(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """A reasoning item: the model's own reasoning text as its content (no summary is written, and
    no ``encrypted_content``: the specification's is a string when present, never null)."""
    return {"type": "reasoning", "id": item_id, "status": status, "summary": [],
            "content": [reasoning_text(text)]}


def reasoning_text(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def output_items(response_id: str, output: list[common_pb2.Item],
                 tools: ToolKinds | None = None) -> list[dict[str, Any]]:
    """The gateway's output items (authoritative: cut at stop strings) as Responses output items;
    a message that opens with a think block becomes a reasoning item, then the message; a call
    takes its tool's shape (``tools``: the request's ToolKinds, tool_calls.py)."""
    kinds = tools if tools is not None else ToolKinds()
    out: list[dict[str, Any]] = []
    for item in output:
        kind = item.WhichOneof("item")
        if kind == "message":
            text = "".join(p.text for p in item.message.content)
            reasoning, answer, closed = split_think(text)
            if reasoning is not None:
                out.append(output_reasoning(reasoning_id(response_id, len(out)), reasoning,
                                            "completed" if closed else "incomplete"))
                if not answer:
                    continue
                text = answer
            out.append(output_message(message_id(response_id, len(out)), text))
        elif kind == "function_call":
            out.append(call_item(item.function_call, kinds))
    return out


def usage(u: common_pb2.Usage) -> dict[str, Any]:
    return {
        "input_tokens": u.input_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
        "total_tokens": u.input_tokens + u.output_tokens,
    }


def chat_usage(u: common_pb2.Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    }


def loopwire_stats(timings: common_pb2.Timings, replica: str) -> dict[str, Any]:
    """What the gateway did for this response (an extension field; SDKs keep unknown fields)."""
    return {
        "replica": replica,
        "tokens_tokenized": timings.tokens_tokenized,
        "tokens_forwarded": timings.tokens_forwarded,
        "bytes_received_by_gateway": timings.bytes_received,
        "gateway_overhead_us": timings.gateway_overhead_us,
        "ttft_us": timings.ttft_us,
        "total_us": timings.total_us,
    }


MAX_JSON_INT = 2**64


def json_object(body: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object, whose every value the rest of the api (and
    protobuf) can hold: nesting is bounded as in every tier (``json_limits``), strings are Unicode
    text (no lone surrogates), numbers are finite doubles or integers within 64 bits."""
    try:
        value = json_limits.loads(body, parse_constant=_no_constant, object_pairs_hook=_object)
    except json_limits.JsonTooDeep as e:
        raise _too_deep(e, None) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise _invalid_json(f"We could not parse the JSON body of your request: {e}", None) from None
    if not isinstance(value, dict):
        raise _invalid_json("The request body must be a JSON object.", None)
    _check_values(value)
    return value


def _too_deep(e: json_limits.JsonTooDeep, path: str | None) -> ApiError:
    return _invalid_json(f"JSON nested deeper than this server's limit of {e.limit} levels", path)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Each object of a body, built in Python: the C parser holds the GIL from start to end
    otherwise, so a large body parsed in a worker thread would stall the event loop all along."""
    return dict(pairs)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _invalid_json(problem: str, path: str | None) -> ApiError:
    where = f"'{path}': " if path else ""
    return ApiError(400, where + problem, param=path, code="invalid_json")


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_values(body: dict[str, Any]) -> None:
    """Walks the parsed body without recursion (a deep body must not exhaust the stack here)."""
    stack: list[tuple[Any, str]] = [(body, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str) and not _is_text(value):
            raise _invalid_json("not valid Unicode text (a lone surrogate escape)", path or None)
        elif isinstance(value, float) and not math.isfinite(value):
            raise bad_request(f"'{path}': number out of range.", path or None, "invalid_value")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_JSON_INT:
            raise bad_request(f"'{path}': integer out of range (at most 2^64 in magnitude).", path or None,
                              "invalid_value")
        elif isinstance(value, dict):
            for key, v in value.items():
                if not _is_text(key):  # checked before it becomes part of a path (and of a message)
                    raise _invalid_json("a key is not valid Unicode text (a lone surrogate escape)", path or None)
                stack.append((v, f"{path}.{key}" if path else key))
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))
