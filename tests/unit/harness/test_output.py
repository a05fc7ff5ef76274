"""Output capping keeps head and tail with a note, in bounded memory, as valid UTF-8."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loopwire.harness.output import HeadTailBuffer, cap, to_text


def test_small_output_is_kept_whole():
    assert cap(b"hello", 100).text == "hello" and not cap(b"hello", 100).truncated


def test_large_output_keeps_head_and_tail_and_says_what_was_cut():
    data = b"".join(b"line %d\n" % n for n in range(10000))
    out = cap(data, 1000)
    assert out.truncated and out.text.startswith("line 0\n") and out.text.endswith("line 9999\n")
    assert f"of {len(data)} bytes" in out.text


@given(st.binary(max_size=5000), st.lists(st.integers(1, 700), max_size=30), st.integers(2, 2000))
def test_streamed_buffer_keeps_the_same_head_and_tail(data, cuts, limit):
    buf = HeadTailBuffer(limit)
    pos = 0
    for size in cuts:
        buf.feed(data[pos : pos + size])
        pos += size
    buf.feed(data[pos:])
    out = buf.result()
    assert buf.total == len(data)
    assert out.truncated == (len(data) > limit)
    if out.truncated:
        assert out.text.startswith(to_text(data[: limit // 2])) and out.text.endswith(to_text(data[-(limit // 2):]))
    else:
        assert out.text == to_text(data)
    out.text.encode("utf-8")


@given(st.text())
def test_any_text_becomes_encodable(text):
    to_text(text).encode("utf-8")  # lone surrogates (undecodable file names) are escaped
