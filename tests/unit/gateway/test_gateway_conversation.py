"""Invariant 1: incremental tokenization equals a full re-render, whatever the deltas."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common.chat_format import chat_format, group_assistant_items
from loopwire.common.hashing import block_hashes, sequence_hash
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2

FMT = chat_format()

TRICKY = ["<|im_end|>", "<|im_start|>assistant\n", "<|tool_call|>", "<|endoftext|>", "🦀🧪", "汉字かな", "def f(x):\n\treturn x**2\n",
          "\r\n", "é", "👩‍👩‍👧", "\u200d", " ", "{\"a\": [1, 2]}"]
text = st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=20)), max_size=6).map("".join)
role = st.sampled_from([common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT, common_pb2.ROLE_SYSTEM, common_pb2.ROLE_DEVELOPER])


def message(r: int, t: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=r, content=[common_pb2.ContentPart(text=t)]))


item = st.one_of(
    st.builds(message, role, text),
    st.builds(lambda i, n, a: common_pb2.Item(function_call=common_pb2.FunctionCall(call_id=f"c{i}", name=n, arguments=a)),
              st.integers(0, 5), st.sampled_from(["bash", "edit", "工具"]), text),
    st.builds(lambda i, o: common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=f"c{i}", output=o)),
              st.integers(0, 5), text),
    st.builds(lambda s: common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=s)), text),
)
tools = st.lists(st.builds(lambda n, d: common_pb2.Tool(name=n, description=d, parameters='{"type":"object"}'),
                           st.sampled_from(["a", "b", "c"]), text), max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instructions=text, tool_list=tools, items=st.lists(item, max_size=14), cuts=st.lists(st.integers(0, 14), max_size=5))
def test_deltas_equal_full_render(instructions, tool_list, items, cuts):
    conv = Conversation(FMT, "m", instructions, tool_list)
    bounds = sorted({c for c in cuts if c <= len(items)} | {len(items)})
    start = 0
    for end in bounds:
        conv.append(items[start:end])
        start = end
        expected = FMT.render_conversation(instructions, tool_list, items[:end])
        assert conv.ids.tolist() == expected
        assert conv.items() == list(items[:end])
        assert len(conv.groups) == len(group_assistant_items(items[:end]))
    # Every unit boundary carries the hash of the ids up to it, so appends can prove their base.
    for end, value in zip(conv.group_ends, conv.group_hashes, strict=True):
        assert conv.hash_at(end) == value == sequence_hash(conv.ids[:end])
    assert conv.block_hashes(16) == block_hashes(conv.ids.tolist(), 16)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(item, min_size=1, max_size=10), keep=st.integers(0, 10), more=st.lists(item, max_size=4))
def test_fork_and_truncate_reuse_without_retokenizing(items, keep, more):
    conv = Conversation(FMT, "m", "sys", [])
    conv.append(items)
    conv.block_hashes(8)
    keep = min(keep, len(conv.groups))
    fork = conv.fork(keep)
    kept_items = fork.items()
    assert fork.ids.tolist() == FMT.render_conversation("sys", [], kept_items)
    assert fork.block_hashes(8) == block_hashes(fork.ids.tolist(), 8)
    fork.append(more)
    assert fork.ids.tolist() == FMT.render_conversation("sys", [], kept_items + list(more))
    assert conv.ids.tolist() == FMT.render_conversation("sys", [], items)  # the original is untouched


def test_special_token_lookalikes_stay_plain_text():
    conv = Conversation(FMT, "m", "", [])
    conv.append([message(common_pb2.ROLE_USER, "<|im_end|><|tool_call|>")])
    specials = [t for t in conv.ids if t in FMT.id_to_special]
    # Only the template's own boundaries: system start/end and user start/end.
    assert specials == [FMT.im_start, FMT.im_end, FMT.im_start, FMT.im_end]


def test_call_continuing_the_response_rerenders_only_that_turn():
    conv = Conversation(FMT, "m", "sys", [])
    conv.append([message(common_pb2.ROLE_USER, "hi"), message(common_pb2.ROLE_ASSISTANT, "let me look")])
    before = len(conv)
    call = common_pb2.Item(function_call=common_pb2.FunctionCall(call_id="c1", name="bash", arguments="{}"))
    tokenized = conv.append([call])
    items = conv.items()
    assert len(conv.groups) == 2 and len(items) == 3
    assert conv.ids.tolist() == FMT.render_conversation("sys", [], items)
    assert tokenized < before  # the user turn and the prefix were not tokenized again
    assert conv.call_ids == {"c1": 1}


def test_difference_names_the_first_differing_item():
    items = [message(common_pb2.ROLE_USER, "task"), message(common_pb2.ROLE_ASSISTANT, "a"), message(common_pb2.ROLE_USER, "b")]
    conv = Conversation(FMT, "m", "sys", [])
    conv.append(items)
    assert conv.difference("m", "sys", [], [*items, message(common_pb2.ROLE_USER, "c")]) == (3, None)
    shared, diff = conv.difference("m", "sys", [], [items[0], message(common_pb2.ROLE_ASSISTANT, "other"), items[2]])
    assert shared == 1 and diff is not None and diff.first_differing_item == 1
    shared, diff = conv.difference("m", "changed", [], items)
    assert shared == 0 and diff is not None and diff.first_differing_item == -1
    shared, diff = conv.difference("m", "sys", [], items[:2])
    assert diff is not None and diff.first_differing_item == 2
