"""The gateway turns tool choice and text format into the constraint the replica applies, and
refuses what cannot be constrained with an error naming the field."""

from __future__ import annotations

import json

import llguidance

from loopwire.gateway import tool_grammar
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import FakeReplica, kinds, last, user

Mode = common_pb2.ToolChoiceMode
SHELL = common_pb2.Tool(name="shell", parameters=json.dumps(
    {"type": "object", "properties": {"timeout": {"type": "number"}, "command": {"type": "string"}},
     "required": ["command"]}))
READ = common_pb2.Tool(name="read_file", parameters=json.dumps({"type": "object", "properties": {"path": {"type": "string"}}}))


def choice(mode: int, name: str = "", allowed: tuple[str, ...] = ()) -> common_pb2.ToolChoice:
    return common_pb2.ToolChoice(mode=mode, function_name=name, allowed_tools=list(allowed))


def matches(lark: str, text: str) -> bool:
    """Whether llguidance (without any tokenizer) accepts ``text`` as a whole output of ``lark``."""
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    m = llguidance.LLMatcher(llguidance.LLTokenizer("byte"), grammar, log_level=0)
    return m.consume_tokens(list(text.encode())) and m.is_accepting()


async def test_each_choice_reaches_the_replica_as_a_grammar(make_mesh):
    replica = FakeReplica()
    mesh = await make_mesh([replica])
    conv = mesh.open()
    call = '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>'
    for mode, name, text, ok in [
        (Mode.TOOL_CHOICE_MODE_REQUIRED, "", call, True),
        (Mode.TOOL_CHOICE_MODE_REQUIRED, "", "ls", False),
        (Mode.TOOL_CHOICE_MODE_REQUIRED, "", call.replace('"ls"}', '"ls", "cwd": "/"}'), False),  # strict
        (Mode.TOOL_CHOICE_MODE_UNSPECIFIED, "", "Sure. " + call, True),
        (Mode.TOOL_CHOICE_MODE_UNSPECIFIED, "", "no call at all", True),
        (Mode.TOOL_CHOICE_MODE_UNSPECIFIED, "", 'Sure. <tool_call>\n{"name": "rm"}', False),  # an opened call is forced
        (Mode.TOOL_CHOICE_MODE_FUNCTION, "read_file", call, False),
        (Mode.TOOL_CHOICE_MODE_NONE, "", "text only", True),
        (Mode.TOOL_CHOICE_MODE_NONE, "", "a < b and " + call, False),
    ]:
        events = await conv.send(input=[user("q")], tools=[SHELL, READ], tool_choice=choice(mode, name))
        assert kinds(events)[-1] == "completed", events
        constraint = replica.received[-1].start.constraint
        assert matches(constraint.lark, text) is ok, (mode, text, constraint.lark)


async def test_what_cannot_be_constrained_is_refused_by_field(make_mesh):
    mesh = await make_mesh()
    conv = mesh.open()
    for fields, field in [
        ({"tools": [SHELL], "tool_choice": choice(Mode.TOOL_CHOICE_MODE_FUNCTION, "rm")},
         "create_response.tool_choice.function_name"),
        ({"tool_choice": choice(Mode.TOOL_CHOICE_MODE_REQUIRED)}, "create_response.tool_choice"),
        ({"tools": [SHELL], "tool_choice": choice(Mode.TOOL_CHOICE_MODE_REQUIRED, allowed=("rm",))},
         "create_response.tool_choice.allowed_tools"),
        ({"text_format": gateway_pb2.TextFormat(json_schema="{not json")}, "create_response.text_format.json_schema"),
        ({"text_format": gateway_pb2.TextFormat(json_schema=json.dumps({"type": "string", "pattern": "(?=x)"}))},
         "create_response.text_format"),
    ]:
        error = last(await conv.send(input=[user("q")], **fields), "failed").error
        assert error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT and error.field == field, (fields, error)
    assert kinds(await conv.send(input=[user("q")]))[-1] == "completed"  # the stream keeps serving


def test_strict_schemas_close_objects_and_put_required_first():
    schema = tool_grammar.strict_schema(json.loads(SHELL.parameters))
    assert schema["additionalProperties"] is False and list(schema["properties"]) == ["command", "timeout"]
    nested = tool_grammar.strict_schema({"type": "object", "properties": {"o": {"type": "object"}},
                                         "additionalProperties": True})
    assert nested["additionalProperties"] is True and nested["properties"]["o"]["additionalProperties"] is False


async def test_the_context_window_is_enforced_and_named(make_mesh, monkeypatch):
    from .gateway_fakes import MODEL

    monkeypatch.setattr(MODEL, "context_length", 60)
    replica = FakeReplica()
    mesh = await make_mesh([replica])
    conv = mesh.open()
    error = last(await conv.send(input=[user("word " * 80)]), "failed").error
    assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED and error.field == "create_response.input"
    assert "context_length_exceeded" in error.message and "60-token context window" in error.message
    assert replica.received == []
    events = await conv.send(input=[user("hi")], sampling=common_pb2.SamplingParams(max_output_tokens=5000))
    assert kinds(events)[-1] == "completed"
    start = replica.received[-1].start
    assert start.params.max_tokens == 60 - len(start.full.token_ids)  # the reply fits what the prompt leaves
