"""Each tool-call format, through the registry: a call rendered as the model writes it comes back
exactly however its bytes are split, whatever its strings hold, and its grammar admits it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema
import llguidance
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import TOOL_CALL_FORMATS, dummy_definition
from loopwire.common.prompt import render_call
from loopwire.gateway import tool_formats, tool_grammar
from loopwire.gateway.output_parser import (
    CallArgumentsOut,
    CallDoneOut,
    CallStartedOut,
    OutputParser,
    TextOut,
)
from loopwire.v1 import common_pb2, gateway_pb2

from .test_tool_call_families import matches, rendered_call

MODEL = dummy_definition()
SCHEMA = {"type": "object", "properties": {
    "command": {"type": "string"}, "timeout": {"type": "number"}, "count": {"type": "integer"},
    "verbose": {"type": "boolean"}, "env": {"type": "object", "properties": {"HOME": {"type": "string"}}},
    "paths": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}
SHELL = common_pb2.Tool(name="shell", parameters=json.dumps(SCHEMA))
# Every byte has a token of its own: feeding those splits the text at any byte.
BYTE = {b[0]: i for i in range(2000) if len(b := MODEL.tokenizer.token_bytes(i)) == 1}
TAGS = ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[TOOL_CALLS][", "<|python_tag|>", "</parameter>",
        "<parameter=count>", "</function>", "<function=shell>", '"', "\\", '\\"', "{", "}", "]", ";", "\n", "é", "🦀"]
strings = st.lists(st.one_of(st.text(max_size=6), st.sampled_from(TAGS)), max_size=4).map("".join)


def model(fmt: str):
    return dataclasses.replace(MODEL, tool_call_format=fmt)


def arguments(fmt: str) -> st.SearchStrategy[dict[str, Any]]:
    """Schema-valid arguments, required first as the strict schema orders them."""
    text = strings.filter(lambda s: "\n</parameter>" not in s) if fmt == "qwen3_coder" else strings
    optional = {"timeout": st.floats(allow_nan=False, allow_infinity=False), "count": st.integers(),
                "verbose": st.booleans(), "env": st.fixed_dictionaries({"HOME": strings}),
                "paths": st.lists(strings, max_size=3)}
    return st.fixed_dictionaries({"command": text}, optional=optional).map(
        lambda d: {k: d[k] for k in ["command", *optional] if k in d})


def render(fmt: str, args: dict[str, Any]) -> str:
    """The call as the model writes it: Hermes as loopwire's prompt shows it, the others as their
    chat templates do."""
    if fmt == "hermes":
        return render_call(common_pb2.FunctionCall(name="shell", arguments=json.dumps(args, ensure_ascii=False)))
    return rendered_call(fmt, [("shell", args)]).lstrip("\n")


def parse(fmt: str, chunks: list[bytes]) -> tuple[OutputParser, list[Any]]:
    parser = OutputParser(model(fmt), tools=[SHELL])
    events = [e for chunk in chunks for e in parser.feed([BYTE[b] for b in chunk])]
    return parser, events + parser.finish()


def seen(parser: OutputParser, events: list[Any]) -> tuple[str, list[tuple[str, Any]], str | None]:
    """What a client gets: the text, each finished call (name, arguments as JSON), a cut call."""
    streamed: dict[int, str] = {}
    for e in events:
        if isinstance(e, CallArgumentsOut):
            streamed[e.index] = streamed.get(e.index, "") + e.delta
        elif isinstance(e, CallDoneOut):
            assert streamed.get(e.index, "") == e.call.arguments
    text = "".join(e.text for e in events if isinstance(e, TextOut))
    return (text, [(c.name, json.loads(c.arguments)) for c in parser.calls],
            parser.cut.arguments if parser.cut is not None else None)


@pytest.mark.parametrize("fmt", TOOL_CALL_FORMATS)
def test_every_format_is_registered(fmt):
    assert tool_formats.get(fmt).name == fmt and set(tool_formats.FORMATS) == set(TOOL_CALL_FORMATS)
    assert tool_formats.get("") is tool_formats.FORMATS["hermes"] and tool_formats.get("nope") is None


@pytest.mark.parametrize("fmt", TOOL_CALL_FORMATS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_rendered_call_comes_back_exactly_split_at_any_byte(fmt, data):
    args = data.draw(arguments(fmt))
    raw = render(fmt, args).encode()
    whole = seen(*parse(fmt, [raw]))
    assert whole == ("", [("shell", args)], None)
    for k in range(1, len(raw)):
        assert seen(*parse(fmt, [raw[:k], raw[k:]])) == whole, raw[:k]
    assert seen(*parse(fmt, [bytes([b]) for b in raw])) == whole


@pytest.mark.parametrize("fmt", TOOL_CALL_FORMATS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_the_grammar_admits_the_rendered_call(fmt, data):
    args = data.draw(arguments(fmt))
    # llguidance's JSON strings refuse a raw U+007F (json.dumps leaves it raw); under the grammar
    # the model writes it escaped, which reads back the same.
    assume("\x7f" not in json.dumps(args, ensure_ascii=False))
    create = gateway_pb2.CreateResponse(tool_choice=common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_REQUIRED))
    built = tool_grammar.constraint(create, model(fmt), [SHELL])
    assert built is not None
    assert matches(built.lark, render(fmt, args))


def test_hermes_a_closer_inside_a_string_is_text_of_the_string():
    """It ended the call there: arguments ``{"content": "h``, the rest spilled into the text."""
    args = {"command": 'h</tool_call> and "more" <tool_call>'}
    parser, events = parse("hermes", [render("hermes", args).encode()])
    assert seen(parser, events) == ("", [("shell", args)], None)


def test_qwen3_coder_a_value_holding_the_closer_without_its_newline_stays_whole():
    """The grammar admits ``</parameter>`` inside a value (only ``\\n</parameter>`` ends one); the
    parser ended the value at it."""
    args = {"command": "a</parameter>b</function></tool_call>"}
    parser, events = parse("qwen3_coder", [render("qwen3_coder", args).encode()])
    assert seen(parser, events) == ("", [("shell", args)], None)


# -- an output cut by its token limit ------------------------------------------------------


def cut_run(fmt: str, text: str) -> tuple[OutputParser, list[Any]]:
    """``text`` generated, then the output ends (the token limit: no stop token)."""
    return parse(fmt, [text.encode()])


LENGTH = common_pb2.FINISH_REASON_LENGTH


def completed(parser: OutputParser) -> gateway_pb2.ResponseCompleted:
    """The completed event of an output the token limit cut, as the relay builds it."""
    done = gateway_pb2.ResponseCompleted(finish_reason=parser.finish_reason(LENGTH), output=parser.output_items())
    parser.report_cut(done)
    return done


@pytest.mark.parametrize("fmt", TOOL_CALL_FORMATS)
def test_a_call_cut_after_it_was_announced_is_reported_incomplete(fmt):
    full = render(fmt, {"command": "echo hello world"})
    parser, events = cut_run(fmt, full[: full.index("hello")])
    assert [e.name for e in events if isinstance(e, CallStartedOut)] == ["shell"]
    assert not any(isinstance(e, CallDoneOut) for e in events)
    assert parser.calls == [] and "shell" not in parser.text and "<" not in parser.text
    done = completed(parser)
    assert done.finish_reason == LENGTH and done.incomplete_call.name == "shell"
    assert done.incomplete_call.arguments.startswith("{") and not done.message_incomplete
    assert [i.WhichOneof("item") for i in done.output] == ["message"] and parser.text.strip() == ""


def test_a_cut_second_parallel_call_leaves_no_markup_in_the_text():
    first = render("hermes", {"command": "ls"})
    second = render("hermes", {"command": "cat /etc/hosts"})
    parser, _ = cut_run("hermes", first + "\n" + second[: second.index("cat")])
    assert "<tool_call>" not in parser.text and parser.text.strip() == ""
    done = completed(parser)
    assert [i.WhichOneof("item") for i in done.output] == ["function_call"]
    assert done.output[0].function_call.arguments == '{"command": "ls"}'
    assert done.finish_reason == LENGTH and done.incomplete_call.arguments == '{"command": "'
    # A call cut before its name is known was never announced: no item, and its markup is no text.
    parser, events = cut_run("hermes", first + "\n<tool_call>\n{\"na")
    assert parser.text.strip() == "" and parser.raw_text.endswith('{"na')
    done = completed(parser)
    assert [i.WhichOneof("item") for i in done.output] == ["function_call"] and not done.HasField("incomplete_call")
    # The model itself ending there (its stop token) is no cut: what it wrote is its text.
    parser = OutputParser(MODEL, tools=[SHELL])
    parser.feed([BYTE[b] for b in b'<tool_call>\n{"na'] + MODEL.stop_token_ids[:1])
    assert parser.text == '<tool_call>\n{"na' and parser.done


def test_text_cut_by_the_limit_marks_the_message_incomplete():
    parser, _ = cut_run("hermes", "The answer is")
    done = completed(parser)
    assert done.finish_reason == LENGTH and done.message_incomplete
    assert parser.finish_reason(common_pb2.FINISH_REASON_STOP) == common_pb2.FINISH_REASON_STOP


# -- what the grammar admits, the parser reads whole ------------------------------------------

STRUCTURAL = list(b'"{}[],:\n 0tf')
# The closers too, as a walk would hardly write them a byte at a time.
WALK_TAGS = [*TAGS, "\n</parameter>\n", "</function>", "\n</tool_call>", '"}', "}}"]


def walk(lark: str, data: st.DataObject, limit: int = 400) -> bytes | None:
    """A text the grammar admits, drawn one byte (or one of the formats' tags) at a time; None
    when the walk did not end within ``limit`` bytes."""
    tok = llguidance.LLTokenizer("byte")
    m = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_lark(lark), log_level=0)
    out = bytearray()
    while len(out) < limit:
        forced = m.compute_ff_bytes()
        if forced:
            assert m.consume_tokens(list(forced))
            out += forced
            continue
        mask = m.compute_bitmask()
        allowed = [i for i in range(256) if mask[i // 8] >> (i % 8) & 1]
        if m.is_accepting() and (not allowed or data.draw(st.integers(0, 9)) == 0):
            return bytes(out)
        if not allowed:
            return None
        choice = data.draw(st.integers(0, 3))
        if choice == 0:  # a format's own tag where the grammar lets it in (inside a string, say)
            tag = data.draw(st.sampled_from(WALK_TAGS)).encode()
            n = m.try_consume_tokens(list(tag))
            if n == len(tag):
                out += tag
                continue
            m.rollback(n)
        preferred = [b for b in STRUCTURAL if b in allowed]
        b = data.draw(st.sampled_from(preferred if preferred and choice == 1 else allowed))
        assert m.consume_token(b)
        out.append(b)
    return None


@pytest.mark.parametrize("fmt", TOOL_CALL_FORMATS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_what_the_grammar_admits_the_parser_reads_whole(fmt, data):
    create = gateway_pb2.CreateResponse(tool_choice=common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_REQUIRED))
    built = tool_grammar.constraint(create, model(fmt), [SHELL])
    assert built is not None
    text = walk(built.lark, data)
    assume(text is not None)
    assert text is not None
    try:
        text.decode()
    except UnicodeDecodeError:
        assume(False)  # the walk stopped inside a character
    k = data.draw(st.integers(0, len(text)))
    for chunks in ([text], [text[:k], text[k:]]):
        parser, events = parse(fmt, chunks)
        out, calls, cut = seen(parser, events)
        assert out.strip() == "" and cut is None and calls, text
        for name, args in calls:
            assert name == "shell"
            jsonschema.validate(args, tool_grammar.strict_schema(SCHEMA))
