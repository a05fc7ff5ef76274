"""tool_choice and structured output through `loopwire api` on a real mesh with the dummy model:
what the api refuses itself, what the gateway refuses (reported under the request's own field
names), WebSocket mode, and random weights that still only produce what the grammar allows."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from api_mesh import KEYS, start_api_mesh
from openai import OpenAI

pytestmark = [pytest.mark.e2e]

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
TOOL = {"type": "function", "name": "get_weather", "parameters": WEATHER}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
ANSWER = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 12},
                                           "confident": {"type": "boolean"}},
          "required": ["capital", "confident"], "additionalProperties": False}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-constrained"))
    yield m
    m.mesh.stop()


@pytest.fixture
def sdk(api) -> OpenAI:
    return OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0)


def bad_request(call, **fields) -> dict:
    with pytest.raises(openai.BadRequestError) as e:
        call(model="loopwire", **fields)
    return e.value.body


def test_random_weights_still_call_the_tool_with_valid_arguments(sdk):
    r = sdk.responses.create(model="loopwire", input="Weather in Paris?", tools=[TOOL], tool_choice="required",
                             parallel_tool_calls=False, max_output_tokens=60)
    [call] = r.output
    assert call.type == "function_call" and call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_random_weights_still_write_schema_valid_json(sdk):
    r = sdk.responses.create(model="loopwire", input="Capital of France?", max_output_tokens=60, text={
        "format": {"type": "json_schema", "name": "answer", "schema": ANSWER, "strict": True}})
    jsonschema.validate(json.loads(r.output_text), ANSWER)
    done = sdk.chat.completions.create(model="loopwire", messages=[{"role": "user", "content": "Capital?"}],
                                       max_tokens=60, response_format={"type": "json_schema", "json_schema": {
                                           "name": "answer", "schema": ANSWER, "strict": True}})
    jsonschema.validate(json.loads(done.choices[0].message.content), ANSWER)
    loose = sdk.chat.completions.create(model="loopwire", messages=[{"role": "user", "content": "JSON?"}],
                                        max_tokens=8, response_format={"type": "json_object"})
    assert loose.choices[0].message.content.startswith("{")  # an object, however far it got


def test_tool_choice_none_never_calls(sdk):
    r = sdk.responses.create(model="loopwire", input="Weather in Paris?", tools=[TOOL], tool_choice="none",
                             max_output_tokens=24)
    assert r.tool_choice == "none" and {o.type for o in r.output} <= {"message"}


def test_websocket_mode_takes_tool_choice_and_text_format(sdk):
    fmt = {"type": "json_schema", "name": "answer", "schema": ANSWER, "strict": True}
    with sdk.responses.connect() as conn:
        conn.send({"type": "response.create", "model": "loopwire", "input": "Weather in Paris?", "tools": [TOOL],
                   "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False,
                   "max_output_tokens": 60})
        first = next(e for e in conn if e.type in ("response.completed", "error"))
        assert first.type == "response.completed", first
        [call] = first.response.output
        jsonschema.validate(json.loads(call.arguments), WEATHER)
        conn.send({"type": "response.create", "model": "loopwire", "previous_response_id": first.response.id,
                   "input": [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
                   "max_output_tokens": 60, "tool_choice": "none",  # the conversation's tool stays offered
                   "text": {"format": fmt}})
        second = next(e for e in conn if e.type in ("response.completed", "error"))
        assert second.type == "response.completed", second
        assert second.response.text.format.name == "answer"
        jsonschema.validate(json.loads(second.response.output_text), ANSWER)
        conn.send({"type": "response.create", "model": "loopwire", "input": "hi", "tools": [TOOL],
                   "tool_choice": {"type": "function", "name": "get_stock"}})
        error = next(e for e in conn if e.type in ("response.completed", "error"))
    assert error.type == "error" and error.status == 400 and error.error.param == "tool_choice"


def test_unknown_named_function_is_a_400(sdk):
    body = bad_request(sdk.responses.create, input="hi", tools=[TOOL],
                       tool_choice={"type": "function", "name": "get_stock"})
    assert (body["code"], body["param"]) == ("invalid_value", "tool_choice") and "'get_stock'" in body["message"]
    body = bad_request(sdk.chat.completions.create, messages=[{"role": "user", "content": "hi"}], tools=[CHAT_TOOL],
                       tool_choice={"type": "function", "function": {"name": "get_stock"}})
    assert (body["code"], body["param"]) == ("invalid_value", "tool_choice")


def test_gateway_refusals_name_the_request_fields(sdk):
    """A delta's tools are the conversation's, which only the gateway knows: it refuses the name."""
    first = sdk.responses.create(model="loopwire", input="hi", tools=[TOOL],
                                 extra_body={"loopwire_replay": {"text": "hello"}})
    body = bad_request(sdk.responses.create, previous_response_id=first.id, input="again",
                       tool_choice={"type": "function", "name": "get_stock"})
    assert (body["code"], body["param"]) == ("invalid_value", "tool_choice") and "get_stock" in body["message"]
    body = bad_request(sdk.responses.create, input="hi", tool_choice="required")
    assert (body["code"], body["param"]) == ("invalid_value", "tool_choice")


def test_invalid_json_schema_is_a_400_naming_it(sdk):
    bad = {"type": "object", "properties": {"capital": {"type": "strin"}}}
    body = bad_request(sdk.responses.create, input="hi", text={
        "format": {"type": "json_schema", "name": "answer", "schema": bad}})
    assert (body["code"], body["param"]) == ("invalid_value", "text.format.schema")
    assert "'text.format.schema.properties.capital.type'" in body["message"]
    body = bad_request(sdk.chat.completions.create, messages=[{"role": "user", "content": "hi"}], response_format={
        "type": "json_schema", "json_schema": {"name": "answer", "schema": bad}})
    assert (body["code"], body["param"]) == ("invalid_value", "response_format.json_schema.schema")
    # Valid JSON Schema the grammar cannot hold (a look-ahead): the gateway's compile error.
    lookahead = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=A)[A-Z]+$"}}}
    body = bad_request(sdk.responses.create, input="hi", text={
        "format": {"type": "json_schema", "name": "code", "schema": lookahead}})
    assert body["param"] == "text.format" and "look-around" in body["message"]
    body = bad_request(sdk.chat.completions.create, messages=[{"role": "user", "content": "hi"}], response_format={
        "type": "json_schema", "json_schema": {"name": "code", "schema": lookahead}})
    assert body["param"] == "response_format" and "look-around" in body["message"]
