"""Streaming detokenizer and tool-call parser: no broken UTF-8, no leaked stop strings."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt, assistant_text, render_call
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.detokenizer import StopStringFilter, Utf8Stream
from loopwire.gateway.output_parser import (
    CallArgumentsOut,
    CallDoneOut,
    CallStartedOut,
    OutputParser,
    TextOut,
)
from loopwire.v1 import common_pb2

MODEL = dummy_definition()
PROMPT = ChatPrompt(MODEL)
STOP = MODEL.stop_token_ids[0]
pieces = st.sampled_from(["🦀", "汉字", "👩‍👩‍👧", "é", "abc", " ", "\n", "<|im_end|>", "STOP", "ST", "{}", "😀😀", "<tool", "call>",
                          '{"a":1}', '{"path": "汉字", "n": [1, 2.5e3]}'])
text = st.one_of(st.text(max_size=40), st.lists(pieces, max_size=12).map("".join))
# What a model writes as prose: a special-token string in it would be tokenized as that token.
prose = text.filter(lambda t: MODEL.split_pattern.search(t) is None and "<tool_call>" not in t)


def split(seq: list, cuts: list[int]) -> list[list]:
    bounds = sorted({c % (len(seq) + 1) for c in cuts} | {0, len(seq)})
    return [seq[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=200, deadline=None)
@given(t=text, cuts=st.lists(st.integers(0, 400), max_size=30))
def test_utf8_bytes_split_anywhere_decode_to_the_text(t, cuts):
    data = t.encode()
    stream = Utf8Stream()
    out = [stream.feed(bytes(chunk)) for chunk in split(list(data), cuts)]
    out.append(stream.flush())
    assert "".join(out) == t
    assert "\ufffd" not in "".join(out) or "\ufffd" in t


@settings(max_examples=200, deadline=None)
@given(t=text, stops=st.lists(st.sampled_from(["STOP", "\n\n", "汉字", "😀"]), max_size=2), cuts=st.lists(st.integers(0, 400)))
def test_stop_strings_never_leak(t, stops, cuts):
    filt = StopStringFilter(stops)
    released = ""
    for chunk in split(list(t), cuts):
        released += filt.feed("".join(chunk))
        assert not any(s in released for s in stops)
    released += filt.flush()
    hits = [t.find(s) for s in stops if s in t]
    assert released == (t[: min(hits)] if hits else t)
    assert filt.stopped == bool(hits)


def calls_strategy():
    return st.lists(
        st.builds(lambda n, a: common_pb2.FunctionCall(name=n, arguments=a),
                  st.sampled_from(["bash", "edit_file", "搜索"]), prose.filter(lambda t: "</tool_call>" not in t)),
        max_size=3)


def written_arguments(call: common_pb2.FunctionCall) -> str:
    """The arguments as the model writes them in the Hermes JSON (what the parser hands on):
    JSON as it is, anything else as a JSON string."""
    try:
        json.loads(call.arguments.strip() or "{}")
        return call.arguments.strip() or "{}"
    except ValueError:
        return json.dumps(call.arguments, ensure_ascii=False)


@settings(max_examples=150, deadline=None)
@given(t=prose, calls=calls_strategy(), cuts=st.lists(st.integers(0, 600), max_size=25))
def test_parser_recovers_text_and_calls_from_any_token_split(t, calls, cuts):
    ids = PROMPT.output_ids(t, calls)  # Hermes text tokenized by the model's tokenizer, then the stop id
    parser = OutputParser(MODEL, call_id_for=lambda n: f"id{n}")
    events = []
    for chunk in split(ids, cuts):
        events += parser.feed(chunk)
    events += parser.finish()
    assert parser.saw_stop_token
    assert parser.raw_text == assistant_text(t, calls)  # everything the model wrote, markup included
    # The text is what remains without the calls' markup (their separating newlines stay).
    expected = assistant_text(t, calls)
    for call in calls:
        expected = expected.replace(render_call(call), "", 1)
    assert "".join(e.text for e in events if isinstance(e, TextOut)) == expected == parser.text
    done = [e.call for e in events if isinstance(e, CallDoneOut)]
    assert [(c.name, c.arguments) for c in done] == [(c.name, written_arguments(c)) for c in calls]
    # JSON arguments come back byte for byte (a replayed call keeps what was recorded).
    assert all(d.arguments == c.arguments for d, c in zip(done, calls, strict=True) if c.arguments == written_arguments(c))
    assert [c.call_id for c in done] == [f"id{i}" for i in range(len(calls))]
    for i, call in enumerate(calls):
        # started, then argument deltas that add up to the arguments, then done — in that order
        mine = [e for e in events if getattr(e, "index", None) == i and not isinstance(e, TextOut)]
        assert isinstance(mine[0], CallStartedOut) and mine[0].name == call.name
        assert isinstance(mine[-1], CallDoneOut)
        assert "".join(e.delta for e in mine[1:-1] if isinstance(e, CallArgumentsOut)) == written_arguments(call)
    # Safety offsets only grow, so buffer mode can release in order.
    offsets = [e.safety_offset for e in events]
    assert offsets == sorted(offsets)
    # The output items with the raw text render back to exactly the generated ids: kept, never re-tokenized.
    conv = Conversation(PROMPT, "m", "", [])
    conv.append([common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text="go")]))])
    before = conv.prompt_ids()
    conv.complete(parser.output_items(), ids, parser.raw_text)
    assert conv.outputs_retokenized == 0 and conv.template_breaks == 0
    assert conv.ids.tolist() == [*before, *ids]


def test_special_token_lookalikes_written_as_plain_tokens_stay_text():
    # A model can spell "<|im_end|>" with plain tokens: that is text, and only the stop id ends the turn.
    lookalike = "<|im_end|> and <|im_start|>"
    ids = [i for ch in lookalike for i in MODEL.tokenizer.encode(ch)] + [STOP]
    assert not set(ids[:-1]) & set(MODEL.tokenizer.added_tokens.values())
    parser = OutputParser(MODEL)
    events = [e for tok in ids for e in parser.feed([tok])]
    assert parser.saw_stop_token and parser.text == lookalike == parser.raw_text
    assert "".join(e.text for e in events if isinstance(e, TextOut)) == lookalike


def test_malformed_call_markup_stays_text():
    body = "<tool_call>\nnot json at all\n</tool_call>"
    parser = OutputParser(MODEL)
    parser.feed(MODEL.tokenizer.encode("see " + body) + [STOP])
    assert parser.calls == [] and parser.text == "see " + body


def test_stop_string_ends_output_before_the_stop_token():
    parser = OutputParser(MODEL, stops=["</answer>"])
    ids = PROMPT.output_ids("the answer</answer> and more", [])
    events = []
    for tok in ids:  # token by token, as the gateway feeds it: nothing more once the parser is done
        if parser.done:
            break
        events += parser.feed([tok])
    events += parser.finish()
    assert "".join(e.text for e in events if isinstance(e, TextOut)) == "the answer"
    assert parser.stopped_by_string and parser.done and not parser.saw_stop_token


def test_output_cut_by_length_keeps_text_and_marks_the_unfinished_call_incomplete():
    ids = PROMPT.output_ids("look", [common_pb2.FunctionCall(name="bash", arguments='{"command": "ls"}')])
    parser = OutputParser(MODEL)
    events = parser.feed(ids[:-4]) + parser.finish()  # cut before "</tool_call>" and the stop id
    assert parser.text == "look\n" and parser.calls == [] and not parser.saw_stop_token
    assert parser.cut is not None and parser.cut.name == "bash"
    assert parser.finish_reason(common_pb2.FINISH_REASON_LENGTH) == common_pb2.FINISH_REASON_LENGTH
    assert any(isinstance(e, CallStartedOut) for e in events)
    assert not any(isinstance(e, CallDoneOut) for e in events)
