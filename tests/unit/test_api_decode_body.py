"""Compressed request bodies (``Content-Encoding: gzip | zstd``, stacked): undone with a bound on
the output, so a decompression bomb is a 413 after at most the limit; unknown encodings are 415,
corrupt ones 400."""

from __future__ import annotations

import gzip

import pytest
import zstandard

from loopwire.api.context import ZSTD_MAX_WINDOW, decode_body
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
