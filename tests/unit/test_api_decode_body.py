"""Compressed request bodies (``Content-Encoding: gzip | zstd``, stacked): undone with a bound on
the output, so a decompression bomb is a 413 after at most the limit; unknown encodings are 415,
corrupt ones 400; more zstd frames than the cap (or a second gzip member) are 400 whatever their size."""

from __future__ import annotations

import gzip

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from loopwire.api.body import MAX_ZSTD_FRAMES, ZSTD_MAX_WINDOW, decode_body, zstd_frames
from loopwire.api.errors import ApiError

BODY = b'{"model": "loopwire", "input": "hi"}'


def zstd(data: bytes, **kwargs) -> bytes:
    return zstandard.ZstdCompressor(**kwargs).compress(data)


@pytest.mark.parametrize(("encoding", "data"), [
    ("", BODY), ("identity", BODY), ("gzip", gzip.compress(BODY)), ("x-gzip", gzip.compress(BODY)),
    ("zstd", zstd(BODY)), ("Zstd", zstd(BODY)), ("gzip, zstd", zstd(gzip.compress(BODY))),
    ("zstd", zstd(BODY[:10]) + zstd(BODY[10:])),  # two frames
])
def test_decodes(encoding, data):
    assert decode_body(data, encoding, 1000) == BODY


def test_zstd_frame_without_content_size():
    writer = zstandard.ZstdCompressor().compressobj()
    assert decode_body(writer.compress(BODY) + writer.flush(), "zstd", 1000) == BODY


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_bomb_is_413_at_the_limit(encoding):
    inflated = b"\0" * (50 * 1024 * 1024)
    data = gzip.compress(inflated) if encoding == "gzip" else zstd(inflated)
    with pytest.raises(ApiError) as e:
        decode_body(data, encoding, 64 * 1024)
    assert e.value.status == 413 and e.value.code == "request_too_large"


def test_exactly_at_the_limit_is_accepted():
    assert decode_body(zstd(b"a" * 1000), "zstd", 1000) == b"a" * 1000
    assert decode_body(gzip.compress(b"a" * 1000), "gzip", 1000) == b"a" * 1000
    with pytest.raises(ApiError):
        decode_body(gzip.compress(b"a" * 1001), "gzip", 1000)


@pytest.mark.parametrize(("encoding", "data", "status"), [
    ("br", BODY, 415), ("deflate", BODY, 415), ("gzip, compress", gzip.compress(BODY), 415),
    ("gzip", b"nope", 400), ("zstd", b"nope", 400), ("gzip", gzip.compress(BODY)[:-4], 400),
    ("gzip", gzip.compress(BODY) + b"trailing", 400),
])
def test_refusals(encoding, data, status):
    with pytest.raises(ApiError) as e:
        decode_body(data, encoding, 1000)
    assert e.value.status == status and e.value.param == "content-encoding"


def test_a_frame_wanting_a_huge_window_is_refused():
    params = zstandard.ZstdCompressionParameters.from_level(19, window_log=27)
    data = zstandard.ZstdCompressor(compression_params=params).compress(b"a" * (ZSTD_MAX_WINDOW * 2 + 1))
    with pytest.raises(ApiError) as e:
        decode_body(data, "zstd", 10**9)
    assert e.value.status == 400


EMPTY_FRAME = zstd(b"")


def test_frames_up_to_the_cap_are_decoded():
    data = b"".join(zstd(bytes([65 + i])) for i in range(MAX_ZSTD_FRAMES))
    assert decode_body(data, "zstd", 1000) == bytes(range(65, 65 + MAX_ZSTD_FRAMES))


@pytest.mark.parametrize("frames", [MAX_ZSTD_FRAMES + 1, 1_700_000])
def test_more_frames_than_the_cap_are_400_naming_it(frames):
    with pytest.raises(ApiError) as e:
        decode_body(EMPTY_FRAME * frames, "zstd", 16 * 1024 * 1024)
    assert e.value.status == 400 and e.value.code == "too_many_frames"
    assert f"more than {MAX_ZSTD_FRAMES} zstd frames" in e.value.message


def test_skippable_frames_count_too():
    skippable = b"\x50\x2a\x4d\x18" + (2).to_bytes(4, "little") + b"ab"
    with pytest.raises(ApiError):
        decode_body(skippable * MAX_ZSTD_FRAMES + zstd(BODY), "zstd", 1000)


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8), st.booleans(), st.booleans())
def test_the_frame_walk_counts_what_the_compressor_wrote(parts, checksum, content_size):
    compressor = zstandard.ZstdCompressor(write_checksum=checksum, write_content_size=content_size)
    data = b"".join(compressor.compress(p) for p in parts)
    assert zstd_frames(data, 100) == len(parts)


def test_a_second_gzip_member_is_refused():
    with pytest.raises(ApiError) as e:
        decode_body(gzip.compress(BODY) + gzip.compress(BODY), "gzip", 1000)
    assert e.value.status == 400
