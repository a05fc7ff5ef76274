"""OpenAI JSON <-> loopwire protobuf: input items, tools, output items, usage.

Only the shape changes here; what the items mean (rendering, tokenizing, call-id checks) is
the gateway's. Every rejection names the request path of the offending value.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import secrets
from collections.abc import Collection
from typing import Any

from loopwire.api.errors import ApiError, bad_request, invalid_type, unknown_parameter, unsupported
from loopwire.common import json_limits
from loopwire.v1 import common_pb2

ROLES = {
    "system": common_pb2.ROLE_SYSTEM,
    "developer": common_pb2.ROLE_DEVELOPER,
    "user": common_pb2.ROLE_USER,
    "assistant": common_pb2.ROLE_ASSISTANT,
}
_TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}
# The think markers of reasoning models (Qwen3, DeepSeek-R1): output that opens with a think block
# has its reasoning returned as a ``reasoning`` item, and a reasoning item sent back is rendered
# into its assistant turn between them again, as the model wrote it (so the prefix stays cached).
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
# Between the closer and the answer, as such models write it (the answer is returned without it).
THINK_GAP = "\n\n"
# An assistant message's phase (Codex labels its preambles): a label, the transcript is the same.
PHASES = {"commentary", "final_answer"}
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs",
              "compaction": "cmp", "custom_tool_call": "ctc", "custom_tool_call_output": "ctco"}
# How the model names a namespace's tool (tools.py), and the one argument of a custom tool.
SEPARATOR = "."
CUSTOM_INPUT = "input"
# A compaction item's ``encrypted_content`` made here: a version tag, then the summary text in
# base64url. Opaque to clients (as the specification has it); not a secret: it holds nothing the
# tenant could not send as a message, so it needs no key and any replica can read it.
COMPACTION_TAG = "lwc1."


def check_keys(obj: dict[str, Any], allowed: set[str], path: str) -> None:
    for key in obj:
        if key not in allowed:
            raise unknown_parameter(f"{path}.{key}" if path else key)


def want(value: Any, kind: type | tuple[type, ...], path: str, expected: str) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python, never a number in JSON.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise invalid_type(path, expected)
    return value


def _known(value: Any, names: Collection[str]) -> bool:
    """Whether a JSON value is one of ``names`` (an array or object never is, nor can it be hashed)."""
    return isinstance(value, str) and value in names


def joined(namespace: str, name: str) -> str:
    return f"{namespace}{SEPARATOR}{name}"


def custom_arguments(text: str) -> str:
    """A custom tool call's input as the function arguments the model writes for it."""
    return json.dumps({CUSTOM_INPUT: text}, ensure_ascii=False)


def _call_name(raw: dict[str, Any], p: str) -> str:
    """A call's tool name as the model wrote it: a namespaced one joined to its namespace."""
    name = want(raw.get("name"), str, f"{p}.name", "a string")
    namespace = raw.get("namespace")
    if namespace is None:
        return name
    return joined(want(namespace, str, f"{p}.namespace", "a string"), name)


def text_item(role: int, text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=role, content=[common_pb2.ContentPart(text=text)]))  # type: ignore[arg-type]


def _content_text(content: Any, path: str) -> list[common_pb2.ContentPart]:
    if isinstance(content, str):
        return [common_pb2.ContentPart(text=content)]
    want(content, list, path, "a string or an array of content parts")
    parts = []
    for j, part in enumerate(content):
        p = f"{path}[{j}]"
        want(part, dict, p, "an object")
        kind = part.get("type")
        if not _known(kind, _TEXT_PARTS):
            raise unsupported(f"{p}.type", f"content part type {kind!r} (only text)")
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        parts.append(common_pb2.ContentPart(text=want(text, str, f"{p}.text", "a string")))
    return parts


def _tool_output_text(output: Any, path: str) -> str:
    if isinstance(output, str):
        return output
    return "".join(p.text for p in _content_text(output, path))


def response_input(value: Any, path: str = "input") -> list[common_pb2.Item]:
    """The Responses API ``input`` (a string or a list of items) as loopwire items."""
    if isinstance(value, str):
        return [text_item(common_pb2.ROLE_USER, value)]
    want(value, list, path, "a string or an array of input items")
    items: list[common_pb2.Item] = []
    think: str | None = None  # a reasoning item's block, waiting for the assistant turn it opens
    think_prefix = ""  # the block, for the assistant message being read
    for i, raw in enumerate(value):
        p = f"{path}[{i}]"
        want(raw, dict, p, "an object")
        kind = raw.get("type", "message")
        if kind == "reasoning":
            block = _reasoning_block(raw, p)
            if block is not None:
                think = block if think is None else think + block
            continue
        if think is not None:
            if kind == "message" and raw.get("role") == "assistant":
                think_prefix = think
            else:  # the turn was reasoning alone (or its calls): the block is its text
                items.append(text_item(common_pb2.ROLE_ASSISTANT, think))
            think = None
        if kind == "message":
            role = raw.get("role", "")
            if not _known(role, ROLES):
                raise bad_request(f"Invalid value for '{p}.role': {role!r}.", f"{p}.role", "invalid_value")
            check_keys(raw, {"type", "role", "content", "id", "status", "phase"}, p)
            if not (raw.get("phase") is None or _known(raw["phase"], PHASES)):
                raise bad_request(f"Invalid value for '{p}.phase': {raw['phase']!r} (expected 'commentary' or "
                                  "'final_answer').", f"{p}.phase", "invalid_value")
            parts = _content_text(raw.get("content", ""), f"{p}.content")
            if think_prefix:
                if not parts:
                    parts.append(common_pb2.ContentPart(text=""))
                parts[0].text = think_prefix + (THINK_GAP + parts[0].text if parts[0].text else "")
                think_prefix = ""
            items.append(common_pb2.Item(message=common_pb2.Message(role=ROLES[role], content=parts)))  # type: ignore[arg-type]
        elif kind == "function_call":
            check_keys(raw, {"type", "call_id", "name", "namespace", "arguments", "id", "status"}, p)
            items.append(common_pb2.Item(function_call=common_pb2.FunctionCall(
                call_id=want(raw.get("call_id"), str, f"{p}.call_id", "a string"),
                name=_call_name(raw, p),
                arguments=call_arguments(raw.get("arguments", "{}"), f"{p}.arguments"),
            )))
        elif kind == "custom_tool_call":
            check_keys(raw, {"type", "call_id", "name", "namespace", "input", "id", "status"}, p)
            items.append(common_pb2.Item(function_call=common_pb2.FunctionCall(
                call_id=want(raw.get("call_id"), str, f"{p}.call_id", "a string"),
                name=_call_name(raw, p),
                arguments=custom_arguments(want(raw.get("input", ""), str, f"{p}.input", "a string")),
            )))
        elif kind == "compaction":
            check_keys(raw, {"type", "id", "encrypted_content", "created_by"}, p)
            summary = compaction_summary(raw.get("encrypted_content"), f"{p}.encrypted_content")
            items.append(common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=summary)))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            check_keys(raw, {"type", "call_id", "output", "id", "status"}, p)
            items.append(common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(
                call_id=want(raw.get("call_id"), str, f"{p}.call_id", "a string"),
                output=_tool_output_text(raw.get("output", ""), f"{p}.output"),
            )))
        else:
            raise unsupported(f"{p}.type", f"input item type {kind!r}")
    if think is not None:
        items.append(text_item(common_pb2.ROLE_ASSISTANT, think))
    return items


def compaction_content(summary: str) -> str:
    return COMPACTION_TAG + base64.urlsafe_b64encode(summary.encode("utf-8")).decode("ascii").rstrip("=")


def compaction_summary(value: Any, path: str) -> str:
    """The summary a compaction item made here carries; another server's content cannot be read."""
    content = want(value, str, path, "a string")
    body = content.removeprefix(COMPACTION_TAG)
    try:
        if body == content:
            raise ValueError
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (ValueError, binascii.Error):
        raise bad_request(f"Invalid value for '{path}': not the content of a compaction made by this server "
                          "(POST /v1/responses/compact).", path, "invalid_value") from None


def _reasoning_block(raw: dict[str, Any], p: str) -> str | None:
    """A reasoning input item as the think block the model wrote (None: it carries no reasoning
    text, only a summary or encrypted content, which another model wrote: dropped)."""
    check_keys(raw, {"type", "id", "summary", "content", "encrypted_content", "status"}, p)
    want(raw.get("summary", []), list, f"{p}.summary", "an array")
    content = raw.get("content")
    if content is None:
        return None
    want(content, list, f"{p}.content", "an array of reasoning_text parts")
    texts = []
    for j, part in enumerate(content):
        pp = f"{p}.content[{j}]"
        want(part, dict, pp, "an object")
        if part.get("type") != "reasoning_text":
            raise unsupported(f"{pp}.type", f"reasoning content type {part.get('type')!r} (only reasoning_text)")
        texts.append(want(part.get("text"), str, f"{pp}.text", "a string"))
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


def input_json(value: Any) -> list[dict[str, Any]]:
    """An already validated ``input`` as the specification's input items, as ``input_items`` lists
    them: a string becomes a user message, string content becomes a part, each item gets an id."""
    raw_items = [{"type": "message", "role": "user", "content": value}] if isinstance(value, str) else value
    out: list[dict[str, Any]] = []
    for raw in raw_items if isinstance(raw_items, list) else []:
        if not isinstance(raw, dict):
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


def function_tool(raw: dict[str, Any], p: str) -> common_pb2.Tool:
    """A Responses function tool (its keys already checked) as the gateway's tool."""
    return _tool(raw, p)


def tool_json(raw: dict[str, Any]) -> dict[str, Any]:
    """A function tool of the request as the Response object echoes it: every field the
    specification's FunctionTool requires, null where the request left it out."""
    return {"type": "function", "name": raw.get("name"), "description": raw.get("description"),
            "parameters": raw.get("parameters"), "strict": raw.get("strict")}


def chat_tools(value: Any, path: str = "tools") -> list[common_pb2.Tool]:
    want(value, list, path, "an array of tools")
    tools = []
    for i, raw in enumerate(value):
        p = f"{path}[{i}]"
        want(raw, dict, p, "an object")
        if raw.get("type") != "function":
            raise unsupported(f"{p}.type", f"tool type {raw.get('type')!r} (only function tools)")
        check_keys(raw, {"type", "function"}, p)
        fn = want(raw.get("function"), dict, f"{p}.function", "an object")
        check_keys(fn, {"name", "description", "parameters", "strict"}, f"{p}.function")
        tools.append(_tool(fn, f"{p}.function"))
    return tools


def _tool(raw: dict[str, Any], p: str) -> common_pb2.Tool:
    params = raw.get("parameters")
    if params is not None:
        want(params, dict, f"{p}.parameters", "a JSON Schema object")
    return common_pb2.Tool(
        name=want(raw.get("name"), str, f"{p}.name", "a string"),
        description=want(raw.get("description") or "", str, f"{p}.description", "a string"),
        # Sorted keys: the same schema always renders the same prompt prefix.
        parameters=json.dumps(params, sort_keys=True) if params is not None else "",
    )


def chat_messages(value: Any, path: str = "messages") -> list[common_pb2.Item]:
    """Chat Completions ``messages`` as loopwire items (assistant tool_calls become function_call items)."""
    want(value, list, path, "an array of messages")
    if not value:
        raise bad_request(f"'{path}' must not be empty.", path, "invalid_value")
    items: list[common_pb2.Item] = []
    for i, raw in enumerate(value):
        p = f"{path}[{i}]"
        want(raw, dict, p, "an object")
        role = raw.get("role")
        if role == "tool":
            check_keys(raw, {"role", "content", "tool_call_id", "name"}, p)
            items.append(common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(
                call_id=want(raw.get("tool_call_id"), str, f"{p}.tool_call_id", "a string"),
                output=_tool_output_text(raw.get("content") or "", f"{p}.content"),
            )))
            continue
        if not _known(role, ROLES):
            raise bad_request(f"Invalid value for '{p}.role': {role!r}.", f"{p}.role", "invalid_value")
        check_keys(raw, {"role", "content", "name", "tool_calls", "refusal"}, p)
        content = raw.get("content")
        if content is not None and content != "" or not raw.get("tool_calls"):
            items.append(common_pb2.Item(message=common_pb2.Message(
                role=ROLES[role], content=_content_text(content or "", f"{p}.content"))))  # type: ignore[arg-type]
        for j, call in enumerate(want(raw.get("tool_calls") or [], list, f"{p}.tool_calls", "an array")):
            cp = f"{p}.tool_calls[{j}]"
            want(call, dict, cp, "an object")
            fn = want(call.get("function"), dict, f"{cp}.function", "an object")
            items.append(common_pb2.Item(function_call=common_pb2.FunctionCall(
                call_id=want(call.get("id"), str, f"{cp}.id", "a string"),
                name=want(fn.get("name"), str, f"{cp}.function.name", "a string"),
                arguments=call_arguments(fn.get("arguments", "{}"), f"{cp}.function.arguments"),
            )))
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
                 tools: Any = None) -> list[dict[str, Any]]:
    """The gateway's output items (authoritative: cut at stop strings) as Responses output items;
    a message that opens with a think block becomes a reasoning item, then the message; a call
    takes its tool's shape (``tools``: the request's ToolKinds, see tools.py)."""
    from loopwire.api.tools import ToolKinds, call_item  # tools.py builds on this module

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


def call_arguments(value: Any, path: str) -> str:
    """A function call's ``arguments``: a string, kept as it is (a model may write invalid JSON,
    and clients send it back); when it is JSON, the gateway parses it, so its nesting is bounded."""
    text: str = want(value, str, path, "a string")
    if text.lstrip()[:1] in ("[", "{"):
        try:
            json_limits.loads(text)
        except json_limits.JsonTooDeep as e:
            raise _too_deep(e, path) from None
        except ValueError:
            pass
    return text


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
