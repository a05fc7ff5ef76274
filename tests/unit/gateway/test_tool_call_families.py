"""Tool-call formats beyond Hermes: each family's real template (llama.cpp's copies, MIT, in
tests/fixtures/tool_call_templates) names its format, the text it renders for an assistant tool
call parses back to that call (whole or split anywhere), and the grammar accepts that text and
refuses an extra argument or an unknown function."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jinja2
import llguidance
import pytest

from loopwire.common.model_def import detect_tool_call_format, dummy_definition
from loopwire.gateway import tool_grammar
from loopwire.gateway.output_parser import (
    CallArgumentsOut,
    CallDoneOut,
    CallStartedOut,
    OutputParser,
    TextOut,
)
from loopwire.v1 import common_pb2, gateway_pb2

TEMPLATES = Path(__file__).parents[2] / "fixtures" / "tool_call_templates"
Mode = common_pb2.ToolChoiceMode
SCHEMA = {"type": "object", "properties": {
    "command": {"type": "string"}, "timeout": {"type": "number"}, "count": {"type": "integer"},
    "verbose": {"type": "boolean"}, "env": {"type": "object", "properties": {"HOME": {"type": "string"}}},
    "paths": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}
SHELL = common_pb2.Tool(name="shell", parameters=json.dumps(SCHEMA))
READ = common_pb2.Tool(name="read_file", parameters=json.dumps(
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}))
ARGS = {"command": 'grep -n "a\\b" {x} </p>\nnext line', "timeout": 2.5, "count": 3, "verbose": True,
        "env": {"HOME": "/root"}, "paths": ["a", "b"]}
TEMPLATE_OF = {"llama3_json": "meta-llama-Llama-3.1-8B-Instruct.jinja",
               "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja", "qwen3_coder": "Qwen3-Coder.jinja"}


def _tojson(value, indent=None, **_):  # as transformers renders chat templates: keys kept in order
    return json.dumps(value, ensure_ascii=False, indent=indent)


def render(name: str, messages: list[dict], **extra) -> str:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson

    def fail(msg):
        raise ValueError(msg)

    env.globals["raise_exception"] = fail
    tpl = env.from_string((TEMPLATES / name).read_text())
    return tpl.render(messages=messages, bos_token="<s>", eos_token="</s>", **extra)


def rendered_call(fmt: str, calls: list[tuple[str, dict]]) -> str:
    """The text the family's template writes for the assistant's calls (the turn's markup cut off)."""
    user = {"role": "user", "content": "q"}
    tool_calls = [{"id": f"abcdefgh{i}", "type": "function", "function": {"name": n, "arguments": a}}
                  for i, (n, a) in enumerate(calls)]
    before = render(TEMPLATE_OF[fmt], [user])
    full = render(TEMPLATE_OF[fmt], [user, {"role": "assistant", "content": "", "tool_calls": tool_calls}])
    assert full.startswith(before)
    text = full[len(before):]
    for head in ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|im_start|>assistant"):
        text = text.removeprefix(head)
    for tail in ("<|eot_id|>", "</s>", "<|im_end|>\n"):
        text = text.removesuffix(tail)
    return text


def parse(fmt: str, pieces: list[str], tools=(SHELL, READ)):
    model = dataclasses.replace(dummy_definition(), tool_call_format=fmt)
    parser = OutputParser(model, tools=list(tools))
    events = []
    for piece in pieces:
        events += parser.feed(model.tokenizer.encode(piece))
    events += parser.finish()
    return parser, events


def summary(parser, events):
    """What a client sees: text, and per call its start, arguments (joined) and done."""
    args: dict[int, str] = {}
    started = []
    for e in events:
        if isinstance(e, CallStartedOut):
            started.append((e.index, e.name))
        elif isinstance(e, CallArgumentsOut):
            args[e.index] = args.get(e.index, "") + e.delta
        elif isinstance(e, CallDoneOut):
            assert args.get(e.index, "") == e.call.arguments
    text = "".join(e.text for e in events if isinstance(e, TextOut))
    return text, started, [(c.name, c.arguments) for c in parser.calls]


@pytest.mark.parametrize("name, fmt", [
    ("meta-llama-Llama-3.1-8B-Instruct.jinja", "llama3_json"),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "llama3_json"),
    ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "mistral"),
    ("Qwen3-Coder.jinja", "qwen3_coder"),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", "hermes"),
])
def test_each_template_names_its_format(name, fmt):
    specials = {"[TOOL_CALLS]": 5} if fmt == "mistral" else {}
    assert detect_tool_call_format((TEMPLATES / name).read_text(), specials) == fmt


def test_unknown_templates_default_to_hermes():
    assert detect_tool_call_format("{{ messages }}") == "hermes"
    assert detect_tool_call_format(dummy_definition().chat_template) == "hermes"


CASES = [
    ("llama3_json", [("shell", ARGS)]),
    ("mistral", [("shell", ARGS)]),
    ("mistral", [("shell", ARGS), ("read_file", {"path": "/etc/hosts"})]),
    ("qwen3_coder", [("shell", ARGS)]),
    ("qwen3_coder", [("shell", ARGS), ("read_file", {"path": "/etc/hosts"})]),
]


@pytest.mark.parametrize("fmt, calls", CASES)
def test_the_rendered_call_parses_back_whole_and_split_anywhere(fmt, calls):
    text = rendered_call(fmt, calls)
    parser, events = parse(fmt, [text])
    got_text, started, got = summary(parser, events)
    assert got_text.strip() == ""
    assert [(n, json.loads(a)) for n, a in got] == calls
    assert all(a == json.dumps(json.loads(a), ensure_ascii=False) or fmt != "qwen3_coder" for _, a in got)
    assert [n for _, n in started] == [n for n, _ in calls]
    whole = summary(parser, events)
    for k in range(1, len(text)):
        assert summary(*parse(fmt, [text[:k], text[k:]])) == whole, k
    assert summary(*parse(fmt, list(text))) == whole  # one character at a time
    kinds = [type(e).__name__ for e in parse(fmt, list(text))[1] if not isinstance(e, TextOut)]
    assert kinds[0] == "CallStartedOut" and kinds.count("CallArgumentsOut") > 3  # the arguments stream


def test_llama_python_tag_and_plain_text():
    call = '<|python_tag|>{"name": "shell", "parameters": {"command": "ls"}}'
    _, _, got = summary(*parse("llama3_json", [call]))
    assert got == [("shell", '{"command": "ls"}')]
    for text in ("Hello there.", '{"answer": 42}', "  x {", "<|eot"):
        out, started, calls = summary(*parse("llama3_json", list(text)))
        assert (out, started, calls) == (text, [], []), text


def test_mistral_text_before_the_calls_and_no_calls():
    text = 'Sure. [TOOL_CALLS][{"name": "read_file", "arguments": {"path": "x"}}]'
    out, _, got = summary(*parse("mistral", list(text)))
    assert out == "Sure. " and got == [("read_file", '{"path": "x"}')]
    assert summary(*parse("mistral", ["a [b] c"]))[0] == "a [b] c"


def test_qwen3_coder_values_follow_the_schema_types():
    text = ("<tool_call>\n<function=shell>\n<parameter=command>\n42\n</parameter>\n<parameter=count>\n7\n"
            "</parameter>\n<parameter=verbose>\nfalse\n</parameter>\n<parameter=other>\n1\n</parameter>\n"
            "</function>\n</tool_call>")
    _, _, got = summary(*parse("qwen3_coder", list(text)))
    assert json.loads(got[0][1]) == {"command": "42", "count": 7, "verbose": False, "other": "1"}
    # without the schema every value stays a string
    _, _, got = summary(*parse("qwen3_coder", [text], tools=()))
    assert json.loads(got[0][1]) == {"command": "42", "count": "7", "verbose": "false", "other": "1"}
    # not this format: the block stays text
    bad = '<tool_call>\n{"name": "shell"}\n</tool_call>'
    assert summary(*parse("qwen3_coder", list(bad)))[0] == bad


def grammar(fmt: str, mode: int, name: str = "", parallel: bool = True) -> str:
    create = gateway_pb2.CreateResponse(tool_choice=common_pb2.ToolChoice(mode=mode, function_name=name),
                                        parallel_tool_calls=parallel)
    model = dataclasses.replace(dummy_definition(), tool_call_format=fmt)
    built = tool_grammar.constraint(create, model, [SHELL, READ])
    assert built is not None
    return built.lark


def matches(lark: str, text: str) -> bool:
    g = llguidance.LLMatcher.grammar_from_lark(lark)
    m = llguidance.LLMatcher(llguidance.LLTokenizer("byte"), g, log_level=0)
    return m.consume_tokens(list(text.encode())) and m.is_accepting()


def _extra(fmt: str, text: str) -> str:
    if fmt == "qwen3_coder":
        return text.replace("</function>", "<parameter=cwd>\n/\n</parameter>\n</function>", 1)
    return text.replace('"command": ', '"cwd": "/", "command": ', 1)


@pytest.mark.parametrize("fmt", ["llama3_json", "mistral", "qwen3_coder"])
def test_grammars_accept_the_rendered_call_and_refuse_others(fmt):
    call = rendered_call(fmt, [("shell", ARGS)]).lstrip("\n")
    unknown = call.replace("shell", "rm", 1)
    for mode, name in [(Mode.TOOL_CHOICE_MODE_REQUIRED, ""), (Mode.TOOL_CHOICE_MODE_FUNCTION, "shell"),
                       (Mode.TOOL_CHOICE_MODE_UNSPECIFIED, "")]:
        lark = grammar(fmt, mode, name)
        assert matches(lark, call), (mode, call, lark)
        assert not matches(lark, _extra(fmt, call)), (mode, lark)
        assert not matches(lark, unknown), (mode, lark)
    assert not matches(grammar(fmt, Mode.TOOL_CHOICE_MODE_FUNCTION, "read_file"), call)
    assert not matches(grammar(fmt, Mode.TOOL_CHOICE_MODE_REQUIRED), "just text")
    auto = grammar(fmt, Mode.TOOL_CHOICE_MODE_UNSPECIFIED)
    assert matches(auto, "just text")
    none = grammar(fmt, Mode.TOOL_CHOICE_MODE_NONE)
    assert matches(none, "just text") and not matches(none, call)
    if fmt != "llama3_json":  # a call may follow text, and once opened it is forced
        assert matches(auto, "Sure. " + call) and not matches(auto, "Sure. " + unknown)
    two = rendered_call(fmt, [("shell", ARGS), ("read_file", {"path": "p"})]) if fmt != "llama3_json" else \
        call + "; " + call
    assert matches(grammar(fmt, Mode.TOOL_CHOICE_MODE_REQUIRED), two.lstrip("\n"))
    assert not matches(grammar(fmt, Mode.TOOL_CHOICE_MODE_REQUIRED, parallel=False), two.lstrip("\n"))


def test_hermes_grammar_is_unchanged():
    lark = grammar("hermes", Mode.TOOL_CHOICE_MODE_REQUIRED)
    assert lark.startswith('%llguidance {}\nstart: call ("\\n" call)*\ncall: "<tool_call>\\n" body "\\n</tool_call>"')
