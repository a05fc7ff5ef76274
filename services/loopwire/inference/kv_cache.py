"""Paged KV cache bookkeeping: fixed-size blocks, reference counts, a prefix cache keyed by
chained block hashes, eviction by retention priority then LRU, retention holds, and an
optional host-memory tier (``kv_host_tier.py``) that evicted blocks move to.

The manager owns only *which* block holds *what*; the tensors live in a ``kv_store.KvStore`` (the
reference engine's numpy arrays) or nowhere at all (the simulated engine). Blocks are in
exactly one of three states:

* used      — ``ref > 0``: some sequence (or a retention hold) reads it;
* cached    — ``ref == 0`` with a hash: reusable by a later prompt, evicted lowest retention
  priority first (0-100, TensorRT-LLM's ``KvCacheRetentionConfig`` semantics; policy
  ``"lru"`` ignores priorities), least recently used first within a priority;
* free      — ``ref == 0`` without a hash.

With a host tier, an evicted cached block moves there (its tensors copied when there is a
``KvStore``) and a prefix match continues into it: the block comes back to a fresh device block
instead of being recomputed. A block leaves the prefix cache (REMOVED event) only when it
leaves both tiers. Copies each way are counted for the engine to price (``take_transfers``).

Hashes are ``loopwire.common.hashing.block_hash`` chained from the root, so a router that
hashes a prompt with ``block_hashes`` predicts exactly which blocks a replica holds. A match
takes the prompt's hashes from the caller (a session stream holds them and hashes only what
each turn appends); a block found by hash is used only if it holds the prompt's tokens too, so
a crafted hash collision can never serve one prompt another's KV.

A session stream's finished sequence *parks* its committed blocks under the stream's key: they
stay referenced, and the stream's next sequence takes them over in O(1) instead of releasing
every block to the LRU and acquiring it again, so the cost of a turn follows its new tokens,
not its context. Parked blocks count as used; memory pressure gives them back (the least
recently parked stream first, before any retention hold), and they then age in the LRU like
any other cached block.

Pause and resume hints (``kv_pause_hints.py``, a mixin of the pool) demote a session away on a
tool call to the host tier first and bring it back before its next request; those copies are
counted apart (``take_prefetched``) because they overlap the wait instead of the request. Events
(STORED/REMOVED, ``kv_events.py``) are queued for ``WatchCache``. Blocks can be exported with their identity
(hash, parent hash, token ids) and imported on another replica: that is how a prefill replica
hands a prompt's KV to a decode replica.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hash, block_hashes
from loopwire.inference.kv_events import CacheEvent, CacheEventKind
from loopwire.inference.kv_events import CacheEventFeed as CacheEventFeed  # still importable from here
from loopwire.inference.kv_host_tier import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    HostBlock,
    HostTier,
    PriorityLru,
)
from loopwire.inference.kv_pause_hints import DEMOTED_RANK, Pause, PauseHints
from loopwire.inference.kv_store import KvStore


@dataclass
class Block:
    block_id: int
    ref: int = 0
    hash: int = 0  # 0 = not in the prefix cache
    parent: int = ROOT_BLOCK_HASH
    token_ids: tuple[int, ...] = ()
    priority: int = DEFAULT_PRIORITY
    priority_until: float = math.inf  # then back to DEFAULT_PRIORITY
    priority_set: bool = False  # by a request's retention policy (else the default)
    demoted: bool = False  # a pause hint: evicted before every other cached block (to the host tier)
    early: bool = False  # brought back ahead of a pause's expected end: just below its priority until the resume


@dataclass
class Retention:
    """Extra references that keep a finished session's blocks out of the LRU until ``until``."""

    block_ids: list[int]
    until: float


@dataclass
class Parked:
    """A finished stream turn's committed blocks, still referenced, for the stream's next turn."""

    block_ids: list[int]
    last_hash: int  # chained hash of the last one: names the whole prefix


@dataclass
class ExportedBlock:
    block_hash: int
    parent_hash: int
    token_ids: tuple[int, ...]
    block_id: int


@dataclass
class BlockManager(PauseHints):
    num_blocks: int
    block_size: int
    prefix_cache: bool = True
    # "priority": lowest retention priority evicted first, LRU within; "lru": priorities ignored.
    eviction_policy: str = "priority"
    host: HostTier | None = None
    # The tensors, when they exist (reference engine): copied to and from the host tier.
    store: KvStore | None = None
    blocks: list[Block] = field(init=False)
    _free: list[int] = field(init=False)
    _evictable: PriorityLru = field(init=False)
    _expiries: list[tuple[float, int]] = field(init=False)
    _by_hash: dict[int, int] = field(init=False)
    _retentions: dict[str, Retention] = field(init=False)
    _parked: OrderedDict[str, Parked] = field(init=False)  # least recently parked first
    _paused: dict[str, Pause] = field(init=False)
    _events: list[CacheEvent] = field(init=False)
    queried_tokens: int = 0
    hit_tokens: int = 0
    host_hit_tokens: int = 0  # part of hit_tokens that came back from the host tier
    onloaded_blocks: int = 0
    offloaded_blocks: int = 0
    _pending_onload: int = 0
    _pending_offload: int = 0
    hint_demoted_blocks: int = 0  # device blocks a pause hint demoted
    hint_onloaded_blocks: int = 0  # host blocks a resume (or a pause's expected end) brought back
    _pending_prefetch: int = 0

    def __post_init__(self) -> None:
        if self.num_blocks <= 0 or self.block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        if self.eviction_policy not in ("priority", "lru"):
            raise ValueError(f"unknown eviction policy {self.eviction_policy!r}; choose priority or lru")
        self.blocks = [Block(i) for i in range(self.num_blocks)]
        self._free = list(range(self.num_blocks - 1, -1, -1))
        self._evictable = PriorityLru()
        self._expiries = []
        self._by_hash = {}
        self._retentions = {}
        self._parked = OrderedDict()
        self._paused = {}
        self._events = []

    # -- occupancy --------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks an allocation can get: free plus evictable cached ones."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        return len(self._by_hash)

    def cached_hashes(self) -> list[int]:
        """Every block a prompt can hit: on the device, then in the host tier."""
        return list(self._by_hash) + (self.host.hashes() if self.host is not None else [])

    def is_evictable(self, block_id: int) -> bool:
        return block_id in self._evictable

    @property
    def num_host_blocks(self) -> int:
        return len(self.host) if self.host is not None else 0

    @property
    def host_capacity_blocks(self) -> int:
        return self.host.capacity_blocks if self.host is not None else 0

    # -- prefix cache -----------------------------------------------------------------

    def match_prefix(self, token_ids: Sequence[int], root: int = ROOT_BLOCK_HASH) -> tuple[list[int], list[int]]:
        """``match`` with every block hash computed from ``token_ids``: the full recomputation."""
        usable = max(len(token_ids) - 1, 0)
        return self.match(block_hashes(token_ids[: usable - usable % self.block_size], self.block_size, root),
                          token_ids)

    def match(self, hashes: Sequence[int], token_ids: Sequence[int], park_key: str = "") -> tuple[list[int], list[int]]:
        """Acquire the cached blocks of the longest cached prefix of ``token_ids``, whose full
        blocks hash to ``hashes`` (chained from the prompt's root; at least the full blocks
        before the last token).

        Only full blocks before the last token count: the last token must be computed to get
        logits. Blocks parked under ``park_key`` are taken over first when they are a prefix of
        the prompt (O(1)); the match continues after them. Returns (block ids, their hashes).
        """
        usable = max(len(token_ids) - 1, 0) // self.block_size
        self.queried_tokens += usable * self.block_size
        if not self.prefix_cache:
            return [], []
        ids: list[int] = []
        parked = self._parked.pop(park_key, None) if park_key else None
        if parked is not None:
            n = len(parked.block_ids)
            if n <= usable and hashes[n - 1] == parked.last_hash:
                ids = parked.block_ids
            else:
                self.release(parked.block_ids)
        while len(ids) < usable:
            block_id = self._by_hash.get(hashes[len(ids)])
            start = len(ids) * self.block_size
            # A 64-bit hash is not collision resistant: a block found by hash must also hold the
            # prompt's tokens, or a prompt crafted to collide could be served another's KV. (Parked
            # blocks skip this: the stream computed them from its own tokens.)
            if block_id is None or self.blocks[block_id].token_ids != tuple(token_ids[start : start + self.block_size]):
                break
            self.acquire((block_id,))
            ids.append(block_id)
        device = len(ids)
        if self.host is not None:
            while len(ids) < usable:
                i = len(ids)
                block_id = self._onload(hashes[i], tuple(token_ids[i * self.block_size : (i + 1) * self.block_size]))
                if block_id is None:
                    break
                ids.append(block_id)
            self.host_hit_tokens += (len(ids) - device) * self.block_size
        self.hit_tokens += len(ids) * self.block_size
        return ids, list(hashes[: len(ids)])

    def park(self, key: str, block_ids: list[int], hashes: Sequence[int]) -> None:
        """Keep the caller's references on the committed blocks ``block_ids[:len(hashes)]`` under
        ``key`` (replacing its earlier park) and release the rest; ``block_ids`` is given away."""
        n = len(hashes) if self.prefix_cache else 0
        self.release(block_ids[n:])
        del block_ids[n:]
        self.drop_parked(key)
        if n:
            self._parked[key] = Parked(block_ids, hashes[-1])

    def drop_parked(self, key: str) -> bool:
        """The stream ended: its parked blocks go to the LRU (or the free list)."""
        parked = self._parked.pop(key, None)
        if parked is None:
            return False
        self.release(parked.block_ids)
        return True

    @property
    def num_parked(self) -> int:
        return len(self._parked)

    def _onload(self, h: int, token_ids: tuple[int, ...], *, prefetch: bool = False) -> int | None:
        """Bring a block back from the host tier into a fresh device block (ref 1); a prefetch
        (hint) is counted apart from the onloads a request waits for."""
        assert self.host is not None
        held = self.host.blocks.get(h)
        if held is None or held.token_ids != token_ids or self.num_free == 0:
            return None
        self.host.take(h)  # first: the allocation may offload another block into a full tier
        offloads = self._pending_offload
        got = self.allocate(1)
        assert got is not None
        if prefetch:  # the block it evicted for room was copied out then too, within the pause
            self._pending_prefetch += self._pending_offload - offloads
            self._pending_offload = offloads
        block = self.blocks[got[0]]
        block.hash, block.parent, block.token_ids = h, held.parent, held.token_ids
        block.priority, block.priority_until, block.priority_set = held.priority, math.inf, True
        self._by_hash[h] = got[0]
        if self.store is not None and held.keys is not None and held.values is not None:
            self.store.write_block(got[0], held.keys, held.values)
        if prefetch:
            self.hint_onloaded_blocks += 1
            self._pending_prefetch += 1
        else:
            self.onloaded_blocks += 1
            self._pending_onload += 1
        return got[0]

    def commit(self, block_id: int, parent: int, token_ids: Sequence[int]) -> int:
        """Register a full, computed block in the prefix cache; returns its hash."""
        h = block_hash(parent, token_ids)
        block = self.blocks[block_id]
        if self.prefix_cache and block.hash == 0 and h not in self._by_hash:
            block.hash, block.parent, block.token_ids = h, parent, tuple(token_ids)
            self._by_hash[h] = block_id
            # Recomputed while the host tier holds it (there was no room to bring it back): keep
            # one copy, this one. Two would let an onload index a second device block under the
            # hash, and evicting both then fails. It never left the prefix cache: no new event.
            if self.host is None or self.host.take(h) is None:
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
                block_id = self._evictable.pop()
                self._uncache(block_id, offload=True)
            self.blocks[block_id].ref = 1
            out.append(block_id)
        return out

    def acquire(self, block_ids: Sequence[int]) -> None:
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref == 0:
                self._evictable.discard(block_id)
            block.ref += 1
            block.demoted = block.early = False  # in use again: an ordinary block

    def release(self, block_ids: Sequence[int]) -> None:
        """Drop one reference of each block; the last one sends it to the LRU or the free list."""
        for block_id in reversed(block_ids):  # the tail is the least reusable: evict it first
            block = self.blocks[block_id]
            if block.ref <= 0:
                raise RuntimeError(f"block {block_id} released more often than acquired")
            block.ref -= 1
            if block.ref == 0:
                if block.hash:
                    self._evictable.add(block_id, self._rank(block))
                else:
                    self._free.append(block_id)

    def _uncache(self, block_id: int, offload: bool = False) -> None:
        block = self.blocks[block_id]
        if block.hash:
            del self._by_hash[block.hash]
            removed = [block.hash]
            if offload and self.host is not None and self.host.capacity_blocks > 0:
                keys = values = None
                if self.store is not None:
                    keys, values = self.store.read_block(block_id)
                # The host tier keeps the priority the block left with (durations count on the device).
                removed = self.host.put(HostBlock(block.hash, block.parent, block.token_ids, block.priority, keys, values))
                self.offloaded_blocks += 1
                self._pending_offload += 1
            if removed:
                self._events.append(CacheEvent(CacheEventKind.REMOVED, removed))
            block.hash, block.parent, block.token_ids = 0, ROOT_BLOCK_HASH, ()
            block.priority, block.priority_until, block.priority_set = DEFAULT_PRIORITY, math.inf, False
            block.demoted = block.early = False

    # -- retention priorities ---------------------------------------------------------

    def _rank(self, block: Block) -> int:
        if block.demoted:
            return DEMOTED_RANK
        if self.eviction_policy != "priority":
            return DEFAULT_PRIORITY
        return block.priority - 1 if block.early else block.priority

    def set_priority(self, block_id: int, priority: int, until: float = math.inf) -> None:
        """Retention priority of a block (0-100), back to the default at ``until``. The latest
        request to use a block sets it: a session back from an approval wait releases its hold."""
        if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise ValueError(f"retention priority {priority} outside {MIN_PRIORITY}..{MAX_PRIORITY}")
        block = self.blocks[block_id]
        block.priority, block.priority_until, block.priority_set = priority, until, True
        if until != math.inf:
            heapq.heappush(self._expiries, (until, block_id))
        if block_id in self._evictable:
            self._evictable.add(block_id, self._rank(block))

    def _expire_priorities(self, now: float) -> None:
        while self._expiries and self._expiries[0][0] <= now:
            until, block_id = heapq.heappop(self._expiries)
            block = self.blocks[block_id]
            if block.priority_until == until:  # not replaced since
                block.priority, block.priority_until, block.priority_set = DEFAULT_PRIORITY, math.inf, False
                block.early = False
                if block_id in self._evictable:
                    self._evictable.add(block_id, self._rank(block))

    def take_prefetched(self) -> int:
        """Blocks a hint copied since the last call: those it brought back host->device and those
        it evicted device->host for their room (copies that overlap a session's pause, not a
        request: priced apart)."""
        out, self._pending_prefetch = self._pending_prefetch, 0
        return out

    def take_transfers(self) -> tuple[int, int]:
        """Blocks copied host->device and device->host since the last call."""
        out = (self._pending_onload, self._pending_offload)
        self._pending_onload = self._pending_offload = 0
        return out

    # -- retention --------------------------------------------------------------------

    def retain(self, key: str, block_ids: list[int], until: float) -> None:
        """Hold ``block_ids`` until ``until`` (replacing ``key``'s previous hold).

        A session's hold grows turn by turn: the blocks it shares with the previous hold at the
        start keep their reference (taking one and dropping one would change nothing, as the old
        hold keeps them referenced throughout), so only the blocks that differ are visited."""
        old = self._retentions.pop(key, None)
        if old is None:
            self.acquire(block_ids)
            self._retentions[key] = Retention(list(block_ids), until)
            return
        held = old.block_ids
        shared = min(len(held), len(block_ids))
        while shared and held[shared - 1] != block_ids[shared - 1]:  # the differing tail: what is new
            shared -= 1
        if held[:shared] != block_ids[:shared]:  # at C speed: equal ids, not just an equal last one
            shared = 0
        self.acquire(block_ids[shared:])
        self.release(held[shared:])
        del held[shared:]
        held.extend(block_ids[shared:])
        old.until = until
        self._retentions[key] = old

    def drop_retention(self, key: str) -> bool:
        held = self._retentions.pop(key, None)
        if held is None:
            return False
        self.release(held.block_ids)
        return True

    def expire_retentions(self, now: float) -> None:
        self._expire_priorities(now)
        self._run_pauses(now)
        for key in [k for k, r in self._retentions.items() if r.until <= now]:
            self.drop_retention(key)

    def drop_oldest_retention(self) -> bool:
        """Memory pressure beats a hint: give up the least recently parked stream's blocks, else
        the hold that expires first."""
        if self._parked:
            return self.drop_parked(next(iter(self._parked)))
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
        if h in self._by_hash or not self.prefix_cache or (self.host is not None and h in self.host):
            return None
        got = self.allocate(1)
        if got is None:
            return None
        self.commit(got[0], parent, token_ids)
        self.release(got)
        return got[0]
