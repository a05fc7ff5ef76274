"""The api's parsing of tool_choice, parallel_tool_calls and structured output (text.format,
response_format) into CreateResponse, and the echo in the Response object: no mesh needed."""

from __future__ import annotations

import json
from collections import OrderedDict

import pytest

from loopwire.api.chat import parse_chat
from loopwire.api.create import parse_create
from loopwire.api.errors import ApiError
from loopwire.api.events import ResponseBuilder
from loopwire.api.websocket import Connection
from loopwire.v1 import common_pb2, gateway_pb2

Mode = common_pb2.ToolChoiceMode
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "name": "get_weather", "parameters": PARAMS},
         {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}]
CHAT_TOOLS = [{"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}} for t in TOOLS]
SCHEMA = {"type": "object", "properties": {"capital": {"type": "string"}}, "required": ["capital"]}


def responses(**fields):
    return parse_create({"model": "loopwire", "input": "hi", **fields}, models=["loopwire"])


def chat(**fields):
    create, _, _ = parse_chat({"model": "loopwire", "messages": [{"role": "user", "content": "hi"}], **fields},
                              ["loopwire"])
    return create


def refused(parse, **fields) -> ApiError:
    with pytest.raises(ApiError) as e:
        parse(**fields)
    assert e.value.status == 400
    return e.value


@pytest.mark.parametrize(("choice", "mode", "name", "echo"), [
    ("none", Mode.TOOL_CHOICE_MODE_NONE, "", "none"),
    ("required", Mode.TOOL_CHOICE_MODE_REQUIRED, "", "required"),
    ({"type": "function", "name": "get_time"}, Mode.TOOL_CHOICE_MODE_FUNCTION, "get_time",
     {"type": "function", "name": "get_time"}),
    ({"type": "function", "function": {"name": "get_time"}}, Mode.TOOL_CHOICE_MODE_FUNCTION, "get_time",
     {"type": "function", "name": "get_time"}),
])
def test_tool_choice_becomes_the_gateway_choice_and_is_echoed(choice, mode, name, echo):
    parsed = responses(tools=TOOLS, tool_choice=choice)
    assert parsed.create.tool_choice == common_pb2.ToolChoice(mode=mode, function_name=name)
    assert parsed.tool_choice == echo
    create = chat(tools=CHAT_TOOLS, tool_choice=choice)
    assert create.tool_choice == common_pb2.ToolChoice(mode=mode, function_name=name)


def test_auto_and_absent_leave_the_gateway_default():
    for fields in ({}, {"tool_choice": "auto"}):
        parsed = responses(tools=TOOLS, **fields)
        assert not parsed.create.HasField("tool_choice") and parsed.tool_choice == "auto"
        assert not parsed.create.HasField("parallel_tool_calls") and parsed.parallel_tool_calls is True
        assert not chat(tools=CHAT_TOOLS, **fields).HasField("tool_choice")


def test_parallel_tool_calls_passes_through_and_is_echoed():
    parsed = responses(tools=TOOLS, parallel_tool_calls=False)
    assert parsed.create.HasField("parallel_tool_calls") and parsed.create.parallel_tool_calls is False
    assert ResponseBuilder(parsed).response()["parallel_tool_calls"] is False
    assert chat(tools=CHAT_TOOLS, parallel_tool_calls=False).parallel_tool_calls is False
    assert refused(responses, parallel_tool_calls="no").param == "parallel_tool_calls"


def test_a_named_function_not_among_the_tools_is_refused_naming_tool_choice():
    for parse, tools, choice in ((responses, TOOLS, {"type": "function", "name": "get_stock"}),
                                 (chat, CHAT_TOOLS, {"type": "function", "function": {"name": "get_stock"}}),
                                 (responses, [], {"type": "function", "name": "get_stock"})):
        e = refused(parse, tools=tools, tool_choice=choice)
        assert (e.code, e.param) == ("invalid_value", "tool_choice") and "'get_stock'" in e.message


def test_a_delta_without_tools_leaves_the_named_function_to_the_gateway():
    parsed = responses(previous_response_id="resp_1", tool_choice={"type": "function", "name": "get_stock"})
    assert parsed.create.tool_choice.function_name == "get_stock"


@pytest.mark.parametrize(("choice", "code", "param"), [
    ("sometimes", "invalid_value", "tool_choice"),
    (["auto"], "invalid_type", "tool_choice"),
    ({"type": "allowed_tools", "mode": "auto", "tools": []}, "unsupported_parameter", "tool_choice.type"),
    ({"type": "web_search"}, "unsupported_parameter", "tool_choice.type"),
    ({"type": "function"}, "missing_required_parameter", "tool_choice.name"),
    ({"type": "function", "name": "get_time", "extra": 1}, "unknown_parameter", "tool_choice.extra"),
    ({"type": "function", "function": "get_time"}, "invalid_type", "tool_choice.function"),
])
def test_malformed_tool_choice(choice, code, param):
    e = refused(responses, tools=TOOLS, tool_choice=choice)
    assert (e.code, e.param) == (code, param)


def test_text_format_json_schema_becomes_the_text_format_and_is_echoed():
    fmt = {"type": "json_schema", "name": "answer", "schema": SCHEMA, "strict": True}
    parsed = responses(text={"format": fmt, "verbosity": "low"})
    assert parsed.create.text_format == gateway_pb2.TextFormat(name="answer", json_schema=json.dumps(SCHEMA),
                                                               strict=True)
    # Echoed with every field the specification requires, null where the request left it out.
    assert ResponseBuilder(parsed).response()["text"] == {"format": {**fmt, "description": None}, "verbosity": "low"}
    loose = responses(text={"format": {**fmt, "strict": None}})
    assert loose.create.text_format.strict is False


def test_json_object_is_a_text_format_without_a_schema():
    parsed = responses(text={"format": {"type": "json_object"}})
    assert parsed.create.HasField("text_format") and parsed.create.text_format == gateway_pb2.TextFormat()
    assert chat(response_format={"type": "json_object"}).text_format == gateway_pb2.TextFormat()


def test_text_is_free_text():
    for text in ({}, {"format": {"type": "text"}}, {"verbosity": "medium"}):
        parsed = responses(text=text)
        assert not parsed.create.HasField("text_format")
        assert ResponseBuilder(parsed).response()["text"]["format"] == {"type": "text"}
    assert not chat(response_format={"type": "text"}).HasField("text_format")


def test_chat_response_format_json_schema():
    create = chat(response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA,
                                                                          "strict": True}})
    assert create.text_format == gateway_pb2.TextFormat(name="answer", json_schema=json.dumps(SCHEMA), strict=True)


def test_an_invalid_schema_is_refused_naming_where_it_is_wrong():
    bad = {"type": "object", "properties": {"capital": {"type": "strin"}}}
    e = refused(responses, text={"format": {"type": "json_schema", "name": "a", "schema": bad}})
    assert (e.code, e.param) == ("invalid_value", "text.format.schema")
    assert "'text.format.schema.properties.capital.type'" in e.message and "'strin'" in e.message
    e = refused(chat, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": bad}})
    assert e.param == "response_format.json_schema.schema" and "properties.capital.type" in e.message


@pytest.mark.parametrize(("text", "code", "param"), [
    ({"format": {"type": "xml"}}, "invalid_value", "text.format.type"),
    ({"format": {"type": "json_schema", "name": "a"}}, "missing_required_parameter", "text.format.schema"),
    ({"format": {"type": "json_schema", "schema": SCHEMA}}, "missing_required_parameter", "text.format.name"),
    ({"format": {"type": "json_schema", "name": "a", "schema": True}}, "invalid_type", "text.format.schema"),
    ({"format": {"type": "json_schema", "name": "a", "schema": SCHEMA, "strict": "yes"}}, "invalid_type",
     "text.format.strict"),
    ({"format": {"type": "json_object", "schema": SCHEMA}}, "unknown_parameter", "text.format.schema"),
    ({"format": "json"}, "invalid_type", "text.format"),
    ({"format": []}, "invalid_type", "text.format"),
    ({"colour": "blue"}, "unknown_parameter", "text.colour"),
    ("json", "invalid_type", "text"),
])
def test_malformed_text_format(text, code, param):
    e = refused(responses, text=text)
    assert (e.code, e.param) == (code, param)


def test_malformed_chat_response_format():
    e = refused(chat, response_format={"type": "json_schema", "schema": SCHEMA})
    assert (e.code, e.param) == ("unknown_parameter", "response_format.schema")
    e = refused(chat, response_format={"type": "json_schema"})
    assert (e.code, e.param) == ("missing_required_parameter", "response_format.json_schema")


def test_gateway_errors_name_the_request_fields():
    def failed(field: str) -> gateway_pb2.ConverseResponse:
        return gateway_pb2.ConverseResponse(failed=gateway_pb2.ResponseFailed(error=common_pb2.Error(
            code=common_pb2.ERROR_CODE_INVALID_ARGUMENT, message="no", field=field)))

    for field, param in (("create_response.tool_choice.function_name", "tool_choice"),
                         ("create_response.text_format.json_schema", "text.format.schema"),
                         ("create_response.text_format", "text.format"),
                         ("create_response.tools", "tools")):
        with pytest.raises(ApiError) as e:
            ResponseBuilder(responses()).feed(failed(field))
        assert e.value.param == param


def test_a_held_websocket_request_takes_the_next_ones_constraint():
    conn = Connection(None, None, "")  # type: ignore[arg-type]
    held = parse_create({"model": "loopwire", "input": "hi", "tools": TOOLS, "tool_choice": "required"},
                        models=[], websocket=True)
    conn.held = OrderedDict(resp_held=held)
    fmt = {"type": "json_schema", "name": "a", "schema": SCHEMA}
    merged = conn._merge_held(parse_create({"model": "loopwire", "previous_response_id": "resp_held", "input": "go",
                                            "tool_choice": {"type": "function", "name": "get_time"},
                                            "parallel_tool_calls": False, "text": {"format": fmt}},
                                           models=[], websocket=True)).create
    assert [t.name for t in merged.tools] == ["get_weather", "get_time"] and len(merged.input) == 2
    assert merged.tool_choice.function_name == "get_time" and merged.parallel_tool_calls is False
    assert merged.text_format.name == "a"
    conn.held = OrderedDict(resp_held=held)
    plain = conn._merge_held(parse_create({"model": "loopwire", "previous_response_id": "resp_held", "input": "go"},
                                          models=[], websocket=True)).create
    assert not plain.HasField("tool_choice") and not plain.HasField("parallel_tool_calls")
