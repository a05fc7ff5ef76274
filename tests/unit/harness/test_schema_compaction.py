"""Schema compaction keeps what a schema accepts and rejects: checked with `jsonschema` on BFCL's
ground-truth arguments and on argument objects generated from the schemas (schema_instances: valid ones and broken ones)."""

from __future__ import annotations

import json
import random

import pytest
from schema_instances import generate, same_verdicts

from loopwire.harness import schema_compaction as sc
from loopwire.harness import tool_eval
from loopwire.v1 import common_pb2

TRICKY = [
    # A property *named* like annotation keywords must stay.
    {"type": "object", "properties": {"default": {"type": "integer", "default": 3},
                                      "description": {"type": "string", "description": "d"},
                                      "title": {"type": "boolean", "title": "t"}},
     "required": ["default", "description"], "additionalProperties": False},
    # $ref with a sibling keyword (ignored by draft 7): never merged into a branch.
    {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"n": {"type": "integer", "minimum": 2}},
     "type": "object", "properties": {"a": {"allOf": [{"$ref": "#/definitions/n"}], "maximum": 9},
                                      "b": {"anyOf": [{"type": "string", "maxLength": 3}], "title": "B"}}},
    # Defaults of every kind (validation ignores them all), meaningful and trivial, some enum choices.
    {"type": "object", "properties": {
        "url": {"type": "string", "default": "https://api.example.org/v1/{id}", "format": "uri"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "level": {"type": "integer", "enum": [0, 1, 2], "default": 0, "minimum": 0},
        "limit": {"type": "integer", "default": 10, "maximum": 50},
        "offset": {"type": "integer", "default": 0},
        "verbose": {"type": "boolean", "default": False}, "strict": {"type": "boolean", "default": True},
        "tags": {"type": "array", "items": {"type": "string", "default": ""}, "default": []},
        "extra": {"type": ["object", "null"], "default": None, "properties": {"k": {"default": {}}}}},
     "required": ["unit"], "default": {"unit": "celsius"}},
    # Single-branch combinators whose keys clash with the parent's, nested arrays, enums, type lists.
    {"type": "object", "properties": {
        "c": {"type": "string", "oneOf": [{"type": "string", "pattern": "^x"}]},
        "d": {"type": ["array"], "items": {"type": "object", "properties": {"e": {"enum": [1, "1", None]}},
                                           "required": ["e"], "examples": [{"e": 1}]}, "minItems": 1},
        "f": {"type": ["number", "null"], "exclusiveMaximum": 5, "x-internal": True}},
     "required": ["d"]},
]


def ground_truth_args(calls) -> list[dict]:  # noqa: ANN001
    """BFCL's acceptable values per parameter ("" means: may be left out), two ways each."""
    out = []
    for _, params in calls:
        first = {k: v[0] for k, v in params.items() if v and v[0] != ""}
        last = {k: v[-1] for k, v in params.items() if v and v[-1] != ""}
        out += [first, last]
    return out


def test_tricky_schemas_keep_their_verdicts_at_every_level():
    rng = random.Random(7)
    for schema in TRICKY:
        instances = [generate(schema, rng) for _ in range(400)]
        for level in range(1, sc.LEVELS + 1):
            compacted = sc.compact_schema(schema, level)
            valid, invalid = same_verdicts(schema, compacted, instances)
            assert valid > 20 and invalid > 20  # both sides of the line are exercised
    c = sc.compact_schema(TRICKY[0], 3)
    assert set(c["properties"]) == {"default", "description", "title"} and c["required"] == ["default", "description"]
    assert c["properties"]["default"] == {"type": "integer", "default": 3}  # a meaningful default stays
    assert "description" not in c["properties"]["description"]
    b = sc.compact_schema(TRICKY[1], 1)
    assert b["properties"]["a"]["allOf"] == [{"$ref": "#/definitions/n"}]  # not merged next to $ref
    assert b["properties"]["b"] == {"type": "string", "maxLength": 3}  # merged: no clash, title dropped


def test_meaningful_defaults_survive_every_level_and_trivial_ones_go():
    schema = TRICKY[2]
    kept = {"url": "https://api.example.org/v1/{id}", "unit": "celsius", "level": 0, "limit": 10, "strict": True}
    for level in range(1, sc.LEVELS + 1):
        c = sc.compact_schema(schema, level)
        assert {k: p["default"] for k, p in c["properties"].items() if "default" in p} == kept
        assert c["default"] == {"unit": "celsius"}
        assert c["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
        assert c["properties"]["extra"] == {"type": ["object", "null"], "properties": {"k": {}}}
    tool = common_pb2.Tool(name="fetch", description="Fetches a resource. Long details follow here.",
                           parameters=json.dumps(schema))
    for budget in (0, 1, sc.tokens([tool])):  # no budget, nothing fits, everything fits
        (out,) = sc.compact_to_budget([tool], budget)
        assert json.loads(out.parameters)["properties"]["url"]["default"] == "https://api.example.org/v1/{id}"


@pytest.mark.parametrize("value,enum,trivial", [
    (None, None, True), (False, None, True), ("", None, True), (0, None, True), (0.0, None, True),
    ([], None, True), ({}, None, True),
    (True, None, False), ("a", None, False), (-1, None, False), (0.5, None, False), ([0], None, False),
    ({"a": None}, None, False),
    (0, [0, 1], False), ("", ["", "x"], False), (None, [None, "x"], False),
    (False, [0, 1], True), (0, [False, True], True),  # 0 and false are not the same choice
])
def test_which_defaults_are_trivial(value, enum, trivial):
    assert sc.trivial_default(value, enum) is trivial


@pytest.mark.slow
def test_bfcl_schemas_keep_their_verdicts_and_shrink():
    docs, questions = tool_eval.load()
    by_name = {d.name: json.loads(d.parameters) for d in docs}
    truth: dict[str, list[dict]] = {}
    for q in questions:
        for name, params in q.calls:
            truth.setdefault(name, []).extend(ground_truth_args([(name, params)]))
    rng = random.Random(11)
    total_valid = total_invalid = truth_checked = 0
    for name, schema in by_name.items():
        instances = truth.get(name, []) + [generate(schema, rng) for _ in range(30)]
        truth_checked += len(truth.get(name, []))
        for level in (1, sc.LEVELS):
            valid, invalid = same_verdicts(schema, sc.compact_schema(schema, level), instances)
            total_valid += valid
            total_invalid += invalid
    assert truth_checked > 1500 and total_valid > 10_000 and total_invalid > 10_000
    tools = [common_pb2.Tool(name=d.name, description=d.description, parameters=d.parameters) for d in docs]
    before = sc.tokens(tools)
    after = [sc.tokens([sc.compact_tool(t, level) for t in tools]) for level in (1, 2, 3)]
    assert before > after[0] > after[1] > after[2] and after[2] < 0.75 * before


def test_a_budget_picks_the_least_compaction_that_fits():
    tools = [common_pb2.Tool(name=f"t{i}", description="Does a thing. " + "More words here. " * 20,
                             parameters=json.dumps({"type": "object", "properties": {
                                 "p": {"type": "string", "description": "A parameter. " + "Detail. " * 20,
                                       "default": "x"}}})) for i in range(4)]
    full = sc.tokens(tools)
    assert sc.compact_to_budget(tools, full + 10) == tools
    level3 = [sc.compact_tool(t, 3) for t in tools]
    assert sc.compact_to_budget(tools, sc.tokens(level3)) == level3
    tight = sc.compact_to_budget(tools, 1)  # nothing fits: the most compact version
    assert tight == level3
    assert all(json.loads(t.parameters)["properties"]["p"] == {"type": "string", "default": "x"} for t in tight)
    assert [t.name for t in tight] == [t.name for t in tools]
