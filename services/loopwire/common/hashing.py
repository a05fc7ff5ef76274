"""Token-sequence hashes shared by gateway, router and engines.

Two kinds, because they answer two questions:

* ``SequenceHash`` identifies a whole held sequence so an append can prove it extends
  what the replica holds. It is a polynomial rolling hash: extending it costs O(new
  tokens) and the result does not depend on how the sequence was chunked.
* ``block_hashes`` are the prefix-cache keys of full KV blocks, chained (parent hash +
  token ids) as in vLLM, so equal hashes mean equal whole prefixes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

_MOD = (1 << 61) - 1
_BASE = 1_000_003
ROOT_BLOCK_HASH = 0


class SequenceHash:
    """Incremental hash of a token sequence; ``value`` fits in a uint64."""

    __slots__ = ("value", "length")

    def __init__(self, value: int = 0, length: int = 0) -> None:
        self.value = value
        self.length = length

    def extend(self, token_ids: Iterable[int]) -> SequenceHash:
        h, n = self.value, self.length
        for t in token_ids:
            h = (h * _BASE + int(t) + 1) % _MOD
            n += 1
        self.value, self.length = h, n
        return self

    def copy(self) -> SequenceHash:
        return SequenceHash(self.value, self.length)


def sequence_hash(token_ids: Iterable[int]) -> int:
    return SequenceHash().extend(token_ids).value


def salted_root(salt: str) -> int:
    """The parent hash of a sequence's first block: the root, or a root of its own per salt
    (a tenant), so equal prompts of two tenants never share a cache entry."""
    if not salt:
        return ROOT_BLOCK_HASH
    return int.from_bytes(hashlib.sha256(b"loopwire cache salt\0" + salt.encode()).digest()[:8], "little")


def block_hash(parent: int, token_ids: Sequence[int]) -> int:
    """Hash of one full block chained to its parent's hash (uint64, never 0)."""
    payload = struct.pack(f"<Q{len(token_ids)}I", parent, *token_ids)
    value = int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "little")
    return value or 1


def block_hashes(token_ids: Sequence[int], block_size: int, parent: int = ROOT_BLOCK_HASH) -> list[int]:
    """Chained hashes of every *full* block of ``token_ids``."""
    out: list[int] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = block_hash(parent, token_ids[start : start + block_size])
        out.append(parent)
    return out
