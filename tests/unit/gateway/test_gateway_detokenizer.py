"""Streaming detokenizer and tool-call parser: no broken UTF-8, no leaked stop strings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.chat_format import chat_format
from loopwire.gateway.detokenizer import StopStringFilter, Utf8Stream
from loopwire.gateway.output_parser import (
    CallArgumentsOut,
    CallDoneOut,
    CallStartedOut,
    OutputParser,
    TextOut,
)
from loopwire.v1 import common_pb2

FMT = chat_format()
pieces = st.sampled_from(["🦀", "汉字", "👩‍👩‍👧", "é", "abc", " ", "\n", "<|im_end|>", "STOP", "ST", "{}", "😀😀"])
text = st.one_of(st.text(max_size=40), st.lists(pieces, max_size=12).map("".join))


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
                  st.sampled_from(["bash", "edit_file", "搜索"]), text), max_size=3)


@settings(max_examples=150, deadline=None)
@given(t=text, calls=calls_strategy(), cuts=st.lists(st.integers(0, 600), max_size=25))
def test_parser_recovers_text_and_calls_from_any_token_split(t, calls, cuts):
    ids = FMT.render_assistant_output(t, calls)
    parser = OutputParser(FMT, call_id_for=lambda n: f"id{n}")
    events = []
    for chunk in split(ids, cuts):
        events += parser.feed(chunk)
    events += parser.finish()
    assert parser.saw_stop_token
    assert "".join(e.text for e in events if isinstance(e, TextOut)) == t == parser.text
    done = [e.call for e in events if isinstance(e, CallDoneOut)]
    assert [(c.name, c.arguments) for c in done] == [(c.name, c.arguments) for c in calls]
    assert [c.call_id for c in done] == [f"id{i}" for i in range(len(calls))]
    for i, call in enumerate(calls):
        # started, then argument deltas that add up to the arguments, then done — in that order
        mine = [e for e in events if getattr(e, "index", None) == i and not isinstance(e, TextOut)]
        assert isinstance(mine[0], CallStartedOut) and mine[0].name == call.name
        assert isinstance(mine[-1], CallDoneOut)
        assert "".join(e.delta for e in mine[1:-1] if isinstance(e, CallArgumentsOut)) == call.arguments
    # Safety offsets only grow, so buffer mode can release in order.
    offsets = [e.safety_offset for e in events]
    assert offsets == sorted(offsets)
    # The output items re-render to exactly the generated ids: the canonical output.
    items = parser.output_items()
    assert FMT.render_conversation("", [], items)[len(FMT.render_prefix("", [])):] == [*FMT.generation_prompt(), *ids]


def test_stop_string_ends_output_before_the_stop_token():
    parser = OutputParser(FMT, stops=["</answer>"])
    ids = FMT.render_assistant_output("the answer</answer> and more", [])
    events = [e for tok in ids for e in parser.feed([tok])] + parser.finish()
    assert "".join(e.text for e in events if isinstance(e, TextOut)) == "the answer"
    assert parser.stopped_by_string and parser.done and not parser.saw_stop_token


def test_output_cut_by_length_keeps_text_and_drops_the_unfinished_call():
    ids = FMT.render_assistant_output("look", [common_pb2.FunctionCall(name="bash", arguments='{"command": "ls"}')])
    parser = OutputParser(FMT)
    events = parser.feed(ids[:-4]) + parser.finish()
    assert parser.text == "look" and parser.calls == []
    assert any(isinstance(e, CallStartedOut) for e in events)
    assert not any(isinstance(e, CallDoneOut) for e in events)
