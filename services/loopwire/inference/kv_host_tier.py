"""The host-memory KV tier: cached blocks the device pool evicts wait here (bounded bytes)
and are copied back on a prefix hit instead of being recomputed.

Entries are keyed by the block's chained hash and keep its identity (parent hash, token ids),
its retention priority and, on the reference engine, its K/V tensors (the simulated engine
models the copy, it stores nothing). When the tier is full the lowest priority goes first,
least recently stored first within a priority: the order TensorRT-LLM's
``KvCacheRetentionConfig`` gives eviction (priority 0-100, default 35).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

# The tier's priority range is the one a hint is checked against: declared once, with the hint's limits.
from loopwire.common.kv_hint_limits import MAX_PRIORITY as MAX_PRIORITY
from loopwire.common.kv_hint_limits import MIN_PRIORITY as MIN_PRIORITY

DEFAULT_PRIORITY = 35  # TensorRT-LLM's default retention priority


@dataclass
class HostBlock:
    block_hash: int
    parent: int
    token_ids: tuple[int, ...]
    priority: int
    keys: np.ndarray | None = None
    values: np.ndarray | None = None


class PriorityLru:
    """Keys grouped by priority, LRU within each: ``pop`` takes the oldest of the lowest priority."""

    def __init__(self) -> None:
        self._buckets: dict[int, OrderedDict[int, None]] = {}
        self._where: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: int) -> bool:
        return key in self._where

    def add(self, key: int, priority: int) -> None:
        self.discard(key)
        self._buckets.setdefault(priority, OrderedDict())[key] = None
        self._where[key] = priority

    def discard(self, key: int) -> None:
        priority = self._where.pop(key, None)
        if priority is not None:
            bucket = self._buckets[priority]
            del bucket[key]
            if not bucket:
                del self._buckets[priority]

    def pop(self) -> int:
        priority = min(self._buckets)
        bucket = self._buckets[priority]
        key, _ = bucket.popitem(last=False)
        if not bucket:
            del self._buckets[priority]
        del self._where[key]
        return key

    def keys(self) -> list[int]:
        return list(self._where)

    def lowest(self) -> int | None:
        """The lowest priority held (None when empty): what ``pop`` would take from."""
        return min(self._buckets) if self._buckets else None


class HostTier:
    def __init__(self, capacity_bytes: int, block_bytes: int) -> None:
        if capacity_bytes < 0 or block_bytes <= 0:
            raise ValueError("host tier: capacity_bytes >= 0 and block_bytes > 0")
        self.block_bytes = block_bytes
        self.capacity_blocks = capacity_bytes // block_bytes
        self.blocks: dict[int, HostBlock] = {}
        self._order = PriorityLru()

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def num_bytes(self) -> int:
        return len(self.blocks) * self.block_bytes

    def put(self, block: HostBlock) -> list[int]:
        """Store ``block``; returns the hashes dropped to make room (possibly ``block``'s own)."""
        if self.capacity_blocks == 0:
            return [block.block_hash]
        dropped = []
        self.blocks[block.block_hash] = block
        self._order.add(block.block_hash, block.priority)
        while len(self.blocks) > self.capacity_blocks:
            h = self._order.pop()
            del self.blocks[h]
            dropped.append(h)
        return dropped

    def take(self, block_hash: int) -> HostBlock | None:
        """Remove and return a block on its way back to the device."""
        block = self.blocks.pop(block_hash, None)
        if block is not None:
            self._order.discard(block_hash)
        return block

    def set_priority(self, block_hash: int, priority: int) -> None:
        """A held block's priority changes (a pause hint keeps a session's blocks here longer)."""
        block = self.blocks.get(block_hash)
        if block is not None:
            block.priority = priority
            self._order.add(block_hash, priority)

    def hashes(self) -> list[int]:
        return list(self.blocks)
