"""The Open Responses specification's objects and streaming events as JSON Schemas, written by
hand from the field lists of its published OpenAPI document (openresponses.org): which fields
each object requires, their types, which may be null, and the enumerations. Checked with
``jsonschema``, so a failure names the path of the offending value.

Where the document's 2026-04-24 edition and its later corrections differ, the correction is
used: reasoning text streams as ``response.reasoning_text.delta``/``.done`` and a JSON Schema
text format's ``schema`` is an object. Endpoints the document does not describe (input items,
delete, input_tokens) are checked in OpenAI's shapes, with the document's item schemas.
"""

from __future__ import annotations

from typing import Any

import jsonschema

STR, INT, NUM, BOOL, NULL = ({"type": t} for t in ("string", "integer", "number", "boolean", "null"))


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, NULL]}


def one_of(*names: str) -> dict[str, Any]:
    return {"oneOf": [ref(n) for n in names]}


def enum(*values: Any) -> dict[str, Any]:
    return {"enum": list(values)}


def array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": {**required, **(optional or {})}}


STATUS = enum("in_progress", "completed", "incomplete")
BYTE = {"type": "integer", "minimum": 0, "maximum": 255}
LOGPROB = {"type": "number", "maximum": 0}
PART = one_of("InputTextContent", "OutputTextContent", "TextContent", "SummaryTextContent", "ReasoningTextContent",
              "RefusalContent")
_INDEX = {"sequence_number": INT, "item_id": STR, "output_index": INT}


def _event(kind: str, fields: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return obj({"type": enum(kind), "sequence_number": INT, **fields}, optional)


DEFS: dict[str, Any] = {
    "InputTextContent": obj({"type": enum("input_text"), "text": STR}),
    # A token's UTF-8 bytes (one integer each) and its log-probability (never above 0).
    "TopLogProb": obj({"token": STR, "logprob": LOGPROB, "bytes": array(BYTE)}),
    "LogProb": obj({"token": STR, "logprob": LOGPROB, "bytes": array(BYTE), "top_logprobs": array(ref("TopLogProb"))}),
    "UrlCitationBody": obj({"type": enum("url_citation"), "url": STR, "start_index": INT, "end_index": INT,
                            "title": STR}),
    "OutputTextContent": obj({"type": enum("output_text"), "text": STR, "annotations": array(ref("UrlCitationBody"))},
                             {"logprobs": array(ref("LogProb"))}),
    "TextContent": obj({"type": enum("text"), "text": STR}),
    "SummaryTextContent": obj({"type": enum("summary_text"), "text": STR}),
    "ReasoningTextContent": obj({"type": enum("reasoning_text"), "text": STR}),
    "RefusalContent": obj({"type": enum("refusal"), "refusal": STR}),
    "Message": obj({"type": enum("message"), "id": STR, "status": STATUS,
                    "role": enum("user", "assistant", "system", "developer"), "content": array(PART)},
                   {"phase": enum("commentary", "final_answer")}),
    "FunctionCall": obj({"type": enum("function_call"), "id": STR, "call_id": STR, "name": STR, "arguments": STR,
                         "status": STATUS}, {"namespace": STR}),
    # OpenAI's custom (free-form) tool items, which the document leaves to implementors.
    "CustomToolCall": obj({"type": enum("custom_tool_call"), "call_id": STR, "name": STR, "input": STR},
                          {"id": STR, "namespace": STR, "status": STATUS}),
    "CustomToolCallOutput": obj({"type": enum("custom_tool_call_output"), "call_id": STR,
                                 "output": {"oneOf": [STR, array(ref("InputTextContent"))]}},
                                {"id": STR, "status": STATUS}),
    "FunctionCallOutput": obj({"type": enum("function_call_output"), "id": STR, "call_id": STR,
                               "output": {"oneOf": [STR, array(ref("InputTextContent"))]}, "status": STATUS}),
    "ReasoningBody": obj({"type": enum("reasoning"), "id": STR, "summary": array(PART)},
                         {"content": array(PART), "encrypted_content": STR}),
    "CompactionBody": obj({"type": enum("compaction"), "id": STR, "encrypted_content": STR}, {"created_by": STR}),
    "ItemField": one_of("Message", "FunctionCall", "FunctionCallOutput", "ReasoningBody", "CompactionBody",
                        "CustomToolCall", "CustomToolCallOutput"),
    "Error": obj({"code": STR, "message": STR}),
    "FunctionTool": obj({"type": enum("function"), "name": STR, "description": nullable(STR),
                         "parameters": nullable({"type": "object"}), "strict": nullable(BOOL)}),
    "CustomTool": obj({"type": enum("custom"), "name": STR},
                      {"description": nullable(STR), "format": {"oneOf": [
                          obj({"type": enum("text")}),
                          obj({"type": enum("grammar"), "syntax": enum("lark", "regex"), "definition": STR})]}}),
    "NamespaceTool": obj({"type": enum("namespace"), "name": STR, "description": STR,
                          "tools": array(one_of("FunctionTool", "CustomTool"))}),
    "ToolChoice": {"oneOf": [obj({"type": enum("function")}, {"name": STR}), enum("none", "auto", "required"),
                             obj({"type": enum("custom"), "name": STR}),
                             obj({"type": enum("allowed_tools"), "tools": array(obj({"type": enum("function")},
                                                                                     {"name": STR})),
                                  "mode": enum("none", "auto", "required")})]},
    "TextField": obj({"format": {"oneOf": [
        obj({"type": enum("text")}), obj({"type": enum("json_object")}),
        obj({"type": enum("json_schema"), "name": STR, "description": nullable(STR),
             "schema": nullable({"type": "object"}), "strict": BOOL})]}},
        {"verbosity": enum("low", "medium", "high")}),
    "Reasoning": obj({"effort": nullable(enum("none", "low", "medium", "high", "xhigh")),
                      "summary": nullable(enum("concise", "detailed", "auto"))}),
    "Usage": obj({"input_tokens": INT, "output_tokens": INT, "total_tokens": INT,
                  "input_tokens_details": obj({"cached_tokens": INT}),
                  "output_tokens_details": obj({"reasoning_tokens": {"type": "integer", "minimum": 0}})}),
    "ResponseResource": obj({
        "id": STR, "object": enum("response"), "created_at": INT, "completed_at": nullable(INT), "status": STR,
        "incomplete_details": nullable(obj({"reason": STR})), "model": STR, "previous_response_id": nullable(STR),
        "instructions": nullable(STR), "output": array(ref("ItemField")), "error": nullable(ref("Error")),
        "tools": array(one_of("FunctionTool", "CustomTool", "NamespaceTool")), "tool_choice": ref("ToolChoice"),
        "truncation": enum("auto", "disabled"), "parallel_tool_calls": BOOL, "text": ref("TextField"),
        "top_p": NUM, "presence_penalty": NUM, "frequency_penalty": NUM, "top_logprobs": INT, "temperature": NUM,
        "reasoning": nullable(ref("Reasoning")), "usage": nullable(ref("Usage")), "max_output_tokens": nullable(INT),
        "max_tool_calls": nullable(INT), "store": BOOL, "background": BOOL, "service_tier": STR, "metadata": {},
        "safety_identifier": nullable(STR), "prompt_cache_key": nullable(STR)}),
    "CompactResource": obj({"id": STR, "object": enum("response.compaction"), "output": array(ref("ItemField")),
                            "created_at": INT, "usage": ref("Usage")}),
    "ErrorPayload": obj({"type": STR, "code": nullable(STR), "message": STR, "param": nullable(STR)},
                        {"headers": {"type": "object", "additionalProperties": STR}}),
    # Not in the document: OpenAI's shapes of the endpoints it leaves out.
    "InputTokens": obj({"object": enum("response.input_tokens"), "input_tokens": INT}),
    "ItemList": obj({"object": enum("list"), "data": array(ref("ItemField")), "first_id": nullable(STR),
                     "last_id": nullable(STR), "has_more": BOOL}),
    "Deleted": obj({"id": STR, "object": enum("response"), "deleted": enum(True)}),
    "HttpError": obj({"error": obj({"message": STR, "type": STR, "param": nullable(STR), "code": nullable(STR)})}),
    "WebSocketErrorEvent": obj({"type": enum("error"), "status": INT,
                                "error": obj({"code": STR, "message": STR}, {"type": STR, "param": nullable(STR)})},
                               {"stream_id": ref("StreamId")}),
    # A WebSocket lane's name (OpenAI's WebSocket mode): on every event of a named lane.
    "StreamId": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,256}$"},
}

EVENTS: dict[str, dict[str, Any]] = {
    **{kind: _event(kind, {"response": ref("ResponseResource")}) for kind in (
        "response.created", "response.queued", "response.in_progress", "response.completed", "response.failed",
        "response.incomplete")},
    **{kind: _event(kind, {"output_index": INT, "item": nullable(ref("ItemField"))})
       for kind in ("response.output_item.added", "response.output_item.done")},
    **{kind: _event(kind, {**_INDEX, "content_index": INT, "part": PART})
       for kind in ("response.content_part.added", "response.content_part.done")},
    **{kind: _event(kind, {**_INDEX, "summary_index": INT, "part": PART})
       for kind in ("response.reasoning_summary_part.added", "response.reasoning_summary_part.done")},
    "response.output_text.delta": _event("response.output_text.delta", {**_INDEX, "content_index": INT, "delta": STR},
                                         {"logprobs": array(ref("LogProb")), "obfuscation": STR}),
    "response.output_text.done": _event("response.output_text.done", {**_INDEX, "content_index": INT, "text": STR},
                                        {"logprobs": array(ref("LogProb"))}),
    "response.refusal.delta": _event("response.refusal.delta", {**_INDEX, "content_index": INT, "delta": STR}),
    "response.refusal.done": _event("response.refusal.done", {**_INDEX, "content_index": INT, "refusal": STR}),
    "response.reasoning_text.delta": _event("response.reasoning_text.delta",
                                            {**_INDEX, "content_index": INT, "delta": STR}, {"obfuscation": STR}),
    "response.reasoning_text.done": _event("response.reasoning_text.done",
                                           {**_INDEX, "content_index": INT, "text": STR}),
    "response.reasoning_summary_text.delta": _event("response.reasoning_summary_text.delta",
                                                    {**_INDEX, "summary_index": INT, "delta": STR}),
    "response.reasoning_summary_text.done": _event("response.reasoning_summary_text.done",
                                                   {**_INDEX, "summary_index": INT, "text": STR}),
    "response.function_call_arguments.delta": _event("response.function_call_arguments.delta",
                                                     {**_INDEX, "delta": STR}, {"obfuscation": STR}),
    "response.function_call_arguments.done": _event("response.function_call_arguments.done",
                                                    {**_INDEX, "arguments": STR}),
    "response.custom_tool_call_input.delta": _event("response.custom_tool_call_input.delta", {**_INDEX, "delta": STR}),
    "response.custom_tool_call_input.done": _event("response.custom_tool_call_input.done", {**_INDEX, "input": STR}),
    "error": _event("error", {"error": ref("ErrorPayload")}),
}


def validate(name: str, value: Any) -> None:
    """``value`` as the schema ``name`` (a definition above) describes it, or AssertionError at its path."""
    _check({"$defs": DEFS, **ref(name)}, value, name)


def validate_event(event: Any) -> None:
    """A streaming event (SSE or WebSocket mode) as the schema of its ``type``."""
    kind = event.get("type") if isinstance(event, dict) else None
    assert kind in EVENTS, f"not a streaming event of the specification: {kind!r}"
    if "stream_id" in event:  # WebSocket mode: the lane of the request (OpenAI's WebSocket events)
        _check({"$defs": DEFS, **ref("StreamId")}, event["stream_id"], f"{kind}.stream_id")
    _check({"$defs": DEFS, **EVENTS[kind]}, event, kind)


def _check(schema: dict[str, Any], value: Any, name: str) -> None:
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: e.json_path)
    if errors:
        first = min(errors, key=lambda e: len(e.context))  # a oneOf's failure says least; its leaves say more
        leaves = [c for e in errors for c in e.context] or errors
        detail = "; ".join(f"{e.json_path}: {e.message}" for e in leaves[:6])
        raise AssertionError(f"{name} at {first.json_path}: {first.message[:300]} [{detail[:1500]}]")
