"""Every object and streaming event of the front door against the Open Responses specification's
schemas (``openresponses_schema``): response bodies (text, tool call, reasoning, incomplete, logprobs,
failed, cancelled), every kind of streaming event the api emits (SSE and WebSocket mode), the
stored-response endpoints' bodies, ``input_tokens``, ``compact`` and the errors. Shapes the mesh
reaches only with luck (a failure mid-response, the gateway gone) come from the api's own
response builder, fed the gateway's events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_mesh import KEYS, start_api_mesh
from openresponses_schema import validate, validate_event
from test_api_conformance import WEATHER, request, sse_events
from websockets.sync.client import connect

from loopwire.api.create import parse_create
from loopwire.api.errors import ApiError
from loopwire.api.events import ResponseBuilder
from loopwire.api.responses import error_event
from loopwire.v1 import common_pb2, gateway_pb2

pytestmark = [pytest.mark.e2e]

Code = common_pb2.ErrorCode
# Every kind of streaming event the api emits (events.py, responses.py, websocket.py).
EMITTED = {
    "response.created", "response.in_progress", "response.completed", "response.incomplete", "response.failed",
    "response.output_item.added", "response.output_item.done", "response.content_part.added",
    "response.content_part.done", "response.output_text.delta", "response.output_text.done",
    "response.reasoning_text.delta", "response.reasoning_text.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "error",
}
CALL = {"function_calls": [{"call_id": "call_w", "name": "get_weather", "arguments": '{"city": "Paris"}'}]}
KINDS = {  # one request of each kind of response
    "text": {"input": "Capital of France?", "loopwire_replay": {"text": "Paris."}, "instructions": "Be brief.",
             "metadata": {"k": "v"}},
    "tool_call": {"input": "Weather in Paris?", "tools": [WEATHER], "tool_choice": "auto", "loopwire_replay": CALL},
    "reasoning": {"input": "Capital of France?", "reasoning": {"effort": "low"},
                  "loopwire_replay": {"text": "<think>\nThe capital of France is Paris.\n</think>\n\nParis."}},
    "incomplete": {"input": "Write a long story.", "max_output_tokens": 3},
    # Real log-probabilities (the reference engine's logits) on the part, its deltas and done event.
    "logprobs": {"input": "Write a long story.", "max_output_tokens": 4, "temperature": 0,
                 "include": ["message.output_text.logprobs"], "top_logprobs": 2},
}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-schema"))
    yield m
    m.mesh.stop()


def post(api, path: str, body: dict[str, Any], tenant: str = "alpha") -> tuple[int, Any, bytes]:
    return request(api, "POST", path, json.dumps({"model": "loopwire", **body}), key=KEYS[tenant])


def checked(events: list[dict[str, Any]]) -> set[str]:
    for i, event in enumerate(events):
        try:
            validate_event(event)
        except AssertionError as e:
            raise AssertionError(f"events[{i}] ({event.get('type')}): {e}") from None
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return {e["type"] for e in events}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_response_bodies_conform(api, kind):
    status, r, _ = post(api, "/v1/responses", KINDS[kind])
    assert status == 200, r
    validate("ResponseResource", r)
    expected = {"text": "message", "tool_call": "function_call", "reasoning": "reasoning", "incomplete": "message",
                "logprobs": "message"}
    assert r["output"] and r["output"][0]["type"] == expected[kind], r["output"]
    assert r["status"] == ("incomplete" if kind in ("incomplete", "logprobs") else "completed")
    if kind == "logprobs":  # the entries' schema was checked on real ones
        assert r["output"][0]["content"][0]["logprobs"], r["output"]


def builder(**body: Any) -> ResponseBuilder:
    b = ResponseBuilder(parse_create({"model": "m", "input": "hi", **body}, models=["m"]))
    b.feed(gateway_pb2.ConverseResponse(created=gateway_pb2.ResponseCreated(response_id="resp_1")))
    return b


def _text(b: ResponseBuilder, text: str) -> list[dict[str, Any]]:
    return b.feed(gateway_pb2.ConverseResponse(text_delta=gateway_pb2.TextDelta(text=text)))


def _failed(b: ResponseBuilder, code: common_pb2.ErrorCode.ValueType, field: str = "") -> list[dict[str, Any]]:
    return b.feed(gateway_pb2.ConverseResponse(failed=gateway_pb2.ResponseFailed(error=common_pb2.Error(
        code=code, message="it went wrong", field=field))))


def ended_by_the_gateway() -> list[list[dict[str, Any]]]:
    """The event streams of responses that fail, are cancelled, are cut by the safety check or
    lose the gateway midway, as the builder folds them."""
    streams = []
    for code, field in ((Code.ERROR_CODE_INTERNAL, ""), (Code.ERROR_CODE_CANCELLED, "cancel_response"),
                        (Code.ERROR_CODE_SAFETY_VIOLATION, "")):
        b = builder()
        streams.append([*_text(b, "<think>hm</think>par"), *_failed(b, code, field)])
    b = builder()
    gone = ApiError(503, "the gateway went away", type="server_error", code="unavailable")
    streams.append([*_text(b, "par"), *b.lost(gone), error_event(gone, b.seq + 1)])
    return streams


def test_failed_cancelled_and_cut_responses_conform():
    for events in ended_by_the_gateway():
        first = events[0]["sequence_number"]
        for e in events:
            e["sequence_number"] -= first  # the created events were fed before
        if events[-1]["type"] == "error":
            events[-1]["sequence_number"] = len(events) - 1
        checked(events)
        final = next(e for e in reversed(events) if e["type"].startswith("response.") and "response" in e)
        validate("ResponseResource", final["response"])
        assert final["response"]["status"] in ("failed", "cancelled", "incomplete")


def test_response_echoes_conform_whatever_the_request_left_out():
    b = builder(tools=[{"type": "function", "name": "f"}, {"type": "function", "name": "g", "strict": True,
                                                            "description": "G.", "parameters": {"type": "object"}}],
                tool_choice={"type": "function", "name": "f"}, reasoning={"effort": "high", "summary": "auto"},
                text={"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}},
                      "verbosity": "low"})
    validate("ResponseResource", b.response())
    assert b.response()["tools"][0] == {"type": "function", "name": "f", "description": None, "parameters": None,
                                        "strict": None}


def test_every_event_the_api_emits_conforms(api):
    seen: set[str] = set()
    for body in KINDS.values():
        status, _, data = post(api, "/v1/responses", {**body, "stream": True})
        assert status == 200
        seen |= checked(sse_events(data))
    host, port = api.api.split(":")
    with connect(f"ws://{host}:{port}/v1/responses",
                 additional_headers={"authorization": f"Bearer {KEYS['alpha']}"}) as ws:
        for body in KINDS.values():
            ws.send(json.dumps({"type": "response.create", "model": "loopwire", **body}))
            events: list[dict[str, Any]] = []
            while not events or events[-1]["type"] not in ("response.completed", "response.incomplete"):
                events.append(json.loads(ws.recv(timeout=60)))
            seen |= checked(events)
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "hi", "frobnicate": 1}))
        validate("WebSocketErrorEvent", json.loads(ws.recv(timeout=60)))
        ws.send("not json")
        validate("WebSocketErrorEvent", json.loads(ws.recv(timeout=60)))
    for events in ended_by_the_gateway():
        seen |= {e["type"] for e in events}
        for e in events:
            validate_event(e)
    assert seen == EMITTED, (sorted(EMITTED - seen), sorted(seen - EMITTED))


INPUT = [
    {"role": "developer", "content": "Be terse."},
    {"role": "user", "content": [{"type": "input_text", "text": "What is 2+3?"}]},
    {"type": "function_call", "call_id": "call_add", "name": "add", "arguments": '{"a":2,"b":3}'},
    {"type": "function_call_output", "call_id": "call_add", "output": "5"},
    {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Add them."}]},
    {"role": "assistant", "phase": None, "content": [{"type": "output_text", "text": "5."}]},
    {"role": "assistant", "phase": "final_answer", "content": "Five."},
    {"role": "user", "content": "And 5+5?"},
]


def test_stored_endpoint_bodies_conform(api):
    tools = [{"type": "function", "name": "add", "parameters": {"type": "object"}}]
    status, r, _ = post(api, "/v1/responses", {"input": INPUT, "tools": tools, "loopwire_replay": {"text": "10."}})
    assert status == 200, r
    status, got, _ = request(api, "GET", f"/v1/responses/{r['id']}")
    assert status == 200
    validate("ResponseResource", got)
    status, page, _ = request(api, "GET", f"/v1/responses/{r['id']}/input_items?order=asc")
    assert status == 200 and len(page["data"]) == len(INPUT)
    validate("ItemList", page)
    status, reply, _ = request(api, "POST", f"/v1/responses/{r['id']}/cancel", b"")
    assert status == 400
    validate("HttpError", reply)
    status, deleted, _ = request(api, "DELETE", f"/v1/responses/{r['id']}")
    assert status == 200
    validate("Deleted", deleted)
    for method in ("GET", "DELETE"):
        status, reply, _ = request(api, method, f"/v1/responses/{r['id']}")
        assert status == 404
        validate("HttpError", reply)


def test_input_tokens_and_compact_conform(api):
    status, counted, _ = post(api, "/v1/responses/input_tokens", {"input": INPUT})
    assert status == 200
    validate("InputTokens", counted)
    status, compacted, _ = post(api, "/v1/responses/compact", {
        "input": INPUT, "loopwire_replay": {"text": "The user asked for sums: 2+3 is 5; now 5+5."}})
    assert status == 200, compacted
    validate("CompactResource", compacted)
    status, reply, _ = post(api, "/v1/responses/compact", {"input": "hi", "stream": True})
    assert status == 400
    validate("HttpError", reply)
