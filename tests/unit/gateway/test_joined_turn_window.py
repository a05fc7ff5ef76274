"""Calls a client sends back after the assistant turn held last join that turn's message, and the
rendering stays windowed while still equal to the whole transcript's.

A client that replays the model's turns as input (its calls as ``function_call`` items, maybe
its prose as an assistant message) sends calls that group with the assistant turn held last.
When that turn's message renders unchanged (the model's own text, which the calls after it do
not alter) only the new messages are rendered; otherwise the whole conversation is, as before.
The reference is the template applied to the whole transcript and the tokenizer called once.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import dummy_definition, load_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway import template_window
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2 as c

TOOLS = [c.Tool(name="shell", description="run", parameters='{"type": "object"}')]
texts = st.lists(st.sampled_from(["ls", "<tool_call>", "🦀", "\n", " ", "ok", "汉字"]), max_size=4).map("".join)
# ("model" | "sent_call" | "sent_text" | "user", text): a model turn, a call the client sends
# back, an assistant message the client sends, a user message.
steps = st.lists(st.tuples(st.sampled_from(["model", "sent_call", "sent_call", "sent_text", "user"]), texts),
                 min_size=1, max_size=16)


@pytest.fixture(scope="module")
def smollm2():
    return load_definition("default")


def msg(role: int, text: str) -> c.Item:
    return c.Item(message=c.Message(role=role, content=[c.ContentPart(text=text)]))


def drive(model, plan: list[tuple[str, str]], incremental: bool) -> Conversation:
    """Each step's input appended as one delta; a model step also completes a turn with its text."""
    prompt = ChatPrompt(model)
    conv = Conversation(prompt, "m", "sys", TOOLS, incremental=incremental)
    for n, (kind, text) in enumerate(plan):
        if kind == "model":
            conv.append([msg(c.ROLE_USER, "go")])
            conv.complete([msg(c.ROLE_ASSISTANT, text)], [*model.tokenizer.encode(text), model.stop_token_ids[0]], text)
        elif kind == "sent_call":
            call = c.FunctionCall(call_id=f"c{n}", name="shell", arguments='{"cmd": "ls"}')
            conv.append([c.Item(function_call=call),
                         c.Item(function_call_output=c.FunctionCallOutput(call_id=f"c{n}", output=text))])
        else:
            conv.append([msg(c.ROLE_ASSISTANT if kind == "sent_text" else c.ROLE_USER, text)])
        assert conv.text == prompt.render("sys", TOOLS, conv.items, conv.raw)
    return conv


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_calls_sent_after_the_held_assistant_turn_render_as_the_whole_transcript(smollm2, plan, monkeypatch):
    monkeypatch.setattr(template_window, "VERIFY_BELOW_CHARS", 0)  # no safety net: the window alone
    monkeypatch.setattr(template_window, "VERIFY_FIRST", 0)
    for model in (dummy_definition(), smollm2):
        fast = drive(model, plan, incremental=True)
        slow = drive(model, plan, incremental=False)
        assert fast.prompt_ids() == slow.prompt_ids()


def test_a_call_sent_after_the_models_turn_renders_only_the_new_messages(monkeypatch):
    """The model's turn renders as its own text, so the call joining it changes nothing held: every
    delta after the first few is windowed (it rendered the whole conversation each time)."""
    monkeypatch.setattr(template_window, "VERIFY_BELOW_CHARS", 0)
    monkeypatch.setattr(template_window, "VERIFY_FIRST", 0)
    plan = [("user", "task")] + [(k, f"{k} {i}") for i in range(20) for k in ("model", "sent_call")]
    conv = drive(dummy_definition(), plan, incremental=True)
    assert conv.template_breaks == 0
    assert conv.windowed_renders >= 3 * 20 - 4, conv.windowed_renders
