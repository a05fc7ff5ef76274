"""Token-sequence hashes shared by gateway, router, engines and clients in other languages.

Two kinds, because they answer two questions:

* ``SequenceHash`` identifies a whole held sequence so an append can prove it extends
  what the replica holds (``AppendPrompt.base_hash``).
* ``block_hashes`` are the prefix-cache keys of full KV blocks, chained (parent hash +
  token ids) as in vLLM, so equal hashes mean equal whole prefixes.

Both are XXH64 (seed 0) over token ids encoded as unsigned 32-bit little-endian integers, so
Python hashes at C speed over array bytes and any language's xxHash computes the same values
(vectors: ``tests/fixtures/hash_vectors.json``):

* sequence hash = XXH64(ids); extending it costs O(new tokens) and does not depend on how the
  sequence was chunked (a streaming XXH64 state);
* block hash = XXH64(parent as uint64 little-endian ‖ the block's ids), 0 replaced by 1;
* the first block's parent is 0, or for a cache salt (a tenant) the first 8 bytes, as a
  little-endian uint64, of SHA-256("loopwire cache salt\\0" ‖ salt in UTF-8).
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable

import xxhash

ROOT_BLOCK_HASH = 0
_xxh64 = xxhash.xxh64_intdigest


def token_bytes(token_ids: Iterable[int]) -> bytes:
    """The ids as the hashes read them: uint32 little-endian (OverflowError outside uint32)."""
    ids = array("I", token_ids)
    if ids.itemsize != 4:  # pragma: no cover - no supported platform has another size
        ids = array("L", ids)
    if sys.byteorder == "big":  # pragma: no cover
        ids.byteswap()
    return ids.tobytes()


class SequenceHash:
    """Incremental hash of a token sequence; ``value`` fits in a uint64."""

    __slots__ = ("_state", "length")

    def __init__(self) -> None:
        self._state = xxhash.xxh64()
        self.length = 0

    @property
    def value(self) -> int:
        return self._state.intdigest()

    def extend(self, token_ids: Iterable[int]) -> SequenceHash:
        data = token_bytes(token_ids)
        self._state.update(data)
        self.length += len(data) // 4
        return self

    def copy(self) -> SequenceHash:
        other = SequenceHash.__new__(SequenceHash)
        other._state, other.length = self._state.copy(), self.length
        return other


def sequence_hash(token_ids: Iterable[int]) -> int:
    return SequenceHash().extend(token_ids).value


def salted_root(salt: str) -> int:
    """The parent hash of a sequence's first block: the root, or a root of its own per salt
    (a tenant), so equal prompts of two tenants never share a cache entry."""
    if not salt:
        return ROOT_BLOCK_HASH
    return int.from_bytes(hashlib.sha256(b"loopwire cache salt\0" + salt.encode()).digest()[:8], "little")


def block_hash(parent: int, token_ids: Iterable[int]) -> int:
    """Hash of one full block chained to its parent's hash (uint64, never 0)."""
    return _xxh64(parent.to_bytes(8, "little") + token_bytes(token_ids)) or 1


def block_hashes(token_ids: Iterable[int], block_size: int, parent: int = ROOT_BLOCK_HASH) -> list[int]:
    """Chained hashes of every *full* block of ``token_ids``."""
    data = memoryview(token_bytes(token_ids))
    step = 4 * block_size
    out: list[int] = []
    for start in range(0, len(data) - step + 1, step):
        parent = _xxh64(parent.to_bytes(8, "little") + data[start : start + step]) or 1
        out.append(parent)
    return out
