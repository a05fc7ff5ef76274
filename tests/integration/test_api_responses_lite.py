"""What Codex and the Open Responses specification (2026-04-24) send beyond plain tools, on the
real mesh (dummy model, constrained decoding): Responses Lite's ``additional_tools`` input items
(namespaces included), ``custom`` tools with a Lark grammar that constrains the call's input, and
echoes the specification's schemas accept."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from api_mesh import start_api_mesh
from openresponses_schema import validate, validate_event
from test_api_conformance import request, sse_events

from loopwire.api.lark_grammar import to_pattern

pytestmark = [pytest.mark.e2e]

# A quote, a backslash and a newline in the grammar's literals: the JSON string of the call
# escapes them, the input the client gets back holds them as written.
LARK = 'start: "say " WORD END\nWORD: /[a-z]{1,6}/\nEND: "\\"" | "\\\\" | LF\n%import common.LF\n'
SAY = {"type": "custom", "name": "say", "description": "Say one word.",
       "format": {"type": "grammar", "syntax": "lark", "definition": LARK}}
CRM = {"type": "namespace", "name": "crm", "description": "The customer database.", "tools": [
    {"type": "function", "name": "get_customer", "description": "Look a customer up.",
     "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
     "strict": True},
    {"type": "custom", "name": "note", "description": "Write a note.",
     "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "note: " /[a-z ]{1,12}/'}}]}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-lite"))
    yield m
    m.mesh.stop()


def post(api, body: dict[str, Any], path: str = "/v1/responses") -> tuple[int, Any]:
    status, reply, raw = request(api, "POST", path, json.dumps({"model": "loopwire", **body}))
    assert reply is not None, raw
    return status, reply


def streamed(api, body: dict[str, Any]) -> list[dict[str, Any]]:
    status, _, raw = request(api, "POST", "/v1/responses", json.dumps({"model": "loopwire", "stream": True, **body}))
    assert status == 200, raw
    events = sse_events(raw)
    for e in events:
        validate_event(e)
    return events


def still_serving(api) -> None:
    status, ok = post(api, {"input": "still serving?", "loopwire_replay": {"text": "yes"}})
    assert status == 200 and ok["output"][0]["content"][0]["text"] == "yes", ok


def test_a_lark_custom_tool_constrains_the_calls_input(api):
    """The real model's call, decoded to the grammar: its input is a sentence of the language,
    quotes, backslashes and newlines included."""
    events = streamed(api, {"input": "Say a word.", "tools": [SAY], "tool_choice": {"type": "custom", "name": "say"},
                            "parallel_tool_calls": False, "max_output_tokens": 80})
    done = events[-1]["response"]
    validate("ResponseResource", done)
    assert done["tools"] == [{**SAY}], done["tools"]  # echoed as sent (description, grammar)
    call = done["output"][-1]
    assert call["type"] == "custom_tool_call" and call["name"] == "say", done["output"]
    assert re.fullmatch(r'say [a-z]{1,6}("|\\|\n)', call["input"]), call
    assert re.fullmatch(to_pattern(LARK), call["input"])
    streamed_input = "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta")
    assert streamed_input in ("", call["input"])


@pytest.mark.parametrize(("tools", "param", "says"), [
    ([{**SAY, "format": {**SAY["format"], "definition": "start: greeting\n"}}], "tools[0].format.definition",
     "unknown name"),
    ([{**SAY, "format": {**SAY["format"], "definition": 'start: "(" start ")" | "x"'}}], "tools[0].format.definition",
     "recursive"),
    ([{**SAY, "format": {**SAY["format"], "definition": 'start: /a(?=b)/'}}], "tools[0].format.definition",
     "look-around"),
    ([{**CRM, "tools": [CRM["tools"][0], {**CRM["tools"][1], "format": {
        "type": "grammar", "syntax": "lark", "definition": 'start: "a"\n%ignore " "'}}]}],
     "tools[0].tools[1].format.definition", "%ignore"),
    ([{**SAY, "format": {**SAY["format"], "syntax": "ebnf"}}], "tools[0].format.syntax", "regex"),
])
def test_a_bad_grammar_is_a_400_naming_the_tool(api, tools, param, says):
    status, r = post(api, {"input": "hi", "tools": tools})
    assert status == 400, r
    assert (r["error"]["code"], r["error"]["param"]) == ("invalid_value", param), r
    assert says in r["error"]["message"], r
    if param.endswith("definition"):
        assert ("'say'" if param == "tools[0].format.definition" else "'note'") in r["error"]["message"]
    validate("HttpError", r)
    still_serving(api)


def test_additional_tools_join_the_requests_tools(api):
    """Codex's Responses Lite shape: no top-level tools, a leading ``additional_tools`` item."""
    body = {"tools": [], "input": [{"type": "additional_tools", "tools": [CRM, SAY]},
                                   {"role": "user", "content": "Who is customer 7?"}],
            "loopwire_replay": {"function_calls": [{"call_id": "call_c7", "name": "crm.get_customer",
                                                    "arguments": '{"id": 7}'}]}}
    status, r = post(api, body)
    assert status == 200, r
    validate("ResponseResource", r)
    assert [t["name"] for t in r["tools"]] == ["crm", "say"]
    assert [t["name"] for t in r["tools"][0]["tools"]] == ["get_customer", "note"]
    call = r["output"][-1]
    assert (call["type"], call["namespace"], call["name"]) == ("function_call", "crm", "get_customer"), call
    # The additional_tools item is no turn of the conversation: not listed among the input items.
    status, listed, _ = request(api, "GET", f"/v1/responses/{r['id']}/input_items?order=asc")
    assert status == 200, listed
    validate("ItemList", listed)
    assert [i["type"] for i in listed["data"]] == ["message"]
    # The tools an item adds are counted like any others.
    status, counted = post(api, {"input": body["input"]}, "/v1/responses/input_tokens")
    status_plain, plain = post(api, {"input": body["input"][1:]}, "/v1/responses/input_tokens")
    assert status == status_plain == 200 and counted["input_tokens"] > plain["input_tokens"]


def test_a_bad_additional_tool_is_named_in_the_input(api):
    body = {"input": [{"type": "additional_tools", "tools": [CRM, {**SAY, "name": "a.b"}]},
                      {"role": "user", "content": "hi"}]}
    status, r = post(api, body)
    assert status == 400 and (r["error"]["code"], r["error"]["param"]) == ("invalid_value", "input[0].tools[1].name"), r


def test_a_tool_sent_in_both_places_is_offered_once(api):
    status, r = post(api, {"tools": [SAY], "input": [{"type": "additional_tools", "tools": [SAY]},
                                                    {"role": "user", "content": "hi"}],
                           "loopwire_replay": {"text": "ok"}})
    assert status == 200 and [t["name"] for t in r["tools"]] == ["say"], r


def test_minimal_effort_is_echoed_within_the_specifications_values(api):
    status, r = post(api, {"input": "hi", "reasoning": {"effort": "minimal"}, "loopwire_replay": {"text": "ok"}})
    assert status == 200, r
    assert r["reasoning"]["effort"] == "low"
    validate("ResponseResource", r)


def test_a_cut_message_is_incomplete_in_an_incomplete_response(api):
    body = {"input": "hi", "max_output_tokens": 3,
            "loopwire_replay": {"text": "one two three four five six seven eight nine ten"}}
    status, r = post(api, body)
    assert status == 200 and r["status"] == "incomplete", r
    validate("ResponseResource", r)
    assert [i["status"] for i in r["output"] if i["type"] == "message"] == ["incomplete"], r["output"]
    events = streamed(api, body)
    done = [e["item"]["status"] for e in events if e["type"] == "response.output_item.done"]
    assert done == ["incomplete"] and events[-1]["type"] == "response.incomplete"
