"""Open Responses conformance of the front door, checked with shape checks written from the
specification's field lists (openresponses.org): the Response object (HTTP bodies and the
response.* events), output items and parts, usage, every streaming event and its sequence
number, over HTTP (JSON and SSE) and WebSocket mode; request bodies compressed with gzip or zstd
(and a decompression bomb); unknown parameters. Each check names the path of the first field
that is missing or of the wrong type, so a failure says what to fix. The checks are imported by
test_api_endpoints.py too."""

from __future__ import annotations

import gzip
import http.client
import json
from typing import Any

import pytest
import zstandard
from api_mesh import KEYS, MAX_BODY, start_api_mesh
from websockets.sync.client import connect

pytestmark = [pytest.mark.e2e]

# -- the specification's shapes -------------------------------------------------------------------

STATUSES = {"queued", "in_progress", "completed", "incomplete", "failed", "cancelled"}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _opt(check: Any) -> Any:
    return lambda v: v is None or check(v)


def _fields(obj: Any, spec: dict[str, Any], path: str) -> None:
    assert isinstance(obj, dict), f"{path}: not an object: {obj!r}"
    for name, check in spec.items():
        assert name in obj, f"{path}.{name}: missing (keys: {sorted(obj)})"
        assert check(obj[name]), f"{path}.{name}: unexpected value {obj[name]!r}"


def check_usage(u: Any, path: str = "usage") -> None:
    _fields(u, {"input_tokens": _int, "output_tokens": _int, "total_tokens": _int,
                "input_tokens_details": lambda v: isinstance(v, dict),
                "output_tokens_details": lambda v: isinstance(v, dict)}, path)
    _fields(u["input_tokens_details"], {"cached_tokens": _int}, f"{path}.input_tokens_details")
    _fields(u["output_tokens_details"], {"reasoning_tokens": _int}, f"{path}.output_tokens_details")
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"], path


def check_output_text(part: Any, path: str) -> None:
    _fields(part, {"type": lambda v: v == "output_text", "text": _str, "annotations": lambda v: isinstance(v, list),
                   "logprobs": lambda v: isinstance(v, list)}, path)


def check_item(item: Any, path: str = "item") -> None:
    _fields(item, {"type": _str, "id": _str, "status": lambda v: v in {"in_progress", "completed", "incomplete"}},
            path)
    if item["type"] == "message":
        _fields(item, {"role": lambda v: v == "assistant", "content": lambda v: isinstance(v, list)}, path)
        for j, part in enumerate(item["content"]):
            check_output_text(part, f"{path}.content[{j}]")
    elif item["type"] == "function_call":
        _fields(item, {"call_id": _str, "name": _str, "arguments": _str}, path)
    else:
        raise AssertionError(f"{path}.type: unexpected output item type {item['type']!r}")


RESPONSE = {
    "id": _str, "object": lambda v: v == "response", "created_at": _int, "completed_at": _opt(_int),
    "status": lambda v: v in STATUSES, "incomplete_details": _opt(lambda v: isinstance(v, dict) and _str(v["reason"])),
    "model": _str, "previous_response_id": _opt(_str), "instructions": _opt(lambda v: isinstance(v, (str, list))),
    "output": lambda v: isinstance(v, list),
    "error": _opt(lambda v: isinstance(v, dict) and _str(v.get("code")) and _str(v.get("message"))),
    "tools": lambda v: isinstance(v, list), "tool_choice": lambda v: isinstance(v, (str, dict)),
    "truncation": lambda v: v in {"auto", "disabled"}, "parallel_tool_calls": lambda v: isinstance(v, bool),
    "text": lambda v: isinstance(v, dict) and isinstance(v.get("format"), dict), "top_p": _number,
    "presence_penalty": _number, "frequency_penalty": _number, "top_logprobs": _int, "temperature": _number,
    "reasoning": _opt(lambda v: isinstance(v, dict)), "usage": _opt(lambda v: isinstance(v, dict)),
    "max_output_tokens": _opt(_int), "max_tool_calls": _opt(_int), "store": lambda v: isinstance(v, bool),
    "background": lambda v: isinstance(v, bool), "service_tier": _str,
    "metadata": lambda v: isinstance(v, dict) and all(_str(x) for x in v.values()),
    "safety_identifier": _opt(_str), "prompt_cache_key": _opt(_str),
}


def check_response(r: Any, path: str = "response") -> None:
    _fields(r, RESPONSE, path)
    for i, item in enumerate(r["output"]):
        check_item(item, f"{path}.output[{i}]")
    if r["usage"] is not None:
        check_usage(r["usage"], f"{path}.usage")
    if r["status"] in ("completed", "incomplete"):
        assert r["completed_at"] is not None and r["completed_at"] >= r["created_at"], path
        assert r["usage"] is not None, f"{path}.usage: missing on a finished response"
    if r["status"] == "incomplete":
        assert r["incomplete_details"] is not None, path
    if r["status"] == "failed":
        assert r["error"] is not None, path


_IDX = {"item_id": _str, "output_index": _int, "content_index": _int}
EVENTS: dict[str, dict[str, Any]] = {
    "response.output_item.added": {"output_index": _int, "item": lambda v: isinstance(v, dict)},
    "response.output_item.done": {"output_index": _int, "item": lambda v: isinstance(v, dict)},
    "response.content_part.added": {**_IDX, "part": lambda v: isinstance(v, dict)},
    "response.content_part.done": {**_IDX, "part": lambda v: isinstance(v, dict)},
    "response.output_text.delta": {**_IDX, "delta": _str, "logprobs": lambda v: isinstance(v, list)},
    "response.output_text.done": {**_IDX, "text": _str, "logprobs": lambda v: isinstance(v, list)},
    "response.function_call_arguments.delta": {"item_id": _str, "output_index": _int, "delta": _str},
    "response.function_call_arguments.done": {"item_id": _str, "output_index": _int, "arguments": _str},
    "error": {"error": lambda v: isinstance(v, dict)},
}
RESPONSE_EVENTS = {"response.created", "response.in_progress", "response.completed", "response.incomplete",
                   "response.failed", "response.queued"}


def check_event(event: Any, path: str = "event") -> None:
    _fields(event, {"type": _str, "sequence_number": _int}, path)
    kind = event["type"]
    if kind in RESPONSE_EVENTS:
        check_response(event["response"], f"{path}.response")
        return
    assert kind in EVENTS, f"{path}.type: not an event of the specification: {kind!r}"
    _fields(event, EVENTS[kind], path)
    if "item" in event:
        check_item(event["item"], f"{path}.item")
    if "part" in event:
        check_output_text(event["part"], f"{path}.part")


def check_stream(events: list[dict[str, Any]]) -> None:
    """Every event's shape, sequence numbers 0, 1, 2, ... and one terminal response event last."""
    for i, event in enumerate(events):
        check_event(event, f"events[{i}]")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created" and events[1]["type"] == "response.in_progress"
    assert events[-1]["type"] in {"response.completed", "response.incomplete", "response.failed"}


# -- the mesh and raw HTTP ------------------------------------------------------------------------

REPLY = "Paris is the capital of France."
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-conformance"))
    yield m
    m.mesh.stop()


def request(api, method: str, path: str, body: bytes | str | None = None, key: str = KEYS["alpha"],
            headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
    """(status, JSON body or None, raw bytes)."""
    host, port = api.api.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        sent = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {}),
                **(headers or {})}
        conn.request(method, path, body=body, headers=sent)
        reply = conn.getresponse()
        data = reply.read()
    finally:
        conn.close()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    return reply.status, parsed, data


def create(text: str = "Capital of France?", reply: str = REPLY, **fields: Any) -> str:
    return json.dumps({"model": "loopwire", "input": text, "loopwire_replay": {"text": reply}, **fields})


def sse_events(data: bytes) -> list[dict[str, Any]]:
    """The SSE body's events; each ``event:`` line must name its data's type."""
    events = []
    for block in data.decode().split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
        payload = json.loads("".join(line.removeprefix("data: ") for line in lines if line.startswith("data: ")))
        assert names == [payload["type"]], block
        events.append(payload)
    return events


# -- the Response object ----------------------------------------------------------------------------


def test_non_streamed_response_has_every_required_field(api):
    status, r, _ = request(api, "POST", "/v1/responses", create(instructions="Be brief.", metadata={"k": "v"}))
    assert status == 200, r
    check_response(r)
    assert r["status"] == "completed" and r["output"][0]["content"][0]["text"] == REPLY
    assert r["background"] is False and r["service_tier"] == "default" and r["top_logprobs"] == 0
    assert (r["presence_penalty"], r["frequency_penalty"], r["max_tool_calls"]) == (0.0, 0.0, None)
    assert r["metadata"] == {"k": "v"} and r["instructions"] == "Be brief."


def test_labels_of_the_request_are_echoed(api):
    status, r, _ = request(api, "POST", "/v1/responses", create(
        safety_identifier="user-7", prompt_cache_key="session-1", service_tier="flex", max_tool_calls=3,
        top_logprobs=2, presence_penalty=0, frequency_penalty=0.0, background=False, truncation="auto"))
    assert status == 200, r
    check_response(r)
    assert (r["safety_identifier"], r["prompt_cache_key"], r["max_tool_calls"]) == ("user-7", "session-1", 3)
    # What was really applied: the one tier there is, and the alternatives asked for.
    assert (r["service_tier"], r["top_logprobs"]) == ("default", 2)


def test_incomplete_response_is_complete_in_shape(api):
    status, r, _ = request(api, "POST", "/v1/responses", json.dumps(
        {"model": "loopwire", "input": "Write a long story.", "max_output_tokens": 3}))
    assert status == 200, r
    check_response(r)
    assert r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"}
    assert r["max_output_tokens"] == 3 and r["usage"]["output_tokens"] == 3


def test_streamed_text_events_conform(api):
    status, _, data = request(api, "POST", "/v1/responses", create(stream=True))
    assert status == 200
    events = sse_events(data)
    check_stream(events)
    types = [e["type"] for e in events]
    for kind in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
                 "response.output_text.done", "response.content_part.done", "response.output_item.done"):
        assert kind in types, kind
    added = next(e for e in events if e["type"] == "response.content_part.added")
    assert added["part"] == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"][0]["content"][0]["text"] == REPLY
    assert events[0]["response"]["completed_at"] is None and events[0]["response"]["usage"] is None


def test_streamed_function_call_events_conform(api):
    body = json.dumps({"model": "loopwire", "input": "Weather in Paris?", "tools": [WEATHER], "stream": True,
                       "loopwire_replay": {"function_calls": [{"call_id": "call_w", "name": "get_weather",
                                                                "arguments": '{"city": "Paris"}'}]}})
    status, _, data = request(api, "POST", "/v1/responses", body)
    assert status == 200
    events = sse_events(data)
    check_stream(events)
    assert "response.function_call_arguments.done" in [e["type"] for e in events]
    call = events[-1]["response"]["output"][-1]
    assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"city": "Paris"}


def test_websocket_events_conform(api):
    host, port = api.api.split(":")
    with connect(f"ws://{host}:{port}/v1/responses",
                 additional_headers={"authorization": f"Bearer {KEYS['alpha']}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "hi",
                            "loopwire_replay": {"text": "hello"}}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "response.failed", "error"):
            events.append(json.loads(ws.recv(timeout=60)))
    check_stream(events)


def test_websocket_held_request_and_errors_conform(api):
    host, port = api.api.split(":")
    with connect(f"ws://{host}:{port}/v1/responses",
                 additional_headers={"authorization": f"Bearer {KEYS['alpha']}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "hi", "generate": False}))
        held = [json.loads(ws.recv(timeout=60)) for _ in range(2)]
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "hi", "frobnicate": 1}))
        error = json.loads(ws.recv(timeout=60))
    for i, event in enumerate(held):
        check_event(event, f"held[{i}]")
    assert [e["type"] for e in held] == ["response.created", "response.completed"]
    assert [e["sequence_number"] for e in held] == [0, 1]
    check_event(error)
    assert error["error"]["code"] == "unknown_parameter" and error["status"] == 400


def test_usage_details_are_present(api):
    _, r, _ = request(api, "POST", "/v1/responses", create())
    assert set(r["usage"]["input_tokens_details"]) >= {"cached_tokens"}
    assert set(r["usage"]["output_tokens_details"]) >= {"reasoning_tokens"}


# -- input items ------------------------------------------------------------------------------------


def test_assistant_message_with_phase_is_accepted(api):
    body = json.dumps({"model": "loopwire", "loopwire_replay": {"text": "ok"}, "input": [
        {"role": "user", "content": "Fix the bug."},
        {"type": "message", "role": "assistant", "phase": "commentary",
         "content": [{"type": "output_text", "text": "Looking at the code first."}]},
        {"role": "assistant", "phase": "final_answer", "content": "Done."},
        {"role": "assistant", "phase": None, "content": "Anything else?"},
        {"role": "user", "content": "Thanks."}]})
    status, r, _ = request(api, "POST", "/v1/responses", body)
    assert status == 200, r
    check_response(r)


@pytest.mark.parametrize(("fields", "code", "param"), [
    ({"frobnicate": 1}, "unknown_parameter", "frobnicate"),
    ({"input": [{"role": "user", "content": "hi", "frobnicate": 1}]}, "unknown_parameter", "input[0].frobnicate"),
    ({"text": {"format": {"type": "text"}, "frobnicate": 1}}, "unknown_parameter", "text.frobnicate"),
    ({"input": [{"role": "assistant", "content": "x", "phase": "musing"}]}, "invalid_value", "input[0].phase"),
    ({"background": True, "store": False}, "invalid_value", "background"),
    ({"background": "yes"}, "invalid_type", "background"),
    ({"presence_penalty": 0.5}, "unsupported_parameter", "presence_penalty"),
    ({"frequency_penalty": 3}, "invalid_value", "frequency_penalty"),
    ({"top_logprobs": 21}, "invalid_value", "top_logprobs"),
    ({"max_tool_calls": 0}, "invalid_value", "max_tool_calls"),
    ({"safety_identifier": 5}, "invalid_type", "safety_identifier"),
])
def test_refused_fields_get_openai_errors(api, fields, code, param):
    status, reply, _ = request(api, "POST", "/v1/responses", json.dumps({"model": "loopwire", "input": "hi",
                                                                           **fields}))
    assert status == 400, reply
    assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert (reply["error"]["code"], reply["error"]["param"]) == (code, param)


# -- compressed request bodies -------------------------------------------------------------------


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "ZSTD", "gzip, zstd", "identity"])
def test_compressed_bodies_are_accepted(api, encoding):
    body = create(stream=False).encode()
    for coding in (c.strip().lower() for c in encoding.split(",")):
        body = {"zstd": _zstd, "gzip": gzip.compress, "identity": lambda b: b}[coding](body)
    status, r, _ = request(api, "POST", "/v1/responses", body, headers={"content-encoding": encoding})
    assert status == 200, r
    check_response(r)
    assert r["output"][0]["content"][0]["text"] == REPLY


def test_streamed_zstd_frame_without_content_size(api):
    """Codex compresses as it writes: the frame does not declare its decompressed size."""
    writer = zstandard.ZstdCompressor().compressobj()
    body = writer.compress(create(stream=True).encode()) + writer.flush()
    status, _, data = request(api, "POST", "/v1/responses", body, headers={"content-encoding": "zstd"})
    assert status == 200
    check_stream(sse_events(data))


def test_chat_completions_take_compressed_bodies_too(api):
    body = json.dumps({"model": "loopwire", "messages": [{"role": "user", "content": "hi"}],
                       "loopwire_replay": {"text": "hey"}}).encode()
    status, r, _ = request(api, "POST", "/v1/chat/completions", _zstd(body), headers={"content-encoding": "zstd"})
    assert status == 200 and r["choices"][0]["message"]["content"] == "hey", r


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_decompression_bomb_is_413(api, encoding):
    inner = json.dumps({"model": "loopwire", "input": "x" * (MAX_BODY * 40)}).encode()
    body = _zstd(inner) if encoding == "zstd" else gzip.compress(inner)
    assert len(body) < MAX_BODY // 4  # small on the wire, far past the limit once inflated
    status, reply, _ = request(api, "POST", "/v1/responses", body, headers={"content-encoding": encoding})
    assert status == 413 and reply["error"]["code"] == "request_too_large", reply
    assert request(api, "POST", "/v1/responses", create())[0] == 200  # still serving


@pytest.mark.parametrize(("encoding", "body", "status", "code"), [
    ("br", b"\x0b\x02\x80{}\x03", 415, "unsupported_encoding"),
    ("gzip, deflate", gzip.compress(b"{}"), 415, "unsupported_encoding"),
    ("zstd", b"not zstd at all", 400, "invalid_body"),
    ("gzip", b"not gzip at all", 400, "invalid_body"),
    ("gzip", gzip.compress(b'{"model": "loopwire", "input": "hi"}')[:-6], 400, "invalid_body"),
])
def test_bad_encodings_are_refused(api, encoding, body, status, code):
    got, reply, _ = request(api, "POST", "/v1/responses", body, headers={"content-encoding": encoding})
    assert got == status and reply["error"]["code"] == code, reply
    assert set(reply["error"]) == {"message", "type", "param", "code"}
