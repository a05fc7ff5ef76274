"""Compaction v2 (the Open Responses specification, 2026-04-24): a ``compaction_trigger`` item
at the end of a normal create request is answered with a Response whose output is exactly one
``compaction`` item, over HTTP (plain and streamed) and WebSocket mode, with the same fallback as
``/v1/responses/compact`` when the model's summary degenerates; its id continues the chain."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_mesh import KEYS, start_api_mesh
from openresponses_schema import validate, validate_event
from test_api_conformance import request, sse_events
from websockets.sync.client import connect

from loopwire.api.items import compaction_summary

pytestmark = [pytest.mark.e2e]

SUMMARY = "The user asked for the weather in Paris; get_weather reported 18C and sunny. Nothing is left to do."
HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
    {"role": "assistant", "content": "It is 18C and sunny in Paris."},
    {"role": "user", "content": "Thanks. Should I take an umbrella?"},
]
TRIGGER = {"type": "compaction_trigger"}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-compaction-v2"))
    yield m
    m.mesh.stop()


def post(api, **body: Any) -> tuple[int, Any, bytes]:
    return request(api, "POST", "/v1/responses", json.dumps({"model": "loopwire", **body}))


def one_compaction(r: dict[str, Any]) -> str:
    validate("ResponseResource", r)
    assert r["object"] == "response" and r["status"] == "completed", r
    assert [i["type"] for i in r["output"]] == ["compaction"], r["output"]
    return compaction_summary(r["output"][0]["encrypted_content"])


def test_a_trigger_returns_exactly_one_compaction_item(api):
    status, r, _ = post(api, input=[*HISTORY, TRIGGER], loopwire_replay={"text": SUMMARY})
    assert status == 200, r
    text = one_compaction(r)
    assert SUMMARY in text
    # The item stands for the whole conversation: the first and latest user requests are in it.
    assert HISTORY[0]["content"] in text and HISTORY[4]["content"] in text
    assert r["loopwire_compaction"] == {"method": "summary"}
    assert r["usage"]["output_tokens"] > 0


def test_a_streamed_trigger_streams_that_response(api):
    status, _, raw = post(api, input=[*HISTORY, TRIGGER], stream=True, loopwire_replay={"text": SUMMARY})
    assert status == 200
    events = sse_events(raw)
    for e in events:
        validate_event(e)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.output_item.added",
                                           "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(5))
    assert SUMMARY in one_compaction(events[-1]["response"])


def test_a_degenerate_summary_falls_back_to_the_masked_conversation(api):
    status, r, _ = post(api, input=[*HISTORY, TRIGGER], loopwire_replay={"text": "The task is still open. " * 8})
    assert status == 200, r
    text = one_compaction(r)
    assert r["loopwire_compaction"]["method"] == "masked" and "repeats itself" in r["loopwire_compaction"]["reason"]
    assert "It is 18C and sunny in Paris." in text


def test_the_compaction_continues_the_chain(api):
    status, first, _ = post(api, input=HISTORY[:1], loopwire_replay={"text": "Let me look."})
    assert status == 200, first
    status, compacted, _ = post(api, previous_response_id=first["id"], input=[*HISTORY[1:], TRIGGER],
                                loopwire_replay={"text": SUMMARY})
    assert status == 200, compacted
    text = one_compaction(compacted)
    assert HISTORY[0]["content"] in text  # the stored turn before the trigger's request is compacted too
    status, after, _ = post(api, previous_response_id=compacted["id"], input="And tomorrow?",
                            loopwire_replay={"text": "Rain."})
    assert status == 200 and after["previous_response_id"] == compacted["id"], after
    # The continuation's prompt is the compaction and the new turn, not the whole conversation.
    status, listed, _ = request(api, "GET", f"/v1/responses/{after['id']}/input_items?order=asc")
    assert status == 200 and [i["type"] for i in listed["data"]] == ["compaction", "message"], listed


@pytest.mark.parametrize("where", [0, 2])
def test_a_trigger_that_does_not_end_the_input_is_400(api, where):
    given = [*HISTORY[:where], TRIGGER, *HISTORY[where:]]
    status, r, _ = post(api, input=given)
    assert status == 400 and (r["error"]["code"], r["error"]["param"]) == ("invalid_value", f"input[{where}]"), r


def test_a_websocket_trigger_gets_the_compaction_events(api):
    with connect(f"ws://{api.api}/v1/responses", additional_headers={"authorization": f"Bearer {KEYS['alpha']}"},
                 open_timeout=30) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": [*HISTORY, TRIGGER],
                            "loopwire_replay": {"text": SUMMARY}}))
        events = []
        while not events or events[-1]["type"] not in ("response.completed", "error"):
            events.append(json.loads(ws.recv(timeout=60)))
            validate_event(events[-1])
    assert SUMMARY in one_compaction(events[-1]["response"])
