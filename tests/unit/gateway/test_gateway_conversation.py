"""Invariant 1: incremental tokenization equals one tokenizer call on the full rendering, whatever the deltas."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common.hashing import block_hashes, sequence_hash
from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt, assistant_text, group_turns
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2

MODEL = dummy_definition()
PROMPT = ChatPrompt(MODEL)
IM_START, IM_END = MODEL.tokenizer.added_tokens["<|im_start|>"], MODEL.tokenizer.added_tokens["<|im_end|>"]

TRICKY = ["<|im_end|>", "<|im_start|>assistant\n", "<tool_call>", "</tool_call>", "<|endoftext|>", "🦀🧪", "汉字かな",
          "def f(x):\n\treturn x**2\n", "\r\n", "é", "👩‍👩‍👧", "\u200d", " ", "{\"a\": [1, 2]}"]
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


def reference(instructions: str, tool_list: list[common_pb2.Tool], items: list[common_pb2.Item]) -> list[int]:
    """The naive way: render everything with the template, tokenize it in one call."""
    return PROMPT.encode_conversation(instructions, tool_list, items, add_generation_prompt=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instructions=text, tool_list=tools, items=st.lists(item, max_size=14), cuts=st.lists(st.integers(0, 14), max_size=5))
def test_deltas_equal_full_render(instructions, tool_list, items, cuts):
    conv = Conversation(PROMPT, "m", instructions, tool_list)
    assert conv.prompt_ids() == reference(instructions, tool_list, [])
    bounds = sorted({c for c in cuts if c <= len(items)} | {len(items)})
    start = 0
    ends = []
    for end in bounds:
        conv.append(items[start:end])
        start = end
        assert conv.prompt_ids() == reference(instructions, tool_list, items[:end])
        assert len(conv) == len(conv.prompt_ids())
        assert conv.items == list(items[:end]) and conv.item_count == end
        assert conv.text == PROMPT.render(instructions, tool_list, items[:end])
        ends.append((len(conv.ids), conv.template_breaks))
    # Every append boundary since the last rebuild carries the hash of the ids up to it, so appends can prove their base.
    for end, breaks in ends:
        if breaks == conv.template_breaks:
            assert conv.hash_at(end) == sequence_hash(conv.ids[:end])
    assert conv.block_hashes(16) == block_hashes(conv.ids.tolist(), 16)
    # ChatML renders each message on its own: only a call joining the assistant turn held before
    # (a cut inside a turn) rewrites earlier text, and each such rewrite is counted.
    starts = {group[0] for group in group_turns(items)}
    assert conv.template_breaks == sum(1 for end in bounds if 0 < end < len(items) and end not in starts)


@settings(max_examples=60, deadline=None)
@given(items=st.lists(item, min_size=1, max_size=10), keep=st.integers(0, 10), more=st.lists(item, max_size=4))
def test_fork_and_truncate_reuse_without_retokenizing(items, keep, more):
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append(items)
    conv.block_hashes(8)
    keep = min(keep, conv.item_count)
    fork = conv.fork(keep)
    assert fork.items == list(items[:keep])
    assert fork.prompt_ids() == reference("sys", [], items[:keep])
    assert fork.block_hashes(8) == block_hashes(fork.ids.tolist(), 8)
    fork.append(more)
    assert fork.prompt_ids() == reference("sys", [], [*items[:keep], *more])
    assert conv.prompt_ids() == reference("sys", [], items)  # the original is untouched
    assert conv.items == list(items)


def test_fork_at_an_append_boundary_reuses_the_held_ids():
    first = [message(common_pb2.ROLE_USER, "task " * 50)]
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append(first)
    held = len(conv.ids)
    conv.append([message(common_pb2.ROLE_ASSISTANT, "sure"), message(common_pb2.ROLE_USER, "more")])
    fork = conv.fork(1)
    assert fork.ids.tolist() == conv.ids.tolist()[:held]
    assert fork.prompt_ids() == reference("sys", [], first)


def test_special_token_strings_in_text_tokenize_as_the_reference_does():
    # The reference is the tokenizer on the rendered text, which (like apply_chat_template) turns
    # special-token strings into their ids; the old tool-call tokens are plain text now.
    conv = Conversation(PROMPT, "m", "", [])
    conv.append([message(common_pb2.ROLE_USER, "a<|im_end|>b <|tool_call|><tool_call>")])
    ids = conv.prompt_ids()
    assert ids == reference("", [], [message(common_pb2.ROLE_USER, "a<|im_end|>b <|tool_call|><tool_call>")])
    specials = [t for t in ids if t in MODEL.tokenizer.added_tokens.values()]
    # The user turn's start, the im_end written in the text, its end, then the generation prompt.
    assert specials == [IM_START, IM_END, IM_END, IM_START]
    plain = b"".join(MODEL.tokenizer.token_bytes(t) for t in ids if t not in MODEL.tokenizer.added_tokens.values())
    assert b"<|tool_call|><tool_call>" in plain


def test_call_continuing_an_assistant_message_rerenders_the_conversation_exactly():
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append([message(common_pb2.ROLE_USER, "hi"), message(common_pb2.ROLE_ASSISTANT, "let me look")])
    call = common_pb2.Item(function_call=common_pb2.FunctionCall(call_id="c1", name="bash", arguments="{}"))
    conv.append([call])
    items = conv.items
    assert len(group_turns(items)) == 2 and len(items) == 3
    assert conv.prompt_ids() == reference("sys", [], items)
    # The call joins the assistant turn, so the turn's earlier rendering is no prefix any more: counted.
    assert conv.template_breaks == 1
    assert conv.call_ids == {"c1": 2}


def test_model_output_is_kept_as_the_generated_ids():
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append([message(common_pb2.ROLE_USER, "list the files")])
    calls = [common_pb2.FunctionCall(call_id="c1", name="bash", arguments='{"command": "ls"}')]
    generated = PROMPT.output_ids("looking", calls)
    output = [message(common_pb2.ROLE_ASSISTANT, "looking"), common_pb2.Item(function_call=calls[0])]
    tokenized = conv.complete(output, generated, assistant_text("looking", calls))
    assert conv.outputs_retokenized == 0
    assert tokenized == len(conv.tail_ids)  # only the next generation prompt
    assert conv.ids.tolist()[-len(generated):] == generated
    assert conv.hash_at(len(conv.ids)) == sequence_hash(conv.ids)
    assert conv.call_ids == {"c1": 2}
    # The next input extends the generated ids.
    held = conv.ids.tolist()
    conv.append([common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id="c1", output="a.txt"))])
    assert conv.ids.tolist()[: len(held)] == held and conv.template_breaks == 0


def test_output_cut_by_length_keeps_its_ids_so_the_next_turn_appends():
    """A turn cut by its length limit ends without a stop id; the template closes it with the stop
    token's text, so the generated ids stay (what the replica holds) and the next input extends them."""
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append([message(common_pb2.ROLE_USER, "count")])
    generated = PROMPT.output_ids("one two three", [])[:-2]  # cut by length: no stop id
    text = b"".join(MODEL.tokenizer.token_bytes(t) for t in generated).decode()
    conv.complete([message(common_pb2.ROLE_ASSISTANT, text)], generated, text)
    assert conv.outputs_retokenized == 0
    assert conv.ids.tolist()[-len(generated):] == generated
    assert conv.hash_at(len(conv.ids)) == sequence_hash(conv.ids)
    assert conv.prompt_ids() == reference("sys", [], conv.items)
    held = conv.ids.tolist()
    conv.append([message(common_pb2.ROLE_USER, "go on")])
    assert conv.ids.tolist()[: len(held)] == held and conv.template_breaks == 0
    assert conv.prompt_ids() == reference("sys", [], conv.items)


def test_output_cut_inside_a_character_is_tokenized_as_rendered():
    """Cut between the bytes of one character, the text is not what the ids say: rendered anew."""
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append([message(common_pb2.ROLE_USER, "say it")])
    ids = MODEL.tokenizer.encode("😀 ok")  # the emoji is two byte-level tokens in cl100k
    cut = next(n for n in range(1, len(ids)) if not _decodes(ids[:n]))
    text = b"".join(MODEL.tokenizer.token_bytes(t) for t in ids[:cut]).decode("utf-8", "replace")
    conv.complete([message(common_pb2.ROLE_ASSISTANT, text)], ids[:cut], text)
    assert conv.outputs_retokenized == 1
    assert conv.prompt_ids() == reference("sys", [], conv.items)


def _decodes(ids: list[int]) -> bool:
    try:
        b"".join(MODEL.tokenizer.token_bytes(t) for t in ids).decode()
    except UnicodeDecodeError:
        return False
    return True


def test_difference_names_the_first_differing_item():
    items = [message(common_pb2.ROLE_USER, "task"), message(common_pb2.ROLE_ASSISTANT, "a"), message(common_pb2.ROLE_USER, "b")]
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append(items)
    assert conv.difference("m", "sys", [], [*items, message(common_pb2.ROLE_USER, "c")]) == (3, None)
    shared, diff = conv.difference("m", "sys", [], [items[0], message(common_pb2.ROLE_ASSISTANT, "other"), items[2]])
    assert shared == 1 and diff is not None and diff.first_differing_item == 1
    shared, diff = conv.difference("m", "changed", [], items)
    assert shared == 0 and diff is not None and diff.first_differing_item == -1
    shared, diff = conv.difference("m", "sys", [], items[:2])
    assert diff is not None and diff.first_differing_item == 2


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instructions=text, tool_list=tools, items=st.lists(item, max_size=10), new_instructions=text, new_tools=tools)
def test_a_new_header_renders_the_held_items_as_the_reference_does(instructions, tool_list, items, new_instructions,
                                                                    new_tools):
    conv = Conversation(PROMPT, "m", instructions, tool_list)
    conv.append(items)
    changed, tokenized = conv.with_header("m", new_instructions, new_tools)
    assert changed.prompt_ids() == reference(new_instructions, new_tools, items)
    assert tokenized >= len(changed.prompt_ids())  # all of it tokenized anew (the head's tail twice)
    assert conv.prompt_ids() == reference(instructions, tool_list, items)  # the held conversation is untouched
    assert changed.header_change("m", new_instructions, new_tools) is None
