"""The Responses tool types beyond ``function`` on the real mesh (dummy model, constrained
decoding): ``custom`` tools take free-form text and come back as ``custom_tool_call`` items,
``namespace`` tools are offered to the model and come back as function calls naming their
namespace, and hosted tools nothing here can run are not offered (and said so)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from api_mesh import start_api_mesh
from openresponses_schema import validate, validate_event
from test_api_conformance import request, sse_events

pytestmark = [pytest.mark.e2e]

PATCH = {"type": "custom", "name": "apply_patch", "description": "Apply a patch to the files.",
         "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z]{1,8}"}}
CRM = {"type": "namespace", "name": "crm", "description": "The customer database.", "tools": [
    {"type": "function", "name": "get_customer", "description": "Look a customer up.",
     "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
    {"type": "custom", "name": "note", "description": "Write a note.",
     "format": {"type": "grammar", "syntax": "regex", "definition": "[a-z ]{1,12}"}}]}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-tools"))
    yield m
    m.mesh.stop()


def post(api, body: dict[str, Any]) -> tuple[int, Any]:
    status, reply, raw = request(api, "POST", "/v1/responses", json.dumps({"model": "loopwire", **body}))
    assert reply is not None, raw
    return status, reply


def streamed(api, body: dict[str, Any]) -> list[dict[str, Any]]:
    status, _, raw = request(api, "POST", "/v1/responses", json.dumps({"model": "loopwire", "stream": True, **body}))
    assert status == 200, raw
    events = sse_events(raw)
    for e in events:
        validate_event(e)
    return events


def test_a_custom_tool_takes_free_form_input_decoded_to_its_grammar(api):
    """The real model's call, constrained: the input is a string the tool's regex accepts."""
    events = streamed(api, {"input": "Fix the bug.", "tools": [PATCH],
                            "tool_choice": {"type": "custom", "name": "apply_patch"}, "parallel_tool_calls": False,
                            "max_output_tokens": 60})
    done = events[-1]["response"]
    validate("ResponseResource", done)
    call = done["output"][-1]
    assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch", done["output"]
    assert re.fullmatch("[a-z]{1,8}", call["input"]), call
    kinds = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in kinds
    delta = [e for e in events if e["type"] == "response.custom_tool_call_input.delta" and e["item_id"] == call["id"]]
    fin = [e for e in events if e["type"] == "response.custom_tool_call_input.done" and e["item_id"] == call["id"]]
    assert "".join(d["delta"] for d in delta) == fin[0]["input"] == call["input"]
    assert done["tools"] == [PATCH] and done["tool_choice"] == {"type": "custom", "name": "apply_patch"}


def test_a_custom_call_and_its_output_continue_the_conversation(api):
    _, first = post(api, {"input": "Fix the bug.", "tools": [PATCH], "loopwire_replay": {"function_calls": [
        {"call_id": "call_p1", "name": "apply_patch", "arguments": json.dumps({"input": "*** Begin Patch\n"})}]}})
    call = first["output"][-1]
    assert (call["type"], call["call_id"], call["input"]) == ("custom_tool_call", "call_p1", "*** Begin Patch\n")
    # continued by id, with tools inherited: the next call is a custom one still
    status, second = post(api, {"previous_response_id": first["id"], "input": [
        {"type": "custom_tool_call_output", "call_id": "call_p1", "output": "Done."}],
        "loopwire_replay": {"function_calls": [{"call_id": "call_p2", "name": "apply_patch",
                                                "arguments": json.dumps({"input": "again"})}]}})
    assert status == 200, second
    validate("ResponseResource", second)
    assert second["output"][-1]["type"] == "custom_tool_call" and second["output"][-1]["input"] == "again"
    # a full resend, store: false, with the call and its output as input items
    status, third = post(api, {"store": False, "tools": [PATCH], "input": [
        {"role": "user", "content": "Fix the bug."}, call,
        {"type": "custom_tool_call_output", "call_id": "call_p1", "output": "Done."}],
        "loopwire_replay": {"text": "Fixed."}})
    assert status == 200 and third["output"][-1]["content"][0]["text"] == "Fixed.", third


def test_a_namespace_offers_its_functions_and_its_calls_name_it(api):
    """The real model must call the namespace's custom tool (named as the model sees it): its call
    comes back split into name and namespace, its input one its grammar accepts."""
    _, r = post(api, {"input": "Note that customer 7 called.", "tools": [CRM],
                      "tool_choice": {"type": "custom", "name": "crm.note"},
                      "parallel_tool_calls": False, "max_output_tokens": 80})
    validate("ResponseResource", r)
    call = r["output"][-1]
    assert (call["type"], call.get("namespace"), call.get("name")) == ("custom_tool_call", "crm", "note"), r
    assert re.fullmatch("[a-z ]{1,12}", call["input"]), call
    assert r["tools"][0]["type"] == "namespace" and [t["name"] for t in r["tools"][0]["tools"]] == \
        ["get_customer", "note"]
    # Sent back with its namespace, the call is the model's own again.
    status, again = post(api, {"store": False, "tools": [CRM], "input": [
        {"role": "user", "content": "Find customer 7."}, call,
        {"type": f"{call['type']}_output", "call_id": call["call_id"], "output": "Ada, id 7."}],
        "loopwire_replay": {"text": "It is Ada."}})
    assert status == 200, again
    assert again["output"][-1]["content"][0]["text"] == "It is Ada."


def test_a_replayed_namespaced_call_streams_its_namespace(api):
    events = streamed(api, {"input": "Find customer 7.", "tools": [CRM], "loopwire_replay": {"function_calls": [
        {"call_id": "call_c1", "name": "crm.get_customer", "arguments": "{\"id\": 7}"}]}})
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert added[-1]["type"] == "function_call" and added[-1]["namespace"] == "crm"
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done[0]["name"] == "get_customer" and done[0]["arguments"] == "{\"id\": 7}"


def test_hosted_tools_are_not_offered_and_the_response_says_so(api):
    tools = [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}},
             {"type": "function", "name": "ls", "parameters": {"type": "object"}}]
    status, r = post(api, {"input": "Search the web.", "tools": tools, "loopwire_replay": {"text": "I cannot."}})
    assert status == 200, r
    validate("ResponseResource", r)
    assert [t["name"] for t in r["tools"]] == ["ls"]
    assert r["loopwire"]["tools_not_offered"] == ["web_search", "code_interpreter"]


@pytest.mark.parametrize(("tools", "choice", "param"), [
    ([{"type": "bogus_tool"}], None, "tools[0].type"),
    ([{**PATCH, "format": {"type": "grammar", "syntax": "ebnf", "definition": "start: 'a'"}}], None,
     "tools[0].format.syntax"),
    ([{**PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": "start: undefined"}}], None,
     "tools[0].format.definition"),
    ([{**PATCH, "format": {"type": "regexp"}}], None, "tools[0].format.type"),
    ([{**PATCH, "name": "a.b"}], None, "tools[0].name"),
    ([{**CRM, "name": "c.r"}], None, "tools[0].name"),
    ([{**CRM, "tools": [{"type": "web_search"}]}], None, "tools[0].tools[0].type"),
    ([{**CRM, "tools": [{"type": "function", "name": "f", "bogus": 1}]}], None, "tools[0].tools[0].bogus"),
    ([PATCH], {"type": "custom", "name": "other"}, "tool_choice"),
    ([{"type": "web_search"}], {"type": "web_search"}, "tool_choice.type"),
])
def test_bad_tools_are_400s_naming_the_field(api, tools, choice, param):
    body: dict[str, Any] = {"input": "hi", "tools": tools, **({"tool_choice": choice} if choice else {})}
    status, r = post(api, body)
    assert status == 400 and r["error"]["param"] == param, r
    validate("HttpError", r)
    status, ok = post(api, {"input": "still serving?", "loopwire_replay": {"text": "yes"}})
    assert status == 200 and ok["output"][0]["content"][0]["text"] == "yes"
