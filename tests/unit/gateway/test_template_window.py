"""Rendering only the new messages gives the same text and ids as rendering the whole conversation.

The reference is the model's own template applied to the whole transcript (``ChatPrompt.render``)
and the tokenizer called once on it: nothing of the windowed path computes it. Templates
whose rendering of a message depends on more than the window sees must fall back to the
full rendering, with the safety net of full-render comparisons switched off, so the
window's own checks are what is tested.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import dummy_definition, load_definition
from loopwire.common.prompt import ChatPrompt, assistant_text
from loopwire.gateway import template_window
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2 as c

DUMMY = dummy_definition()
TRICKY = ["<|im_end|>", "<|im_start|>assistant\n", "<tool_call>", "</tool_call>", "🦀", "汉字", "\r\n", " ", "{\"a\": 1}"]
texts = st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=10)), max_size=4).map("".join)
TOOLS = [c.Tool(name="shell", description="run", parameters='{"type": "object"}')]


@pytest.fixture(scope="module")
def smollm2():
    return load_definition("default")


def msg(role: int, text: str) -> c.Item:
    return c.Item(message=c.Message(role=role, content=[c.ContentPart(text=text)]))


# A step: ("user" | "tool" | "system" | "model" | "call", text)
steps = st.lists(st.tuples(st.sampled_from(["user", "tool", "system", "model", "model", "call"]), texts),
                 min_size=1, max_size=14)


def drive(model, instructions: str, tools: list[c.Tool], plan: list[tuple[str, str]], incremental: bool):
    """Feed the plan as a harness would: inputs gathered, appended before each model turn; after
    every step the text held is the whole transcript rendered by the template."""
    prompt = ChatPrompt(model)
    conv = Conversation(prompt, "m", instructions, tools, incremental=incremental)

    def check() -> None:
        assert conv.text == prompt.render(instructions, tools, conv.items, conv.raw)
    pending: list[c.Item] = []
    calls = 0
    for kind, text in plan:
        if kind == "model":
            conv.append(pending)
            check()
            pending = []
            out_text = text
            ids = [*model.tokenizer.encode(out_text), model.stop_token_ids[0]]
            conv.complete([msg(c.ROLE_ASSISTANT, text)], ids, out_text)
            check()
        elif kind == "call":
            conv.append(pending)
            check()
            pending = []
            calls += 1
            call = c.FunctionCall(call_id=f"c{calls}", name="shell", arguments='{"cmd": "ls"}')
            out_text = assistant_text(text, [call])
            ids = [*model.tokenizer.encode(out_text), model.stop_token_ids[0]]
            conv.complete([msg(c.ROLE_ASSISTANT, text), c.Item(function_call=call)], ids, out_text)
            check()
        elif kind == "tool":
            pending.append(c.Item(function_call_output=c.FunctionCallOutput(call_id=f"c{calls}", output=text)))
        else:
            pending.append(msg(c.ROLE_USER if kind == "user" else c.ROLE_SYSTEM, text))
    conv.append(pending)
    check()
    return conv, prompt


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instructions=texts, plan=steps, with_tools=st.booleans())
def test_windowed_rendering_equals_the_full_rendering(smollm2, instructions, plan, with_tools, monkeypatch):
    monkeypatch.setattr(template_window, "VERIFY_BELOW_CHARS", 0)  # no safety net: the window alone
    monkeypatch.setattr(template_window, "VERIFY_FIRST", 0)
    tools = TOOLS if with_tools else []
    for model in (DUMMY, smollm2):
        fast, prompt = drive(model, instructions, tools, plan, incremental=True)
        slow, _ = drive(model, instructions, tools, plan, incremental=False)
        assert fast.text == prompt.render(instructions, tools, fast.items, fast.raw)
        assert fast.prompt_ids() == slow.prompt_ids()
        assert fast.items == slow.items and fast.raw == slow.raw
        assert slow.windowed_renders == 0


def test_long_conversations_render_only_the_new_messages(smollm2, monkeypatch):
    monkeypatch.setattr(template_window, "VERIFY_BELOW_CHARS", 0)
    monkeypatch.setattr(template_window, "VERIFY_FIRST", 0)
    plan = [("user", "task")] + [(k, f"{k} {i} " * 20) for i in range(30) for k in ("call", "tool")]
    for model in (DUMMY, smollm2):
        for instructions in ("be brief", ""):
            conv, prompt = drive(model, instructions, TOOLS, plan, incremental=True)
            slow, _ = drive(model, instructions, TOOLS, plan, incremental=False)
            assert conv.text == prompt.render(instructions, TOOLS, conv.items, conv.raw)
            assert conv.prompt_ids() == slow.prompt_ids()
            # Every turn after the first few rendered only its new messages.
            assert conv.windowed_renders >= 2 * 30 - 4, conv.windowed_renders


# Templates where a message's rendering depends on more than the window sees: the message count,
# its global index, a later user message (Qwen3-style reasoning dropped before the last
# query), whether it is the last one, or a running namespace over all messages.
UNSTABLE_TEMPLATES = {
    "count": "{{ messages|length }} messages\n{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
             "{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "index": "{% for m in messages %}<|im_start|>{{ loop.index }} {{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "last_query": "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m['role'] == 'user' %}"
                  "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{% for m in messages %}<|im_start|>"
                  "{{ m['role'] }}\n{% if m['role'] == 'assistant' and loop.index0 < ns.last %}[old]"
                  "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "last_marked": "{% for m in messages %}<|im_start|>{{ m['role'] }}{% if loop.last %} (latest){% endif %}\n"
                   "{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                   "{% endif %}",
    "running": "{% set ns = namespace(chars=0) %}{% for m in messages %}{% set ns.chars = ns.chars + "
               "m['content']|length %}<|im_start|>{{ m['role'] }} {{ ns.chars }}\n{{ m['content'] }}<|im_end|>\n"
               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
}


@pytest.mark.parametrize("name", sorted(UNSTABLE_TEMPLATES))
def test_templates_the_window_cannot_reproduce_fall_back_to_the_full_rendering(name, monkeypatch):
    monkeypatch.setattr(template_window, "VERIFY_BELOW_CHARS", 0)
    monkeypatch.setattr(template_window, "VERIFY_FIRST", 0)
    model = dataclasses.replace(dummy_definition(), chat_template=UNSTABLE_TEMPLATES[name])
    for kinds in (("user", "model", "tool", "call"), ("user", "model"), ("user", "user", "model")):
        plan = [("user", "task")] + [(k, f"{k} {i}") for i in range(8) for k in kinds]
        conv, _ = drive(model, "sys", [], plan, incremental=True)  # checks the text after every step
        slow, _ = drive(model, "sys", [], plan, incremental=False)
        assert conv.prompt_ids() == slow.prompt_ids()


def test_a_template_caught_differing_is_always_rendered_in_full(monkeypatch):
    """The safety net: a template whose windowed rendering once differs from the full one is
    marked and never windowed again (forced here by a window that lies)."""
    model = dummy_definition()
    real = template_window.render_appended

    def lying(*args, **kwargs):
        got = real(*args, **kwargs)
        return None if got is None else (got[0] + "x", got[1] + "x")

    monkeypatch.setattr(template_window, "render_appended", lying)
    plan = [("user", "a"), ("model", "b"), ("user", "c"), ("model", "d"), ("user", "e")]
    conv, prompt = drive(model, "sys", [], plan, incremental=True)
    assert conv.text == prompt.render("sys", [], conv.items, conv.raw)
    assert not template_window.is_stable(model.template) and conv.windowed_renders == 0


# HeldText ops: ("append", text) | ("truncate", fraction) | ("read", fraction, fraction)
text_ops = st.lists(st.one_of(st.tuples(st.just("append"), texts),
                              st.tuples(st.just("truncate"), st.floats(0, 1.1)),
                              st.tuples(st.just("read"), st.floats(0, 1.1), st.floats(0, 1.2)),
                              st.tuples(st.just("join"))), max_size=30)


@settings(max_examples=300, deadline=None)
@given(text_ops)
def test_held_text_reads_as_the_string_it_stands_for(ops) -> None:
    """The pieces the held text grows by read as one string would: slices, starts, truncation."""
    held, plain = template_window.HeldText(), ""
    for op in ops:
        if op[0] == "append":
            held.append(op[1])
            plain += op[1]
        elif op[0] == "truncate":
            n = int(op[1] * len(plain))
            held.truncate(n)
            plain = plain[:n]
        elif op[0] == "read":
            start, stop = int(op[1] * len(plain)), int(op[2] * len(plain))
            assert held.slice(start, stop) == plain[start:stop] and held.slice(start) == plain[start:]
            other = "\1" if plain[stop : stop + 1] == "\0" else "\0"  # a character the text has not there
            assert held.startswith(plain[:stop]) and not held.startswith(plain[:stop] + other)
        else:
            assert str(held) == plain
        assert len(held) == len(plain)
    copy = held.copy()
    copy.append("more")
    assert str(held) == plain and str(copy) == plain + "more"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps, mine=texts, theirs=texts)
def test_a_fork_and_its_origin_grow_apart(plan, mine, theirs, monkeypatch) -> None:
    """A fork at the newest item (what continuing a response twice gets) holds what its origin
    holds; each then grows on its own, as the conversation rendered in full would."""
    monkeypatch.setattr(template_window, "VERIFY_BELOW_CHARS", 0)
    monkeypatch.setattr(template_window, "VERIFY_FIRST", 0)
    conv, prompt = drive(DUMMY, "sys", TOOLS, plan, incremental=True)
    other = conv.fork(conv.item_count)
    for grown, text in ((conv, mine), (other, theirs)):
        grown.append([msg(c.ROLE_USER, text)])
    for grown, text in ((conv, mine), (other, theirs)):
        slow, _ = drive(DUMMY, "sys", TOOLS, plan, incremental=False)
        slow.append([msg(c.ROLE_USER, text)])
        assert grown.text == slow.text == prompt.render("sys", TOOLS, grown.items, grown.raw)
        assert grown.prompt_ids() == slow.prompt_ids() and grown.items == slow.items
