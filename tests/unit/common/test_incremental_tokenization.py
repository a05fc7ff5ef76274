"""DESIGN §3 invariant 1: incremental tokenization is exact, for real tokenizers.

The reference is the tokenizer library itself, called once on the fully rendered
conversation — except on the stretches the model generated, which enter as the ids it
produced: there the reference is the library called once on each stretch of text between
two model outputs (each stretch begins right after a special token, so it is where a
single call on the whole text would also split). Nothing of the code under test computes
the reference: only the model's own template and tokenizer are shared.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import dummy_definition, load_definition
from loopwire.common.prompt import ChatPrompt, assistant_text
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2 as c

FRAGMENTS = [
    "hello", " world", "  ", "\n", "\n\n", "\t", "    ", "\r\n", "1234567890", "3.14159", "0x1F",
    "😀", "👩‍💻", "🇫🇷", "日本語のテキスト", "中文", "한국어", "مرحبا", "Ünïcödé",
    "def f(x):\n    return x + 1\n", "for (int i = 0; i < n; ++i) {", "SELECT * FROM t;", "$ ls -la | grep .py",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start", "im_end|>", "<tool_call>", "</tool_call>",
    "<|tool_call|>", "<tool_response>", "user\n", "assistant", "{\"a\": [1, 2]}", "   \n  \n", "!!!", "...",
]
texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=8).map("".join)
calls = st.lists(
    st.builds(lambda n, v: c.FunctionCall(name=n, arguments=f'{{"cmd": {v!r}}}'.replace("'", '"')),
              st.sampled_from(["shell", "read_file", "grep"]), st.text(alphabet="abc xyz/.-*12", max_size=20)),
    max_size=2,
)
# A step: ("user" | "tool" | "input_assistant" | "model", text, calls)
steps = st.lists(
    st.tuples(st.sampled_from(["user", "tool", "input_assistant", "model"]), texts, calls), min_size=1, max_size=6
)


@pytest.fixture(scope="module", params=["smollm2", "cl100k"])
def model(request):
    return load_definition("default") if request.param == "smollm2" else dummy_definition()


def _msg(role: int, text: str) -> c.Item:
    return c.Item(message=c.Message(role=role, content=[c.ContentPart(text=text)]))


def run_conversation(model, instructions, tools, plan):
    """Drive a Conversation through the plan; return it with the items, raw texts and generated spans."""
    prompt = ChatPrompt(model)
    conv = Conversation(prompt, "m", instructions, tools)
    items: list[c.Item] = []
    raw: dict[int, str] = {}
    generated: list[tuple[int, str, list[int]]] = []  # (item index, text, ids)
    pending: list[c.Item] = []
    call_no = 0
    for kind, text, step_calls in plan:
        if kind == "model":
            conv.append(pending)
            items += pending
            pending = []
            named = []
            for call in step_calls:
                call_no += 1
                named.append(c.FunctionCall(call_id=f"c{call_no}", name=call.name, arguments=call.arguments))
            out_text = assistant_text(text, named)
            ids = [*model.tokenizer.encode(out_text), model.stop_token_ids[0]]
            output = [_msg(c.ROLE_ASSISTANT, text)] + [c.Item(function_call=x) for x in named]
            conv.complete(output, ids, out_text)
            raw[len(items)] = out_text
            generated.append((len(items), out_text, ids))
            items += output
        elif kind == "user":
            pending.append(_msg(c.ROLE_USER, text))
        elif kind == "input_assistant":
            pending.append(_msg(c.ROLE_ASSISTANT, text))
        else:
            call_no += 1
            pending.append(c.Item(function_call_output=c.FunctionCallOutput(call_id=f"c{call_no}", output=text)))
    conv.append(pending)
    items += pending
    return conv, prompt, items, raw, generated


def reference_ids(model, prompt, instructions, tools, items, raw, generated):
    """The tokenizer called once per stretch between model outputs, on the whole rendered text."""
    whole = prompt.render(instructions, tools, items, raw, add_generation_prompt=True)
    ids: list[int] = []
    pos = 0
    for index, out_text, out_ids in generated:
        # Where the model's output starts: the end of the rendering of everything before it plus
        # the generation prompt (the very text the model was prompted with).
        start = len(prompt.render(instructions, tools, items[:index], raw, add_generation_prompt=True))
        stop_text = model.tokenizer.token_bytes(out_ids[-1]).decode()
        if not whole[start:].startswith(out_text + stop_text):
            # The template renders this turn differently from what the model was prompted with
            # (e.g. SmolLM2 adds its default system message only once a message exists): the
            # turn is text like any other, tokenized with the rest.
            continue
        ids += model.tokenizer.encode(whole[pos:start])
        ids += out_ids
        pos = start + len(out_text) + len(stop_text)
    return ids + model.tokenizer.encode(whole[pos:])


TOOLS = [
    c.Tool(name="shell", description="Run a command. Use ```bash blocks```.",
           parameters='{"type": "object", "properties": {"cmd": {"type": "string"}}}'),
    c.Tool(name="read_file", description="Read a file", parameters="{}"),
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instructions=texts, plan=steps, with_tools=st.booleans())
def test_incremental_ids_equal_one_call_on_the_whole_text(model, instructions, plan, with_tools):
    tools = TOOLS if with_tools else []
    conv, prompt, items, raw, generated = run_conversation(model, instructions, tools, plan)
    assert conv.prompt_ids() == reference_ids(model, prompt, instructions, tools, items, raw, generated)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instructions=texts, plan=steps)
def test_without_model_outputs_the_reference_is_one_call(model, instructions, plan):
    """With every assistant turn given as input, the stored ids are exactly encode(render(all))."""
    plan = [("input_assistant" if kind == "model" else kind, text, cs) for kind, text, cs in plan]
    conv, prompt, items, _, _ = run_conversation(model, instructions, TOOLS, plan)
    assert conv.prompt_ids() == model.tokenizer.encode(prompt.render(instructions, TOOLS, items, None, True))


def test_only_the_new_part_is_tokenized(model):
    """A delta tokenizes a few tokens past the last special token, not the conversation."""
    big = "word " * 2000
    conv, *_ = run_conversation(model, "sys", TOOLS, [("user", big, []), ("model", "ok", [])])
    before = len(conv)
    tokenized = conv.append([_msg(c.ROLE_USER, "next")])
    assert before > 2000 and tokenized < 20
    assert conv.outputs_retokenized == 0 and conv.template_breaks == 0


def test_known_boundary_case():
    """The case the old per-item encoding got wrong: a role header and its body merge ("\\n\\n")."""
    model = dummy_definition()
    conv, prompt, items, *_ = run_conversation(model, "", [], [("user", "\nhello", [])])
    rendered = prompt.render("", [], items, None, True)
    assert "user\n\nhello" in rendered
    assert conv.prompt_ids() == model.tokenizer.encode(rendered)
