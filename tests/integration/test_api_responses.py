"""POST /v1/responses through the real mesh, driven by the official openai SDK (and raw HTTP
for what no SDK sends: malformed JSON, unknown fields, oversize bodies)."""

from __future__ import annotations

import http.client
import json

import openai
import pytest
from api_mesh import KEYS, MAX_BODY, start_api_mesh
from openai import OpenAI

pytestmark = [pytest.mark.e2e]

REPLY = "The capital of France is Paris."
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-responses"))
    yield m
    m.mesh.stop()


def client(api, tenant="alpha") -> OpenAI:
    return OpenAI(base_url=api.base_url, api_key=KEYS[tenant], max_retries=0)


def raw(api, body: bytes | str, key: str = KEYS["alpha"], path: str = "/v1/responses", method: str = "POST"):
    host, port = api.api.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    conn.request(method, path, body=body, headers=headers)
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, json.loads(data), dict(reply.getheaders())


def test_non_streamed_response_replays_text_and_reports_usage(api):
    r = client(api).responses.create(model="loopwire", input="What is the capital of France?",
                                     extra_body={"loopwire_replay": {"text": REPLY}})
    assert r.id.startswith("resp_") and r.status == "completed" and r.object == "response"
    assert r.output_text == REPLY
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.model_extra["loopwire"]["tokens_tokenized"] > 0


def test_streamed_events_fold_into_the_final_response(api):
    events = list(client(api).responses.create(model="loopwire", input="Capital of France?", stream=True,
                                               extra_body={"loopwire_replay": {"text": REPLY}}))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert "response.output_item.added" in types and "response.output_item.done" in types
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == REPLY == events[-1].response.output_text
    assert events[0].response.id == events[-1].response.id


def test_previous_response_id_chain_sends_and_tokenizes_only_the_delta(api):
    c = client(api)
    first = c.responses.create(model="loopwire", instructions="Be brief.", input="Tell me about Paris. " * 40,
                               extra_body={"loopwire_replay": {"text": REPLY}})
    second = c.responses.create(model="loopwire", instructions="Be brief.", previous_response_id=first.id,
                                input="And Lyon?", extra_body={"loopwire_replay": {"text": "Lyon is in France."}})
    assert second.previous_response_id == first.id and second.output_text == "Lyon is in France."
    # The whole conversation is the prompt, yet only the new item was tokenized ...
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.model_extra["loopwire"]["tokens_tokenized"] < first.usage.input_tokens // 2
    # ... and the replica's prefix cache skipped the prefill of the first turn.
    assert second.usage.input_tokens_details.cached_tokens > 0
    # The same conversation sent in full, unstored: the gateway tokenizes all of it.
    full = c.responses.create(model="loopwire", instructions="Be brief.", store=False, input=[
        {"role": "user", "content": "Tell me about Paris. " * 40},
        {"role": "assistant", "content": REPLY},
        {"role": "user", "content": "And Lyon?"},
    ], extra_body={"loopwire_replay": {"text": "Lyon is in France."}})
    assert full.usage.input_tokens == second.usage.input_tokens
    assert full.model_extra["loopwire"]["tokens_tokenized"] > 4 * second.model_extra["loopwire"]["tokens_tokenized"]


def test_function_tool_call_and_its_output(api):
    c = client(api)
    call = {"call_id": "call_w1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    events = list(c.responses.create(model="loopwire", input="Weather in Paris?", tools=[WEATHER_TOOL],
                                     tool_choice="auto", stream=True,
                                     extra_body={"loopwire_replay": {"text": "", "function_calls": [call]}}))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"}
    done = events[-1].response
    calls = [o for o in done.output if o.type == "function_call"]
    assert [(o.call_id, o.name, json.loads(o.arguments)) for o in calls] == [("call_w1", "get_weather",
                                                                              {"city": "Paris"})]
    follow = c.responses.create(model="loopwire", previous_response_id=done.id, tools=[WEATHER_TOOL],
                                input=[{"type": "function_call_output", "call_id": "call_w1", "output": "sunny"}],
                                extra_body={"loopwire_replay": {"text": "It is sunny."}})
    assert follow.status == "completed" and follow.output_text == "It is sunny."


def test_output_of_an_unknown_call_is_a_400_naming_the_item(api):
    with pytest.raises(openai.BadRequestError) as e:
        client(api).responses.create(model="loopwire", input=[
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "call_nobody", "output": "x"}])
    assert e.value.body["param"] == "input[1].call_id"


def test_max_output_tokens_makes_an_incomplete_response(api):
    r = client(api).responses.create(model="loopwire", input="Write a long story.", max_output_tokens=5,
                                     temperature=0.7)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5 and r.temperature == pytest.approx(0.7)


def test_store_false_cannot_be_continued_over_http(api):
    c = client(api)
    r = c.responses.create(model="loopwire", input="hi", store=False, extra_body={"loopwire_replay": {"text": "yo"}})
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model="loopwire", input="again", previous_response_id=r.id)
    assert e.value.body["code"] == "previous_response_not_found"


def test_previous_response_of_another_tenant_is_not_found(api):
    r = client(api, "alpha").responses.create(model="loopwire", input="secret",
                                              extra_body={"loopwire_replay": {"text": "ok"}})
    with pytest.raises(openai.BadRequestError) as e:  # 400, as OpenAI answers it
        client(api, "beta").responses.create(model="loopwire", input="steal", previous_response_id=r.id)
    assert e.value.status_code == 400 and e.value.body["param"] == "previous_response_id"
    assert e.value.body["code"] == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError):
        client(api).responses.create(model="loopwire", input="x", previous_response_id="resp_0000000000000000")


@pytest.mark.parametrize(("key", "status", "error_type"), [
    ("", 401, "authentication_error"),
    ("lw-not-a-key", 401, "authentication_error"),
    (KEYS["revoked"], 403, "permission_error"),
])
def test_auth_errors(api, key, status, error_type):
    code, body, _ = raw(api, json.dumps({"model": "loopwire", "input": "hi"}), key=key)
    assert code == status and body["error"]["type"] == error_type


def test_rate_limited_tenant_gets_429_with_retry_after(api):
    c = client(api, "slow")
    statuses = []
    for _ in range(4):
        try:
            c.responses.create(model="loopwire", input="hi", max_output_tokens=2)
            statuses.append(200)
        except openai.RateLimitError as e:
            statuses.append(429)
            assert int(e.response.headers["retry-after"]) >= 1
            assert e.body["code"] == "rate_limit_exceeded"
    assert statuses[:2] == [200, 200] and 429 in statuses[2:]


@pytest.mark.parametrize(("body", "status", "code", "param"), [
    ("{not json", 400, "invalid_json", None),
    ("[1, 2]", 400, "invalid_json", None),
    (json.dumps({"model": "loopwire", "input": "hi", "frobnicate": 1}), 400, "unknown_parameter", "frobnicate"),
    (json.dumps({"model": "loopwire", "input": 42}), 400, "invalid_type", "input"),
    (json.dumps({"model": "loopwire", "input": "hi", "temperature": "hot"}), 400, "invalid_type", "temperature"),
    (json.dumps({"model": "loopwire", "input": "hi", "temperature": 9}), 400, "invalid_value", "temperature"),
    (json.dumps({"model": "loopwire", "input": [{"type": "teleport"}]}), 400, "unsupported_parameter",
     "input[0].type"),
    (json.dumps({"model": "loopwire", "input": "hi", "tools": [{"type": "frobnicator"}]}), 400,
     "unsupported_parameter", "tools[0].type"),
    (json.dumps({"model": "loopwire", "input": "hi", "tool_choice": "required"}), 400, "invalid_value",
     "tool_choice"),  # the gateway's verdict: required needs a tool
    (json.dumps({"model": "gpt-9", "input": "hi"}), 404, "model_not_found", "model"),
    (json.dumps({"input": "hi"}), 400, "missing_required_parameter", "model"),
    (json.dumps({"model": "loopwire", "input": "x" * (MAX_BODY + 10)}), 413, "request_too_large", None),
])
def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(api, body, status, code, param):
    got, reply, _ = raw(api, body)
    assert got == status, reply
    assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert reply["error"]["code"] == code and reply["error"]["param"] == param
    r = client(api).responses.create(model="loopwire", input="still there?", extra_body={"loopwire_replay": {
        "text": "yes"}})
    assert r.output_text == "yes"


def test_unknown_route_and_method_are_openai_errors(api):
    assert raw(api, "{}", path="/v1/nothing")[0:2] == (404, {"error": {
        "message": "Invalid URL (POST /v1/nothing)", "type": "invalid_request_error", "param": None,
        "code": "not_found"}})
    assert raw(api, b"", path="/v1/models", method="DELETE")[0] == 405


def test_requests_are_in_the_api_log(api):
    r = client(api).responses.create(model="loopwire", input="log me", extra_body={"loopwire_replay": {"text": "ok"}})
    assert f"id={r.id}" in api.log() and "tenant=alpha" in api.log()
