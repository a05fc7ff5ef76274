"""The request bodies' models (``loopwire.api.request_models``): every refusal is OpenAI's error
naming the request path of the offending value (``input[2].content[0].text``), whatever union
of kinds that value sits in, and the code says what is wrong with it."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.api.chat import parse_chat
from loopwire.api.create import parse_create
from loopwire.api.errors import ApiError

GOOD: dict[str, Any] = {
    "model": "loopwire",
    "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []},
                                          {"type": "refusal", "refusal": "no"}]},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "x"}]},
    ],
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}},
              {"type": "custom", "name": "patch", "format": {"type": "grammar", "syntax": "regex", "definition": "a+"}},
              {"type": "namespace", "name": "crm", "description": "CRM", "tools": [
                  {"type": "function", "name": "lookup"}, {"type": "custom", "name": "note"}]},
              {"type": "web_search", "search_context_size": "low"}],
    "tool_choice": {"type": "function", "name": "f"},
    "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "object"}}, "verbosity": "low"},
    "reasoning": {"effort": "low"},
    "temperature": 0.5,
    "metadata": {"k": "v"},
}


def refused(body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as e:
        parse_create(body, models=["loopwire"])
    assert e.value.status == 400
    return e.value


def test_the_good_body_is_accepted():
    parsed = parse_create(copy.deepcopy(GOOD), models=["loopwire"])
    assert [t.name for t in parsed.create.tools] == ["f", "patch", "crm.lookup", "crm.note"]
    assert parsed.not_offered == ["web_search"]


@pytest.mark.parametrize(("path", "value", "code", "param"), [
    (("input", 2, "content", 0, "text"), 5, "invalid_type", "input[2].content[0].text"),
    # A refusal part's text is its ``refusal`` (the old parser named ``.text``, which it lacks).
    (("input", 2, "content", 1, "refusal"), [], "invalid_type", "input[2].content[1].refusal"),
    (("input", 2, "content", 1, "type"), "input_image", "unsupported_parameter", "input[2].content[1].type"),
    (("input", 3, "output", 0, "text"), None, "invalid_type", "input[3].output[0].text"),
    (("input", 1, "arguments"), {}, "invalid_type", "input[1].arguments"),
    (("tools", 2, "tools", 1, "name"), "a.b", "invalid_value", "tools[2].tools[1].name"),
    (("tools", 2, "tools", 0, "type"), "mcp", "unsupported_parameter", "tools[2].tools[0].type"),
    (("tools", 1, "format", "syntax"), "ebnf", "invalid_value", "tools[1].format.syntax"),
    (("text", "format", "schema"), [], "invalid_type", "text.format.schema"),
    # Echoed as the specification's enumeration: a value outside it was echoed before.
    (("text", "verbosity"), "loud", "invalid_value", "text.verbosity"),
    (("reasoning", "effort"), "maximal", "invalid_value", "reasoning.effort"),
    (("metadata", "k"), 1, "invalid_type", "metadata.k"),
    (("temperature",), True, "invalid_type", "temperature"),
    (("tool_choice", "name"), None, "invalid_type", "tool_choice.name"),
])
def test_a_bad_value_anywhere_is_named_by_its_path(path, value, code, param):
    body = copy.deepcopy(GOOD)
    node = body
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    e = refused(body)
    assert (e.code, e.param) == (code, param), e.message
    assert param in e.message


def test_a_missing_required_key_is_named_though_absent():
    body = copy.deepcopy(GOOD)
    del body["input"][1]["call_id"]
    del body["tool_choice"]["name"]
    e = refused(body)
    assert (e.code, e.param) == ("missing_required_parameter", "input[1].call_id")
    e = refused({**GOOD, "input": "hi", "tool_choice": {"type": "function"}})
    assert (e.code, e.param) == ("missing_required_parameter", "tool_choice.name")


def test_an_unknown_key_is_refused_first():
    body = copy.deepcopy(GOOD)
    body["temperature"] = 7
    body["input"][2]["content"][0]["text"] = 5
    body["tools"][0]["frobnicate"] = 1
    e = refused(body)
    assert (e.code, e.param) == ("unknown_parameter", "tools[0].frobnicate")


def test_chat_bodies_are_named_the_same_way():
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                      "function": {"name": "f", "arguments": 5}}]}]
    with pytest.raises(ApiError) as e:
        parse_chat({"model": "loopwire", "messages": messages}, ["loopwire"])
    assert (e.value.code, e.value.param) == ("invalid_type", "messages[1].tool_calls[0].function.arguments")
    with pytest.raises(ApiError) as e:
        parse_chat({"model": "loopwire", "messages": messages[:1], "stream_options": {"x": 1}}, ["loopwire"])
    assert (e.value.code, e.value.param) == ("unknown_parameter", "stream_options.x")


def _paths(value: Any, prefix: str = "") -> set[str]:
    out = {prefix} if prefix else set()
    if isinstance(value, dict):
        for k, v in value.items():
            out |= _paths(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out |= _paths(v, f"{prefix}[{i}]")
    return out


def _leaves(value: Any, at: tuple = ()) -> list[tuple]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*at, k))] + [at]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*at, i))] + [at]
    return [at]


JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                 st.text(max_size=5), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                          st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(where=st.sampled_from([p for p in _leaves(GOOD) if p]), junk=JUNK)
def test_any_replaced_value_is_refused_at_a_path_of_the_body_or_accepted(where, junk):
    """Whatever value replaces whatever part of a good body, a refusal names a path that is in the
    body (or, for a missing key, whose parent is), never a union's internal label."""
    body = copy.deepcopy(GOOD)
    node = body
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = junk
    try:
        parse_create(body, models=["loopwire"])
    except ApiError as e:
        assert e.status in (400, 404) and e.code, e.message
        if e.param is None:
            return
        paths = _paths(body)
        parent = re.sub(r"(\.[^.\[\]]+|\[\d+\])$", "", e.param)
        # A key that is absent (a required one, a union's ``type``) is named under its object.
        assert e.param in paths or parent in paths or parent == e.param, (e.param, e.code, e.message)
