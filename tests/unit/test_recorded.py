"""Importers of recorded sessions: every shared trace loads, round-trips to a replay
script, and renders to the size DESIGN §8 reports."""

from __future__ import annotations

import json

import pytest
from session_files import session_path, session_paths, trace_paths

from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt, group_turns
from loopwire.common.recorded import load_session


@pytest.mark.parametrize("path", trace_paths(), ids=lambda p: p.name)
def test_every_trace_imports(path):
    s = load_session(path)
    assert s.task and s.turns
    assert [t.name for t in s.tools] == sorted(t.name for t in s.tools)
    called = {c.name for t in s.turns for c in t.calls}
    assert called <= {t.name for t in s.tools}
    script = s.replay_script()
    assert len(script.turns) == len(s.turns)
    # Every tool output answers a call of its own turn.
    for turn in s.turns:
        ids = {c.call_id for c in turn.calls}
        for out in turn.tool_outputs:
            assert out.call_id in ids


def test_mini_swe_agent_fields_match_the_raw_file():
    path = session_path(".traj.json")
    raw = json.loads(path.read_text())["messages"]
    s = load_session(path)
    assistants = [m for m in raw if m["role"] == "assistant"]
    assert len(s.turns) == len(assistants)
    assert s.turns[0].text == assistants[0]["content"]
    assert s.turns[0].calls[0].arguments == assistants[0]["tool_calls"][0]["function"]["arguments"]
    assert s.instructions == raw[0]["content"]


def test_openai_chat_format(tmp_path):
    doc = {
        "tools": [{"type": "function", "function": {"name": "zeta", "parameters": {"type": "object"}}},
                  {"type": "function", "function": {"name": "alpha", "description": "a"}}],
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "alpha", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
            {"role": "user", "content": "and now?"},
            {"role": "assistant", "content": "finished"},
        ],
    }
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(doc))
    s = load_session(path)
    assert s.format == "openai-chat" and s.instructions == "be brief" and s.task == "hi"
    assert [t.name for t in s.tools] == ["alpha", "zeta"]
    assert s.turns[0].calls[0].call_id == "c1"
    kinds = [i.WhichOneof("item") for i in s.turns[0].followups]
    assert kinds == ["function_call_output", "message"]
    assert s.turns[1].text == "finished" and not s.turns[1].calls


@pytest.mark.parametrize("content", ["", "[1, 2", '{"nothing": 1}', "[]"])
def test_bad_files_raise_value_error(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError):
        load_session(path)


def test_full_render_matches_item_by_item_render():
    """A render of the whole transcript equals the concatenated renders of its turns, as text and as ids
    (ChatML opens every turn with a special token, where the tokenizer always splits)."""
    model = dummy_definition()
    prompt = ChatPrompt(model)
    s = load_session(session_paths()[0])
    items = s.items()
    full = prompt.render(s.instructions, s.tools, items)
    pieces = [prompt.render(s.instructions, s.tools, [])]
    done = pieces[0]
    groups = group_turns(items)
    assert len(groups) < len(items)  # assistant messages and their calls are one turn
    for group in groups:
        upto = prompt.render(s.instructions, s.tools, items[: group[-1] + 1])
        assert upto.startswith(done) and upto[len(done):].startswith("<|im_start|>")
        pieces.append(upto[len(done):])
        done = upto
    assert "".join(pieces) == full
    assert [t for p in pieces for t in model.tokenizer.encode(p)] == prompt.encode_conversation(s.instructions, s.tools, items)


def test_reasoning_content_is_kept_as_the_thinking_the_model_generated(tmp_path):
    doc = {"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Running the tests.", "reasoning_content": "The bug is in L060.",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": "", "reasoning_content": "Nothing left to do."},
    ]}
    path = tmp_path / "reasoner.json"
    path.write_text(json.dumps(doc))
    s = load_session(path)
    assert s.turns[0].text == "<think>\nThe bug is in L060.\n</think>\n\nRunning the tests."
    assert s.turns[1].text == "<think>\nNothing left to do.\n</think>"


def test_swe_agent_demonstrations_stay_in_the_prefix_and_the_task_is_the_real_one(tmp_path):
    history = [
        {"role": "system", "content": "SETTING: a shell", "agent": "main", "message_type": "system_prompt"},
        {"role": "user", "content": "Here is a demonstration: ISSUE: demo bug ...", "agent": "main",
         "message_type": "demonstration", "is_demo": True},
        {"role": "user", "content": "ISSUE: the real bug", "agent": "main", "message_type": "observation"},
        {"role": "assistant", "content": "Looking.", "agent": "main", "message_type": "action",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "content": "found", "tool_call_ids": ["c1"], "agent": "main"},
    ]
    path = tmp_path / "demo.traj"
    path.write_text(json.dumps({"history": history}))
    s = load_session(path)
    assert s.task == "ISSUE: the real bug"
    assert "demo bug" in s.instructions and "SETTING" in s.instructions
