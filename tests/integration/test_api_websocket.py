"""WebSocket mode on /v1/responses: the openai SDK's ``responses.connect()`` for the protocol,
a raw ``websockets`` client for what the SDK never does (binary frames, closing mid-response)."""

from __future__ import annotations

import json

import pytest
from api_mesh import ENDS, KEYS, sdk, start_api_mesh, until_end
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

pytestmark = [pytest.mark.e2e]



@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-ws"))
    yield m
    m.mesh.stop()


def create(text: str, reply: str, **fields) -> dict:
    return {"type": "response.create", "model": "loopwire", "input": [{"role": "user", "content": text}],
            "loopwire_replay": {"text": reply}, **fields}


def test_turns_on_one_connection_send_only_new_items(api):
    with sdk(api).responses.connect() as conn:
        conn.send(create("Describe Paris in detail. " * 30, "Paris is big."))
        first = until_end(conn)[-1].response
        conn.send(create("And Lyon?", "Lyon is smaller.", previous_response_id=first.id))
        second = until_end(conn)[-1].response
    assert (first.output_text, second.output_text) == ("Paris is big.", "Lyon is smaller.")
    assert second.usage.input_tokens > first.usage.input_tokens
    stats1, stats2 = first.model_extra["loopwire"], second.model_extra["loopwire"]
    assert stats2["bytes_received_by_gateway"] < stats1["bytes_received_by_gateway"] // 5
    assert stats2["tokens_tokenized"] < stats1["tokens_tokenized"] // 2


def test_previous_response_not_found_then_full_resend_on_the_same_connection(api):
    with sdk(api).responses.connect() as conn:
        conn.send(create("hi", "ignored", previous_response_id="resp_feedfacefeedface"))
        error = until_end(conn)[-1]
        assert error.type == "error" and error.status == 400
        assert error.error.code == "previous_response_not_found" and error.error.param == "previous_response_id"
        conn.send(create("hi", "hello again"))
        assert until_end(conn)[-1].response.output_text == "hello again"


def test_responses_queue_one_at_a_time_in_order(api):
    with sdk(api).responses.connect() as conn:
        for n in range(3):
            conn.send(create(f"question {n}", f"answer {n}"))
        runs = [until_end(conn) for _ in range(3)]
    for n, events in enumerate(runs):
        rid = events[0].response.id
        assert {e.response.id for e in events if hasattr(e, "response")} == {rid}
        # no event of another response inside this one (item ids carry their response's id)
        assert all(rid.removeprefix("resp_") in e.item_id for e in events if hasattr(e, "item_id"))
        assert events[-1].response.output_text == f"answer {n}"


def test_generate_false_holds_the_request_for_the_next_one(api):
    with sdk(api).responses.connect() as conn:
        conn.send({**create("Context: the answer is 42. " * 10, "unused"), "generate": False})
        held = until_end(conn)[-1].response
        assert held.status == "completed" and held.output == [] and held.usage.input_tokens == 0
        conn.send(create("What is the answer?", "42", previous_response_id=held.id))
        answer = until_end(conn)[-1].response
    assert answer.output_text == "42"
    assert answer.usage.input_tokens > 60  # both requests' items were the prompt


def test_continuing_an_http_response_on_a_new_connection(api):
    c = sdk(api)
    root = c.responses.create(model="loopwire", input="Pick a city. " * 20, extra_body={"loopwire_replay": {
        "text": "Paris."}})
    with c.responses.connect() as conn:  # not the connection (there was none) that made it
        conn.send(create("Why?", "It is pretty.", previous_response_id=root.id))
        branch = until_end(conn)[-1].response
    assert branch.output_text == "It is pretty."
    assert branch.model_extra["loopwire"]["tokens_tokenized"] < root.usage.input_tokens // 2


def test_forking_twice_from_the_same_stored_response(api):
    c = sdk(api)
    root = c.responses.create(model="loopwire", input="Pick a city. " * 20, extra_body={"loopwire_replay": {
        "text": "Paris."}})
    with c.responses.connect() as conn:
        conn.send(create("Why?", "It is pretty.", previous_response_id=root.id))
        until_end(conn)
    with c.responses.connect() as other:
        other.send(create("Pick another.", "Rome.", previous_response_id=root.id))
        assert until_end(other)[-1].response.output_text == "Rome."


def test_forking_from_a_response_two_turns_back(api):
    c = sdk(api)
    root = c.responses.create(model="loopwire", input="Pick a city. " * 20, extra_body={"loopwire_replay": {
        "text": "Paris."}})
    with c.responses.connect() as conn:
        conn.send(create("Why?", "It is pretty.", previous_response_id=root.id))
        branch = until_end(conn)[-1].response
        conn.send(create("More?", "Food.", previous_response_id=branch.id))
        third = until_end(conn)[-1].response
    with c.responses.connect() as other:
        other.send(create("Pick another.", "Rome.", previous_response_id=root.id))
        fork = until_end(other)[-1].response
    assert fork.output_text == "Rome."
    # Forked at root: the prompt is root's plus one message (not the chain's), and root's ids are reused.
    assert root.usage.input_tokens < fork.usage.input_tokens < third.usage.input_tokens
    assert fork.model_extra["loopwire"]["tokens_tokenized"] < root.usage.input_tokens // 2
    # The chain still continues from its newest response.
    with c.responses.connect() as conn:
        conn.send(create("Last?", "Done.", previous_response_id=third.id))
        assert until_end(conn)[-1].response.output_text == "Done."


def _url(api) -> str:
    return f"ws://{api.api}/v1/responses"


def test_binary_frames_and_junk_get_error_events_and_the_connection_lives(api):
    with connect(_url(api), additional_headers={"authorization": f"Bearer {KEYS['alpha']}"}) as ws:
        ws.send(b"\x00\x01binary")
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] == "error" and event["status"] == 400
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=30))["error"]["code"] == "invalid_json"
        ws.send(json.dumps({"type": "response.cancel_everything"}))
        assert json.loads(ws.recv(timeout=30))["error"]["code"] == "invalid_event"
        ws.send(json.dumps({**create("hi", "fine"), "bogus": 1}))
        assert json.loads(ws.recv(timeout=30))["error"]["code"] == "unknown_parameter"
        ws.send(json.dumps(create("hi", "fine")))
        while (event := json.loads(ws.recv(timeout=30)))["type"] not in ENDS:
            pass
        assert event["response"]["output"][0]["content"][0]["text"] == "fine"


def test_closing_mid_response_then_the_server_keeps_serving(api):
    with connect(_url(api), additional_headers={"authorization": f"Bearer {KEYS['alpha']}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "Write forever.",
                            "max_output_tokens": 400}))
        while json.loads(ws.recv(timeout=30))["type"] != "response.output_text.delta":
            pass
    # closed mid-response; a new connection is served at once
    with sdk(api).responses.connect() as conn:
        conn.send(create("Still there?", "Yes."))
        assert until_end(conn)[-1].response.output_text == "Yes."
    assert "WS response.create" in api.log()


def test_a_bad_key_is_refused_at_the_handshake(api):
    with pytest.raises(InvalidStatus) as e, connect(_url(api), additional_headers={"authorization": "Bearer nope"}):
        pass
    assert e.value.response.status_code == 401
