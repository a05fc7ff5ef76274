"""The hashes the layers must agree on: chunk-independent sequence hashes and chained
block hashes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loopwire.common.hashing import SequenceHash, block_hashes, sequence_hash

tokens = st.lists(st.integers(0, 100_281), max_size=200)


@given(tokens, st.lists(st.integers(1, 50), max_size=10))
def test_sequence_hash_is_independent_of_chunking(ids, cuts):
    h = SequenceHash()
    pos = 0
    for c in cuts:
        h.extend(ids[pos : pos + c])
        pos += c
    h.extend(ids[pos:])
    assert h.value == sequence_hash(ids) and h.length == len(ids)
    assert 0 <= h.value < 2**64


@given(tokens, st.integers(0, 100_281))
def test_sequence_hash_tells_extensions_apart(ids, extra):
    assert sequence_hash(ids) != sequence_hash([*ids, extra])


@given(tokens, st.integers(1, 32))
def test_block_hashes_chain_whole_prefixes(ids, size):
    hashes = block_hashes(ids, size)
    assert len(hashes) == len(ids) // size
    # A prefix's hashes are a prefix of the hashes; all are non-zero uint64.
    assert block_hashes(ids[: size * (len(hashes) // 2)], size) == hashes[: len(hashes) // 2]
    assert all(0 < h < 2**64 for h in hashes)


def test_block_hash_depends_on_everything_before():
    a = block_hashes([1] * 16 + [2] * 16, 16)
    b = block_hashes([3] * 16 + [2] * 16, 16)
    assert a[1] != b[1]
