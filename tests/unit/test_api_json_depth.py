"""The api bounds JSON nesting as every tier does (``loopwire.common.json_limits``): a body, a
tool schema inside it, and a call's ``arguments`` string (JSON the gateway parses again) deeper
than ``MAX_JSON_DEPTH`` is a 400 naming the limit, never a 500 or an error from deeper in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwire.api import items
from loopwire.api.chat import parse_chat
from loopwire.api.create import parse_create
from loopwire.api.errors import ApiError
from loopwire.common.json_limits import MAX_JSON_DEPTH


def nested(levels: int) -> str:
    """``levels`` arrays, one inside the other."""
    return "[" * levels + "]" * levels


def body_with(value: str, levels_above: int = 1) -> bytes:
    """A body whose innermost container is ``levels_above`` objects down, then ``value``."""
    return ('{"a":' * levels_above + value + "}" * levels_above).encode()


def refused(call, *args, **kwargs) -> ApiError:
    with pytest.raises(ApiError) as e:
        call(*args, **kwargs)
    assert e.value.status == 400 and e.value.code == "invalid_json"
    assert f"limit of {MAX_JSON_DEPTH} levels" in e.value.message
    return e.value


def test_a_body_at_the_limit_is_accepted_one_level_deeper_refused():
    assert items.json_object(body_with(nested(MAX_JSON_DEPTH - 1)))
    refused(items.json_object, body_with(nested(MAX_JSON_DEPTH)))


@given(st.integers(min_value=2, max_value=3 * MAX_JSON_DEPTH))
def test_the_bound_is_the_shared_one(levels):
    body = body_with(nested(levels - 1))  # ``levels`` containers in all
    if levels <= MAX_JSON_DEPTH:
        assert items.json_object(body)
    else:
        refused(items.json_object, body)


def test_a_100000_deep_tool_schema_is_400():
    schema = '{"type":"object","properties":{"x":' + '{"items":' * 100_000 + "{}" + "}" * 100_000 + "}}"
    body = ('{"model":"loopwire","input":"hi","tools":[{"type":"function","name":"f","parameters":' + schema
            + "}]}").encode()
    refused(items.json_object, body)


DEEP_ARGUMENTS = nested(100_000)


def test_deep_arguments_of_an_input_function_call_are_400():
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": DEEP_ARGUMENTS}
    e = refused(parse_create, {"model": "loopwire", "input": [call]}, models=["loopwire"])
    assert e.param == "input[0].arguments"


def test_deep_arguments_of_a_chat_tool_call_are_400():
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                      "function": {"name": "f", "arguments": DEEP_ARGUMENTS}}]}]
    e = refused(parse_chat, {"model": "loopwire", "messages": messages}, ["loopwire"])
    assert e.param == "messages[1].tool_calls[0].function.arguments"


def test_deep_arguments_of_a_replayed_call_are_400():
    replay = {"function_calls": [{"call_id": "c1", "name": "f", "arguments": DEEP_ARGUMENTS}]}
    refused(parse_create, {"model": "loopwire", "input": "hi", "loopwire_replay": replay}, models=["loopwire"])


@pytest.mark.parametrize("arguments", ["{}", '{"city": "Paris"}', "not json", "{unfinished", nested(MAX_JSON_DEPTH)])
def test_arguments_within_the_bound_or_not_json_pass_as_they_are(arguments):
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments}
    parsed = parse_create({"model": "loopwire", "input": [call]}, models=["loopwire"])
    assert parsed.create.input[0].function_call.arguments == arguments
