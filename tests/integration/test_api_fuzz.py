"""Invariant 8 for the HTTP front door: any JSON body -- random values in every field, lone
surrogate escapes, deep nesting, numbers no float or protobuf field holds -- gets a 2xx or a 4xx
with an OpenAI error object, never a 5xx, and the server keeps serving."""

from __future__ import annotations

import http.client
import json

import pytest
from api_mesh import KEYS, start_api_mesh
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

# JSON text no json.dumps of a Python value writes: a strategy of raw fragments instead.
NASTY = ['"\\ud800"', '"a\\udfffb"', '"\\udc80\\ud800"', "1e400", "-1e400", "1" + "0" * 400, "-" + "9" * 4000,
         "NaN", "Infinity", "[" * 100_000, "[" * 5000 + "]" * 5000, '{"a":' * 3000 + "1" + "}" * 3000,
         '{"\\ud800": 1}', "0.1e-400", "18446744073709551616", "-1", "0", "true", "null", '""', "[]", "{}"]
SURROGATES = st.sampled_from(["\ud800", "\udfff", "\udc80"])
TEXT = st.text(st.one_of(st.characters(), SURROGATES), max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(2**70), 2**70), st.floats(), TEXT)
VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3),
                      max_leaves=8)


def fragment(values: st.SearchStrategy) -> st.SearchStrategy[str]:
    """JSON text of a random value, or a raw nasty fragment."""
    return st.one_of(values.map(lambda v: json.dumps(v, allow_nan=True)), st.sampled_from(NASTY))


def maybe(**fields: st.SearchStrategy) -> st.SearchStrategy[dict[str, str]]:
    return st.fixed_dictionaries({}, optional={k: fragment(v) for k, v in fields.items()})


def shaped(key: str, kind: st.SearchStrategy, **fields: st.SearchStrategy) -> st.SearchStrategy[str]:
    """An object of the right shape (its ``key``, often a known kind) with random or nasty values
    elsewhere: reaches the deeper parsers."""
    return st.fixed_dictionaries({key: fragment(kind)}, optional={k: fragment(v) for k, v in fields.items()}).map(
        lambda d: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in d.items()) + "}")


def listed(element: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.lists(element, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"), fragment(VALUES))


def usually(known: list[str]) -> st.SearchStrategy[object]:
    """One of the ``known`` values three times in four, else anything."""
    return st.integers(0, 3).flatmap(lambda n: VALUES if n == 0 else st.sampled_from(known))


ROLES = usually(["user", "assistant", "system", "developer", "tool"])
ITEM_TYPES = usually(["message", "function_call", "function_call_output", "reasoning", "x"])
CONTENT = st.one_of(TEXT, st.lists(st.fixed_dictionaries({"type": st.sampled_from(["input_text", "refusal", "x"])},
                                                         optional={"text": VALUES, "refusal": VALUES})), VALUES)
TOOL_TYPES = usually(["function", "web_search", "x"])
CALLS = st.lists(st.fixed_dictionaries({}, optional={"id": VALUES, "type": VALUES, "function": st.one_of(
    VALUES, st.fixed_dictionaries({}, optional={"name": VALUES, "arguments": VALUES}))}), max_size=2)

RESPONSE_INPUT = listed(shaped("type", ITEM_TYPES, role=ROLES, content=CONTENT, call_id=VALUES, name=VALUES,
                               arguments=VALUES, output=CONTENT, id=VALUES, status=VALUES))
RESPONSE_TOOLS = listed(shaped("type", TOOL_TYPES, name=VALUES, description=VALUES, parameters=VALUES, strict=VALUES))
CHAT_MESSAGES = listed(shaped("role", ROLES, content=CONTENT, tool_calls=st.one_of(CALLS, VALUES),
                              tool_call_id=VALUES, name=VALUES))
CHAT_TOOLS = listed(shaped("type", TOOL_TYPES, function=st.one_of(VALUES, st.fixed_dictionaries(
    {}, optional={"name": VALUES, "description": VALUES, "parameters": VALUES}))))

RESPONSE_FIELDS = ["model", "instructions", "previous_response_id", "store", "stream", "tool_choice",
                   "max_output_tokens", "temperature", "top_p", "metadata", "parallel_tool_calls", "loopwire_replay",
                   "user", "text", "include", "reasoning", "stream_options", "background", "nonsense"]
CHAT_FIELDS = ["model", "tool_choice", "stream", "stream_options", "max_tokens", "max_completion_tokens",
               "temperature", "top_p", "stop", "seed", "n", "user", "metadata", "store", "response_format",
               "loopwire_replay", "nonsense"]


def body(fields: list[str], structured: dict[str, st.SearchStrategy[str]],
         base: dict[str, object]) -> st.SearchStrategy[bytes]:
    """A request that is valid but for one to three fuzzed fields (so they get past the earlier
    checks), the structured ones (input items, tools, messages) half of the time."""
    strategies = {f: fragment(VALUES) for f in fields} | structured
    name = st.sampled_from(sorted(structured)) | st.sampled_from(sorted(strategies))
    fuzzed = st.lists(name, min_size=1, max_size=3, unique=True).flatmap(
        lambda chosen: st.fixed_dictionaries({k: strategies[k] for k in chosen}))

    def render(d: dict[str, str]) -> bytes:
        merged = {k: json.dumps(v) for k, v in base.items()} | d
        return ("{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in merged.items()) + "}").encode()

    return fuzzed.map(render)


RESPONSE_BODIES = body(RESPONSE_FIELDS, {"input": RESPONSE_INPUT, "tools": RESPONSE_TOOLS},
                       {"model": "loopwire", "input": "hi", "max_output_tokens": 2})
CHAT_BODIES = body(CHAT_FIELDS, {"messages": CHAT_MESSAGES, "tools": CHAT_TOOLS},
                   {"model": "loopwire", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-fuzz"))
    yield m
    m.mesh.stop()


def post(api, path: str, data: bytes) -> tuple[int, bytes]:
    host, port = api.api.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", path, body=data, headers={"content-type": "application/json",
                                                       "authorization": f"Bearer {KEYS['alpha']}"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def check_answer(status: int, data: bytes, sent: bytes) -> dict | None:
    assert status < 500, (status, data[:500], sent[:500])
    if status >= 400:
        error = json.loads(data)["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], (data, sent[:500])
        return error
    assert 200 <= status < 300
    return None


def still_serving(api) -> None:
    status, data = post(api, "/v1/responses", json.dumps({"model": "loopwire", "input": "still there?",
                                                          "loopwire_replay": {"text": "yes"}}).encode())
    assert status == 200 and json.loads(data)["output"][0]["content"][0]["text"] == "yes"


RESPONSES, CHAT = "/v1/responses", "/v1/chat/completions"


def responses(fields: str) -> tuple[str, bytes]:
    return RESPONSES, ('{"model": "loopwire", ' + fields + "}").encode()


def chat(fields: str) -> tuple[str, bytes]:
    return CHAT, ('{"model": "loopwire", ' + fields + "}").encode()


@pytest.mark.parametrize(("request_", "code"), [
    (responses('"input": "\\ud800"'), "invalid_json"),
    (responses('"input": [{"role": "user", "content": "a\\udfff"}]'), "invalid_json"),
    (responses('"input": "hi", "instructions": "\\udc80"'), "invalid_json"),
    (responses('"input": "hi", "metadata": {"\\ud800": "x"}'), "invalid_json"),
    (responses('"input": ' + "[" * 100_000 + "]" * 100_000), "invalid_json"),
    (responses('"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": '
               + '{"a":' * 900 + "1" + "}" * 901 + "]"), "invalid_json"),
    (responses('"input": "hi", "max_output_tokens": 1e400'), "invalid_value"),
    (responses('"input": "hi", "max_output_tokens": 1' + "0" * 400), "invalid_value"),
    (responses('"input": "hi", "temperature": 1' + "0" * 400), "invalid_value"),
    (responses('"input": "hi", "temperature": NaN'), "invalid_json"),
    (responses('"input": [{"type": []}]'), "unsupported_parameter"),
    (responses('"input": [{"role": {}}]'), "invalid_value"),
    (responses('"input": [{"role": "user", "content": [{"type": ["text"]}]}]'), "unsupported_parameter"),
    (responses('"input": "hi", "tools": [{"type": ["function"]}]'), "unsupported_parameter"),
    (chat('"messages": [{"role": "\\ud800"}]'), "invalid_json"),
    (chat('"messages": [{"role": ["user"]}]'), "invalid_value"),
    (chat('"messages": [{"role": "assistant", "tool_calls": 5}]'), "invalid_type"),
    (chat('"messages": [{"role": "user", "content": "hi"}], "seed": 1e400'), "invalid_value"),
])
def test_named_bad_values_are_400s(api, request_, code):
    path, sent = request_
    status, data = post(api, path, sent)
    error = check_answer(status, data, sent)
    assert status == 400 and error is not None and error["code"] == code, data
    still_serving(api)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sent=RESPONSE_BODIES)
def test_fuzzed_responses_bodies_never_get_a_5xx(api, sent):
    check_answer(*post(api, RESPONSES, sent), sent)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sent=CHAT_BODIES)
def test_fuzzed_chat_bodies_never_get_a_5xx(api, sent):
    check_answer(*post(api, CHAT, sent), sent)


# No shrinking: a lost answer costs a whole receive timeout per shrinking step.
@settings(max_examples=200, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sent=RESPONSE_BODIES)
def test_fuzzed_websocket_messages_get_an_event_each(api, sent):
    """Every response.create message is answered: an error event (never a 5xx) or a response."""
    message = b'{"type":"response.create",' + sent[1:]
    host_port = api.api
    with connect(f"ws://{host_port}/v1/responses", additional_headers={"authorization": f"Bearer {KEYS['alpha']}"},
                 open_timeout=30, close_timeout=5) as ws:
        ws.send(message.decode())
        while True:
            event = json.loads(ws.recv(timeout=20))
            if event["type"] == "error":
                assert event["status"] < 500, (event, sent[:500])
                break
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                break


def test_the_server_still_serves_after_the_fuzzing(api):
    still_serving(api)
    assert "unhandled error" not in api.log()
