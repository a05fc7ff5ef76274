"""Paged KV cache bookkeeping: fixed-size blocks, reference counts, a prefix cache keyed by
chained block hashes, LRU eviction and retention holds.

The manager owns only *which* block holds *what*; the tensors live in a ``KvStore`` (the
reference engine's numpy arrays) or nowhere at all (the simulated engine). Blocks are in
exactly one of three states:

* used      — ``ref > 0``: some sequence (or a retention hold) reads it;
* cached    — ``ref == 0`` with a hash: reusable by a later prompt, evicted LRU first;
* free      — ``ref == 0`` without a hash.

Hashes are ``loopwire.common.hashing.block_hash`` chained from the root, so a router that
hashes a prompt with ``block_hashes`` predicts exactly which blocks a replica holds. Events
(STORED/REMOVED) are queued for ``WatchCache``. Blocks can be exported with their identity
(hash, parent hash, token ids) and imported on another replica: that is how a prefill replica
hands a prompt's KV to a decode replica.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hash, block_hashes


class CacheEventKind(Enum):
    STORED = 1
    REMOVED = 2


@dataclass
class CacheEvent:
    kind: CacheEventKind
    block_hashes: list[int]


class CacheEventFeed:
    """Fans a replica's cache events out to every WatchCache subscriber."""

    def __init__(self) -> None:
        self._queues: list[asyncio.Queue[list[CacheEvent]]] = []

    def publish(self, events: list[CacheEvent]) -> None:
        for queue in self._queues:
            queue.put_nowait(events)

    async def subscribe(self, initial: list[CacheEvent] | None = None) -> AsyncIterator[list[CacheEvent]]:
        """Events from now on, after ``initial`` (a snapshot of what the replica holds) if given."""
        queue: asyncio.Queue[list[CacheEvent]] = asyncio.Queue()
        if initial is not None:
            queue.put_nowait(initial)
        self._queues.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._queues.remove(queue)


@dataclass
class Block:
    block_id: int
    ref: int = 0
    hash: int = 0  # 0 = not in the prefix cache
    parent: int = ROOT_BLOCK_HASH
    token_ids: tuple[int, ...] = ()


@dataclass
class Retention:
    """Extra references that keep a finished session's blocks out of the LRU until ``until``."""

    block_ids: list[int]
    until: float


@dataclass
class ExportedBlock:
    block_hash: int
    parent_hash: int
    token_ids: tuple[int, ...]
    block_id: int


@dataclass
class BlockManager:
    num_blocks: int
    block_size: int
    prefix_cache: bool = True
    blocks: list[Block] = field(init=False)
    _free: list[int] = field(init=False)
    _lru: OrderedDict[int, None] = field(init=False)
    _by_hash: dict[int, int] = field(init=False)
    _retentions: dict[str, Retention] = field(init=False)
    _events: list[CacheEvent] = field(init=False)
    queried_tokens: int = 0
    hit_tokens: int = 0

    def __post_init__(self) -> None:
        if self.num_blocks <= 0 or self.block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.blocks = [Block(i) for i in range(self.num_blocks)]
        self._free = list(range(self.num_blocks - 1, -1, -1))
        self._lru = OrderedDict()
        self._by_hash = {}
        self._retentions = {}
        self._events = []

    # -- occupancy --------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks an allocation can get: free plus evictable cached ones."""
        return len(self._free) + len(self._lru)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        return len(self._by_hash)

    def cached_hashes(self) -> list[int]:
        return list(self._by_hash)

    # -- prefix cache -----------------------------------------------------------------

    def match_prefix(self, token_ids: Sequence[int], root: int = ROOT_BLOCK_HASH) -> tuple[list[int], list[int]]:
        """Acquire the cached blocks of the longest cached prefix of ``token_ids``.

        Only full blocks before the last token count: the last token must be computed to
        get logits. Returns (block ids, their hashes).
        """
        usable = max(len(token_ids) - 1, 0)
        self.queried_tokens += usable - usable % self.block_size
        if not self.prefix_cache:
            return [], []
        ids: list[int] = []
        hashes: list[int] = []
        for i, h in enumerate(block_hashes(token_ids[:usable], self.block_size, root)):
            block_id = self._by_hash.get(h)
            start = i * self.block_size
            if block_id is None or self.blocks[block_id].token_ids != tuple(token_ids[start : start + self.block_size]):
                break
            ids.append(block_id)
            hashes.append(h)
        self.acquire(ids)
        self.hit_tokens += len(ids) * self.block_size
        return ids, hashes

    def commit(self, block_id: int, parent: int, token_ids: Sequence[int]) -> int:
        """Register a full, computed block in the prefix cache; returns its hash."""
        h = block_hash(parent, token_ids)
        block = self.blocks[block_id]
        if self.prefix_cache and block.hash == 0 and h not in self._by_hash:
            block.hash, block.parent, block.token_ids = h, parent, tuple(token_ids)
            self._by_hash[h] = block_id
            self._events.append(CacheEvent(CacheEventKind.STORED, [h]))
        return h

    # -- allocation -------------------------------------------------------------------

    def allocate(self, n: int) -> list[int] | None:
        """``n`` fresh blocks (ref 1), evicting least recently used cached ones; None if short."""
        if n > self.num_free:
            return None
        out = []
        for _ in range(n):
            if self._free:
                block_id = self._free.pop()
            else:
                block_id, _ = self._lru.popitem(last=False)
                self._uncache(block_id)
            self.blocks[block_id].ref = 1
            out.append(block_id)
        return out

    def acquire(self, block_ids: Sequence[int]) -> None:
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref == 0:
                self._lru.pop(block_id, None)
            block.ref += 1

    def release(self, block_ids: Sequence[int]) -> None:
        """Drop one reference of each block; the last one sends it to the LRU or the free list."""
        for block_id in reversed(block_ids):  # the tail is the least reusable: evict it first
            block = self.blocks[block_id]
            if block.ref <= 0:
                raise RuntimeError(f"block {block_id} released more often than acquired")
            block.ref -= 1
            if block.ref == 0:
                if block.hash:
                    self._lru[block_id] = None
                else:
                    self._free.append(block_id)

    def _uncache(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.hash:
            del self._by_hash[block.hash]
            self._events.append(CacheEvent(CacheEventKind.REMOVED, [block.hash]))
            block.hash, block.parent, block.token_ids = 0, ROOT_BLOCK_HASH, ()

    # -- retention --------------------------------------------------------------------

    def retain(self, key: str, block_ids: Sequence[int], until: float) -> None:
        """Hold ``block_ids`` until ``until`` (replacing ``key``'s previous hold)."""
        self.acquire(block_ids)
        self.drop_retention(key)
        self._retentions[key] = Retention(list(block_ids), until)

    def drop_retention(self, key: str) -> bool:
        held = self._retentions.pop(key, None)
        if held is None:
            return False
        self.release(held.block_ids)
        return True

    def expire_retentions(self, now: float) -> None:
        for key in [k for k, r in self._retentions.items() if r.until <= now]:
            self.drop_retention(key)

    def drop_oldest_retention(self) -> bool:
        """Memory pressure beats a hint: give up the hold that expires first."""
        if not self._retentions:
            return False
        key = min(self._retentions, key=lambda k: self._retentions[k].until)
        return self.drop_retention(key)

    @property
    def num_retentions(self) -> int:
        return len(self._retentions)

    # -- events and transfer ----------------------------------------------------------

    def drain_events(self) -> list[CacheEvent]:
        events, self._events = self._events, []
        return events

    def export(self, hashes: Sequence[int]) -> list[ExportedBlock]:
        """Identity of cached blocks by hash, in order, stopping at the first one not held."""
        out = []
        for h in hashes:
            block_id = self._by_hash.get(h)
            if block_id is None:
                break
            b = self.blocks[block_id]
            out.append(ExportedBlock(h, b.parent, b.token_ids, block_id))
        return out

    def import_block(self, parent: int, token_ids: Sequence[int]) -> int | None:
        """Make room for a block received from another replica; returns its block id (ref 0,
        cached) for the caller to fill, or None when it is already held or there is no room."""
        if len(token_ids) != self.block_size:
            raise ValueError(f"an imported block must hold {self.block_size} tokens")
        h = block_hash(parent, token_ids)
        if h in self._by_hash or not self.prefix_cache:
            return None
        got = self.allocate(1)
        if got is None:
            return None
        self.commit(got[0], parent, token_ids)
        self.release(got)
        return got[0]


class KvStore:
    """The reference engine's KV tensors: per layer, keys and values of every block.

    Shape per layer: ``[kv_heads, num_blocks, block_size, head_dim]``, float64 so attention is
    insensitive to how a batch was composed (see ``model.py``); a sequence's keys per head are
    one gather of its block table.
    """

    dtype = np.float64

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int) -> None:
        shape = (kv_heads, num_blocks, block_size, head_dim)
        self.keys = [np.zeros(shape, self.dtype) for _ in range(num_layers)]
        self.values = [np.zeros(shape, self.dtype) for _ in range(num_layers)]
        self.block_size = block_size
        self.block_shape = (num_layers, kv_heads, block_size, head_dim)

    def read_block(self, block_id: int) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.stack([k[:, block_id] for k in self.keys]),
            np.stack([v[:, block_id] for v in self.values]),
        )

    def write_block(self, block_id: int, keys: np.ndarray, values: np.ndarray) -> None:
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.keys[layer][:, block_id] = k
            self.values[layer][:, block_id] = v
