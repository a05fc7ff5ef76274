"""Reasoning end to end without a mesh: the gateway's parser passes a think block on (never parsed
for calls), the api returns it as a reasoning item (streamed with reasoning_text events), and a
reasoning item sent back renders the turn as generated, so a full request extends the held
conversation (nothing of turn 1 is tokenized again), while dropping it breaks the cache.
"""

from __future__ import annotations

import dataclasses

from loopwire.api import items as api_items
from loopwire.api.create import parse_create
from loopwire.api.events import ResponseBuilder
from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.output_parser import CallDoneOut, OutputParser, TextOut
from loopwire.v1 import gateway_pb2

THINKING_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)
MODEL = dataclasses.replace(dummy_definition(), chat_template=THINKING_TEMPLATE)
STOP = MODEL.stop_token_ids[0]
REASONING = "\nThe user greets me; a <tool_call> here is only a thought.\n"
ANSWER = "Hello! How can I help?"
OUTPUT = f"<think>{REASONING}</think>\n\n{ANSWER}"


def parse(text: str, pieces: int = 7) -> OutputParser:
    """``text`` generated token by token (fed in ``pieces`` batches), then the stop token."""
    ids = MODEL.tokenizer.encode(text)
    parser = OutputParser(MODEL)
    step = max(1, len(ids) // pieces)
    for i in range(0, len(ids), step):
        parser.feed(ids[i : i + step])
    parser.feed([STOP])
    return parser


def test_the_parser_keeps_the_think_block_out_of_call_parsing():
    parser = parse(OUTPUT)
    assert parser.reasoning == REASONING
    assert parser.calls == [] and parser.text == OUTPUT  # the mention of <tool_call> stayed text
    # After the block, a real call is still found.
    with_call = parse(f'<think>{REASONING}</think>\n\n<tool_call>\n{{"name": "ls", "arguments": {{}}}}\n</tool_call>')
    assert [c.name for c in with_call.calls] == ["ls"] and with_call.reasoning == REASONING
    # A model that does not think: unchanged (no reasoning, the call is parsed).
    plain = OutputParser(dummy_definition())
    events = plain.feed(dummy_definition().tokenizer.encode('<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'))
    assert any(isinstance(e, CallDoneOut) for e in events) and plain.reasoning == ""


def test_split_tokens_give_the_same_text_however_batched():
    for pieces in (1, 3, 50):
        parser = parse(OUTPUT, pieces)
        assert parser.reasoning == REASONING and parser.text == OUTPUT


def builder() -> ResponseBuilder:
    return ResponseBuilder(parse_create({"model": "m", "input": "hi"}, models=[]))


def stream(b: ResponseBuilder, deltas: list[str], output_text: str) -> list[dict]:
    events = b.feed(gateway_pb2.ConverseResponse(created=gateway_pb2.ResponseCreated(response_id="resp_x")))
    for d in deltas:
        events += b.feed(gateway_pb2.ConverseResponse(text_delta=gateway_pb2.TextDelta(text=d)))
    parser = parse(output_text)
    done = gateway_pb2.ResponseCompleted(output=parser.output_items())
    events += b.feed(gateway_pb2.ConverseResponse(completed=done))
    return events


def test_reasoning_is_a_reasoning_item_with_its_own_events():
    chunks = [OUTPUT[i : i + 3] for i in range(0, len(OUTPUT), 3)]  # markers cut across deltas
    b = builder()
    events = stream(b, chunks, OUTPUT)
    types = [e["type"] for e in events]
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    answer = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert reasoning == REASONING and answer == ANSWER
    assert types.index("response.reasoning_text.done") < types.index("response.output_text.delta")
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"]["type"] for e in done] == ["reasoning", "message"]
    final = b.response()["output"]
    assert final[0] == {"type": "reasoning", "id": "rs_x_0", "status": "completed", "summary": [],
                        "content": [{"type": "reasoning_text", "text": REASONING}]}
    assert final[1]["type"] == "message" and final[1]["content"][0]["text"] == ANSWER
    assert done[0]["item"] == final[0]  # streamed and final items agree
    # Text that does not open with a think block is the message, as before.
    plain = builder()
    out = stream(plain, ["Hi <think> there"], "Hi <think> there")
    assert not any(e["type"].startswith("response.reasoning") for e in out)
    assert plain.response()["output"][0]["content"][0]["text"] == "Hi <think> there"


def conversation_after_turn_one() -> tuple[Conversation, list[dict]]:
    """Turn 1 held by the gateway: the user's message, then the output the model generated; and
    the output as the api returned it to the client."""
    prompt = ChatPrompt(MODEL)
    conv = Conversation(prompt, "m", "Be brief.", [])
    conv.append(api_items.response_input("Hi there! " * 30))
    parser = parse(OUTPUT)
    generated = [*MODEL.tokenizer.encode(OUTPUT), STOP]
    conv.complete(parser.output_items(), generated, parser.raw_text)
    assert conv.outputs_retokenized == 0  # the generated ids were kept
    returned = api_items.output_items("resp_x", parser.output_items())
    return conv, returned


def turn_two(conv: Conversation, returned: list[dict]) -> tuple[int, int, object]:
    """A full request with turn 1 as returned: (items shared, tokens tokenized, the difference)."""
    body = [{"role": "user", "content": "Hi there! " * 30}, *returned, {"role": "user", "content": "Tell me more."}]
    request = api_items.response_input(body)
    shared, difference = conv.difference("m", "Be brief.", [], request)
    if difference is None:
        held = conv.fork(shared)  # copies ids, re-tokenizes nothing
        return shared, held.append(request[shared:]), None
    fresh = Conversation(ChatPrompt(MODEL), "m", "Be brief.", [])
    return shared, fresh.initial_tokens + fresh.append(request), difference


def test_a_reasoning_item_sent_back_keeps_the_prefix_and_dropping_it_breaks_it():
    conv, returned = conversation_after_turn_one()
    assert [r["type"] for r in returned] == ["reasoning", "message"]
    kept_shared, kept_tokenized, kept_diff = turn_two(conv, returned)
    dropped = [r for r in returned if r["type"] != "reasoning"]
    drop_shared, drop_tokenized, drop_diff = turn_two(conv, dropped)
    assert kept_diff is None and kept_shared == 2  # the full request extends the held conversation
    assert drop_diff is not None and drop_shared == 1  # the assistant turn differs: a cache break
    turn_one = len(MODEL.tokenizer.encode(OUTPUT))
    new_turn = len(MODEL.tokenizer.encode("\n<|im_start|>user\nTell me more.<|im_end|>\n<|im_start|>assistant\n"))
    assert kept_tokenized <= new_turn  # only the new user message (and the generation prompt)
    assert drop_diff.first_differing_item == 1  # type: ignore[attr-defined]
    # Everything again, the user's first message and turn 1's answer included.
    assert drop_tokenized > len(conv) - turn_one + new_turn > 5 * kept_tokenized
    print(f"tokenized with reasoning sent back: {kept_tokenized}, dropped: {drop_tokenized} "
          f"(held {len(conv)} tokens)")


def test_reasoning_items_fold_into_their_turn():
    block = {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "r"}]}
    got = api_items.response_input([{"role": "user", "content": "q"}, block,
                                    {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}])
    assert got[1].message.content[0].text == "<think>r</think>" and got[2].function_call.name == "ls"
    summary_only = {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "s"}]}
    assert len(api_items.response_input([{"role": "user", "content": "q"}, summary_only])) == 1  # dropped
    msg = api_items.response_input([block, {"role": "assistant", "content": "a"}])
    assert [m.message.content[0].text for m in msg] == ["<think>r</think>\n\na"]


def test_text_events_are_text_out():
    assert all(isinstance(e, TextOut) for e in OutputParser(MODEL).feed(MODEL.tokenizer.encode("<think>x")))
