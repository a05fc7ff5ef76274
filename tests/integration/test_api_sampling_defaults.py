"""Sampling as the OpenAI API defines it: an omitted ``temperature`` and ``top_p`` mean 1.0 (the
bundled model ships no generation defaults), greedy only when asked; and an output limit that
cannot fit the served model's context window is a 400 naming the field, on every front door
(Responses over HTTP and WebSocket, Chat Completions), where it was accepted and capped silently."""

from __future__ import annotations

import json

import pytest
from api_mesh import KEYS, start_api_mesh
from test_api_conformance import request
from websockets.sync.client import connect

from loopwire.api.chat import parse_chat
from loopwire.api.create import parse_create

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-sampling"))
    yield m
    m.mesh.stop()


def window(api) -> int:
    status, models, _ = request(api, "GET", "/v1/models/loopwire")
    assert status == 200 and models["context_window"] > 2, models
    return int(models["context_window"])


def test_omitted_temperature_and_top_p_sample_at_one():
    for body in ({"model": "m", "input": "hi"}, {"model": "m", "input": "hi", "temperature": None}):
        sampling = parse_create(body, models=["m"]).create.sampling
        assert (sampling.temperature, sampling.top_p) == (1.0, 1.0)
    ws = parse_create({"model": "m", "input": "hi", "type": "response.create"}, models=["m"], websocket=True)
    assert (ws.create.sampling.temperature, ws.create.sampling.top_p) == (1.0, 1.0)
    chat, _, _ = parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, ["m"])
    assert (chat.sampling.temperature, chat.sampling.top_p) == (1.0, 1.0)


def test_greedy_only_when_asked():
    sampling = parse_create({"model": "m", "input": "hi", "temperature": 0, "top_p": 0.5}, models=["m"]).create.sampling
    assert (sampling.temperature, sampling.top_p) == (0.0, 0.5)
    chat, _, _ = parse_chat({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}, ["m"])
    assert chat.sampling.temperature == 0.0


def test_the_response_echoes_the_sampling_it_ran_with(api):
    status, r, _ = request(api, "POST", "/v1/responses", json.dumps({
        "model": "loopwire", "input": "hi", "loopwire_replay": {"text": "hey"}}))
    assert status == 200 and (r["temperature"], r["top_p"]) == (1.0, 1.0), r
    status, r, _ = request(api, "POST", "/v1/responses", json.dumps({
        "model": "loopwire", "input": "hi", "temperature": 0, "loopwire_replay": {"text": "hey"}}))
    assert status == 200 and r["temperature"] == 0.0, r


@pytest.mark.parametrize(("path", "field", "base"), [
    ("/v1/responses", "max_output_tokens", {"input": "hi"}),
    ("/v1/chat/completions", "max_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/chat/completions", "max_completion_tokens", {"messages": [{"role": "user", "content": "hi"}]}),
])
def test_an_output_limit_past_the_window_is_400_naming_it(api, path, field, base):
    n = window(api)
    for limit in (n, 10 * n, 2**40):
        status, reply, _ = request(api, "POST", path, json.dumps({"model": "loopwire", **base, field: limit}))
        assert status == 400, reply
        assert (reply["error"]["code"], reply["error"]["param"], reply["error"]["type"]) == (
            "invalid_value", field, "invalid_request_error")
        assert str(n) in reply["error"]["message"]
    status, reply, _ = request(api, "POST", path, json.dumps({"model": "loopwire", **base, field: n - 1,
                                                              "loopwire_replay": {"text": "ok"}}))
    assert status == 200, reply


def test_a_websocket_request_past_the_window_gets_an_error_event(api):
    n = window(api)
    with connect(f"ws://{api.api}/v1/responses", additional_headers={"authorization": f"Bearer {KEYS['alpha']}"},
                 open_timeout=30) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "hi", "max_output_tokens": n}))
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] == "error" and event["status"] == 400, event
        assert (event["error"]["code"], event["error"]["param"]) == ("invalid_value", "max_output_tokens")
        ws.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "hi", "max_output_tokens": 2,
                            "loopwire_replay": {"text": "ok"}}))
        while (event := json.loads(ws.recv(timeout=30)))["type"] not in ("response.completed", "error"):
            pass
        assert event["type"] == "response.completed", event
