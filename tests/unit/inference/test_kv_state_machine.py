"""The block manager driven the way the engine drives it (match a prompt, reserve, compute and
commit, set priorities, finish with or without a hold, cancel, trim, import), device and host
tier, tiny capacities, every index checked after every step.

The references are the machine's own: which sequence and hold owns which block (so each
block's refcount is known), the K/V a block must carry (a function of its hash, written when
the machine "computes" it), and the router's view of the replica rebuilt from the STORED /
REMOVED events alone, which must equal what the manager can hit.

Before the fix, the machine shrank to: one device block, a host tier of two; import block A,
import block B (A goes to the host); a prompt of exactly A's tokens (its one block holds the
last token, so it is never matched) pushes B to the host and computes A again: A is on the
device and in the host at once (``host_tier``: "a hash held in both tiers"). The crash that
follows from that state is replayed step by step at the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hash, block_hashes
from loopwire.inference.kv_cache import BlockManager, CacheEventKind, KvStore
from loopwire.inference.kv_host_tier import DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY, HostTier
from loopwire.inference.kv_pause_hints import DEMOTED_RANK

BS = 2
BLOCK_BYTES = 64
SALTED_ROOT = 12345  # a second tenant's cache root
# Agent turns: prompts that extend each other (cuts of a few conversations sharing prefixes), and
# random ones over two symbols.
CONVERSATIONS = ([0, 1, 0, 1, 0, 1, 0, 0], [0, 1, 0, 1, 1, 1, 1, 0], [1, 1, 0, 0, 1, 1, 0, 1])
TURN = st.builds(lambda c, n: CONVERSATIONS[c][:n], st.integers(0, len(CONVERSATIONS) - 1), st.integers(1, 8))
TOKENS = st.one_of(TURN, TURN, TURN, st.lists(st.integers(0, 1), min_size=1, max_size=3 * BS + 1))


def rank(bm: BlockManager, b: int) -> int:
    """Eviction rank of a cached block: below all when a pause hint demoted it, else its retention
    priority (one below it when a pause brought it back ahead of its expected end), one rank for
    all under plain LRU."""
    block = bm.blocks[b]
    if block.demoted:
        return DEMOTED_RANK
    if bm.eviction_policy != "priority":
        return DEFAULT_PRIORITY
    return block.priority - 1 if block.early else block.priority


def snapshot(bm: BlockManager) -> tuple[object, ...]:
    """Everything a hint may change: each block's identity, priority, rank and place, the host tier's."""
    return (tuple((b.hash, b.ref, b.priority, b.priority_until, b.demoted, b.early) for b in bm.blocks),
            tuple(sorted(bm._evictable._where.items())),
            tuple(sorted((h, hb.priority) for h, hb in bm.host.blocks.items())) if bm.host else ())


def kv_of(h: int) -> np.ndarray:
    """The keys a block with hash ``h`` holds (one layer, head and dim; values are their negation):
    the same prefix computes the same tensors."""
    return np.full((1, 1, BS, 1), float(h % 1_000_003))


@dataclass
class Seq:
    tokens: list[int]
    root: int
    block_ids: list[int]
    hashes: list[int] = field(default_factory=list)  # of block_ids[:len(hashes)], matched or committed

    def blocks_needed(self) -> int:
        return -(-len(self.tokens) // BS)


class KvMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.seqs: list[Seq] = []
        self.holds: dict[str, tuple[list[int], float]] = {}
        self.now = 0.0
        self.router: set[int] = set()  # the replica as WatchCache events describe it

    @initialize(num_blocks=st.integers(1, 4), host_blocks=st.sampled_from([None, 0, 1, 1, 2, 2, 3, 4]),
                policy=st.sampled_from(["priority", "lru"]), tensors=st.booleans(),
                prefix_cache=st.booleans() | st.just(True))
    def setup(self, num_blocks: int, host_blocks: int | None, policy: str, tensors: bool, prefix_cache: bool) -> None:
        host = None if host_blocks is None else HostTier(host_blocks * BLOCK_BYTES, BLOCK_BYTES)
        store = KvStore(1, num_blocks, BS, 1, 1) if tensors else None
        self.bm = BlockManager(num_blocks, BS, prefix_cache=prefix_cache, eviction_policy=policy, host=host,
                               store=store)

    # -- helpers --------------------------------------------------------------------------

    def _seq(self, i: int) -> Seq:
        return self.seqs[i % len(self.seqs)]

    def _allocate(self, n: int) -> list[int] | None:
        """``allocate`` checked against its contract: fresh blocks, free list first, then the
        lowest-ranked cached blocks."""
        bm = self.bm
        available = bm.num_free
        free_before = set(bm._free)
        ranks = {b: rank(bm, b) for b in bm._evictable.keys()}
        got = bm.allocate(n)
        if n > available:
            assert got is None and bm.num_free == available
            return None
        assert got is not None and len(set(got)) == n
        assert all(bm.blocks[b].ref == 1 and bm.blocks[b].hash == 0 for b in got)
        evicted = [b for b in got if b not in free_before]
        assert len(evicted) == max(0, n - len(free_before))
        kept = [r for b, r in ranks.items() if b not in got]
        assert all(ranks[b] <= min(kept, default=MAX_PRIORITY) for b in evicted)
        return got

    def _release(self, block_ids: list[int]) -> None:
        self.bm.release(block_ids)

    # -- rules ----------------------------------------------------------------------------

    @rule(tokens=TOKENS, salted=st.booleans(), reserve=st.integers(0, 5))
    def start(self, tokens: list[int], salted: bool, reserve: int) -> None:
        """A sequence is admitted: prefix match (device, then host), then blocks for a chunk."""
        bm = self.bm
        root = SALTED_ROOT if salted else ROOT_BLOCK_HASH
        ids, hashes = bm.match_prefix(tokens, root)
        usable = len(tokens) - 1
        assert len(ids) == len(hashes) == len(set(ids)) and len(ids) * BS <= usable
        assert hashes == block_hashes(tokens[:usable], BS, root)[: len(ids)]
        for i, (b, h) in enumerate(zip(ids, hashes, strict=True)):
            block = bm.blocks[b]
            assert block.hash == h and block.ref >= 1
            assert block.token_ids == tuple(tokens[i * BS : (i + 1) * BS])
            if bm.store is not None:
                assert np.array_equal(bm.store.read_block(b)[0], kv_of(h))
        seq = Seq(tokens, root, list(ids), list(hashes))
        need = min(reserve, seq.blocks_needed() - len(ids))
        got = self._allocate(need) if need > 0 else []
        if got is None:  # the scheduler keeps nothing while a sequence waits
            self._release(seq.block_ids)
            return
        seq.block_ids += got
        self.seqs.append(seq)

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99))
    def grow(self, i: int) -> None:
        """The next chunk (or a decode step) needs one more block."""
        seq = self._seq(i)
        if len(seq.block_ids) < seq.blocks_needed() + 1:
            got = self._allocate(1)
            if got is not None:
                seq.block_ids += got

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99), n=st.integers(1, 3))
    def compute(self, i: int, n: int) -> None:
        """A chunk of up to ``n`` full blocks was computed (the prompt's last one included, as
        the engine commits it once its token is computed): K/V written, then committed."""
        bm, seq = self.bm, self._seq(i)
        for _ in range(n):
            k = len(seq.hashes)
            if k >= len(seq.block_ids) or (k + 1) * BS > len(seq.tokens):
                return
            block_id = seq.block_ids[k]
            parent = seq.hashes[-1] if seq.hashes else seq.root
            chunk = seq.tokens[k * BS : (k + 1) * BS]
            expected = block_hash(parent, chunk)
            if bm.store is not None:
                bm.store.write_block(block_id, kv_of(expected), -kv_of(expected))
            assert bm.commit(block_id, parent, chunk) == expected
            seq.hashes.append(expected)

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99), j=st.integers(0, 9), priority=st.integers(MIN_PRIORITY, MAX_PRIORITY),
          duration=st.none() | st.sampled_from([0.5, 2.0, 10.0]))
    def set_priority(self, i: int, j: int, priority: int, duration: float | None) -> None:
        """A retention policy prioritizes one of the sequence's committed blocks."""
        seq = self._seq(i)
        if seq.hashes:
            until = math.inf if duration is None else self.now + duration
            self.bm.set_priority(seq.block_ids[j % len(seq.hashes)], priority, until)

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99))
    def trim(self, i: int) -> None:
        """Rejected drafts give back their uncommitted tail block."""
        seq = self._seq(i)
        if len(seq.block_ids) > len(seq.hashes):
            self._release([seq.block_ids.pop()])

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99), hold=st.none() | st.tuples(st.sampled_from("ab"), st.sampled_from([0.5, 1.0, 4.0])))
    def finish(self, i: int, hold: tuple[str, float] | None) -> None:
        """Finished (maybe held for its session), cancelled or preempted: its blocks are released."""
        seq = self.seqs.pop(i % len(self.seqs))
        if hold is not None and seq.block_ids:
            key, seconds = hold
            self.bm.retain(key, seq.block_ids, self.now + seconds)
            self.holds.pop(key, None)
            self.holds[key] = (list(seq.block_ids), self.now + seconds)
        self._release(seq.block_ids)

    @rule(seconds=st.sampled_from([0.25, 1.0, 3.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.bm.expire_retentions(self.now)
        self.holds = {k: v for k, v in self.holds.items() if v[1] > self.now}

    @rule()
    def pressure(self) -> None:
        """Memory pressure gives up the hold that expires first."""
        dropped = self.bm.drop_oldest_retention()
        assert dropped == bool(self.holds)
        if dropped:
            gone = set(self.holds) - set(self.bm._retentions)
            assert len(gone) == 1
            key = gone.pop()
            assert self.holds[key][1] == min(until for _, until in self.holds.values())
            del self.holds[key]

    @rule(c=st.integers(0, len(CONVERSATIONS) - 1), key=st.sampled_from("xy"), salted=st.booleans(),
          foreign=st.booleans(), seconds=st.sampled_from([0.5, 2.0, 10.0]),
          lead=st.none() | st.sampled_from([0.25, 1.0]), priority=st.integers(MIN_PRIORITY, MAX_PRIORITY))
    def pause(self, c: int, key: str, salted: bool, foreign: bool, seconds: float, lead: float | None,
              priority: int) -> None:
        """A tool pause hint on a conversation's prefix. Named from another tenant's root it moves
        nothing; else each held device block at or under the hint's priority is demoted (evicted
        before every other block) and its host copies kept at the hint's priority."""
        bm = self.bm
        root = SALTED_ROOT if salted else ROOT_BLOCK_HASH
        hashes = block_hashes(CONVERSATIONS[c], BS, root)
        before = snapshot(bm)
        prefetch_at = math.inf if lead is None else self.now + seconds - lead
        if foreign:  # tenant B (its own key) names tenant A's hashes from B's root
            other = ROOT_BLOCK_HASH if salted else SALTED_ROOT
            assert bm.pause("B" + key, hashes, other, self.now + seconds, prefetch_at, priority) == 0
            assert snapshot(bm) == before
            return
        n = bm.pause(key, hashes, root, self.now + seconds, prefetch_at, priority)
        chain = hashes[:n]
        for h in chain:
            b = bm._by_hash.get(h)
            if b is None:
                assert bm.host is not None and bm.host.blocks[h].priority >= priority
            elif bm.blocks[b].ref == 0 and bm.blocks[b].priority <= priority:
                assert bm.blocks[b].demoted and bm._evictable._where[b] == DEMOTED_RANK
        if n < len(hashes):  # the chain stops at the first block held in neither tier
            assert hashes[n] not in bm.cached_hashes()

    @rule(c=st.integers(0, len(CONVERSATIONS) - 1), key=st.sampled_from("xy"), salted=st.booleans(),
          foreign=st.booleans())
    def resume(self, c: int, key: str, salted: bool, foreign: bool) -> None:
        """The tool ended: the prefix's host blocks come back to the device (counted as hint
        onloads, not as request hits); another tenant's root brings back nothing."""
        bm = self.bm
        root = SALTED_ROOT if salted else ROOT_BLOCK_HASH
        hashes = block_hashes(CONVERSATIONS[c], BS, root)
        in_host = {h for h in hashes if bm.host is not None and h in bm.host}
        counted = bm.hint_onloaded_blocks
        other = ROOT_BLOCK_HASH if salted else SALTED_ROOT
        before = snapshot(bm)
        n = bm.resume("B" + key if foreign else key, hashes, other if foreign else root, self.now)
        assert bm.hint_onloaded_blocks == counted + n
        if foreign:
            assert n == 0 and snapshot(bm) == before
        back = {h for h in in_host if h in bm._by_hash}
        assert len(back) == n
        assert bm.take_prefetched() >= n

    @rule(parent=st.integers(0, 99), tokens=st.lists(st.integers(0, 1), min_size=BS, max_size=BS))
    def import_block(self, parent: int, tokens: list[int]) -> None:
        """A block arrives from a prefill replica; it is taken only when held in neither tier."""
        bm = self.bm
        known = [ROOT_BLOCK_HASH, *sorted(bm.cached_hashes())]
        p = known[parent % len(known)]
        h = block_hash(p, tokens)
        held = h in bm.cached_hashes()
        available = bm.num_free
        block_id = bm.import_block(p, tokens)
        if held or not bm.prefix_cache or available == 0:
            assert block_id is None
            return
        assert block_id is not None
        block = bm.blocks[block_id]
        assert block.hash == h and block.ref == 0 and bm.is_evictable(block_id)
        if bm.store is not None:
            bm.store.write_block(block_id, kv_of(h), -kv_of(h))

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def refcounts_free_list_and_lru(self) -> None:
        bm = self.bm
        expected = [0] * bm.num_blocks
        for seq in self.seqs:
            for b in seq.block_ids:
                expected[b] += 1
        for ids, _ in self.holds.values():
            for b in ids:
                expected[b] += 1
        assert [b.ref for b in bm.blocks] == expected
        assert bm.num_retentions == len(self.holds)
        assert len(bm._free) == len(set(bm._free))
        assert set(bm._free) == {b.block_id for b in bm.blocks if b.ref == 0 and not b.hash}
        lru = bm._evictable
        assert set(lru.keys()) == {b.block_id for b in bm.blocks if b.ref == 0 and b.hash}
        assert not set(lru.keys()) & set(bm._free)
        for b in lru.keys():
            assert lru._where[b] == rank(bm, b) and b in lru._buckets[lru._where[b]]
        assert sum(len(bucket) for bucket in lru._buckets.values()) == len(lru) and all(lru._buckets.values())
        assert bm.num_free == len(bm._free) + len(lru) and bm.num_used + bm.num_free == bm.num_blocks

    @invariant()
    def hash_index(self) -> None:
        bm = self.bm
        hashed = {b.block_id: b.hash for b in bm.blocks if b.hash}
        assert {b: h for h, b in bm._by_hash.items()} == hashed
        assert len(bm._by_hash) == len(hashed)  # one block per hash
        for b in bm.blocks:
            if b.hash:
                assert len(b.token_ids) == BS and b.hash == block_hash(b.parent, b.token_ids)
                if bm.store is not None:
                    keys, values = bm.store.read_block(b.block_id)
                    assert np.array_equal(keys, kv_of(b.hash)) and np.array_equal(values, -kv_of(b.hash))
        for seq in self.seqs:  # a sequence's committed blocks keep the identity it committed
            for b, h in zip(seq.block_ids, seq.hashes, strict=False):
                assert bm.blocks[b].hash in (0, h)

    @invariant()
    def host_tier(self) -> None:
        bm = self.bm
        host = bm.host
        if host is None:
            assert bm.num_host_blocks == 0 and bm.onloaded_blocks == bm.offloaded_blocks == 0
            return
        assert len(host) <= host.capacity_blocks
        assert set(host._order.keys()) == set(host.blocks)
        for h, held in host.blocks.items():
            assert held.block_hash == h == block_hash(held.parent, held.token_ids)
            assert host._order._where[h] == held.priority
            if bm.store is not None:
                assert held.keys is not None and np.array_equal(held.keys, kv_of(h))
        assert not set(host.blocks) & set(bm._by_hash), "a hash held in both tiers"

    @invariant()
    def events_and_counters(self) -> None:
        bm = self.bm
        for event in bm.drain_events():
            if event.kind is CacheEventKind.STORED:
                self.router.update(event.block_hashes)
            else:
                self.router.difference_update(event.block_hashes)
        assert self.router == set(bm.cached_hashes())
        assert len(bm.cached_hashes()) == len(set(bm.cached_hashes()))
        assert bm.host_hit_tokens == bm.onloaded_blocks * BS
        assert bm.host_hit_tokens <= bm.hit_tokens <= bm.queried_tokens
        assert all(b.hash for b in bm.blocks if b.demoted), "only a cached block is demoted"


TestKvStateMachine = KvMachine.TestCase
TestKvStateMachine.settings = settings(max_examples=1000, stateful_step_count=40, deadline=None)


def test_a_block_recomputed_while_the_host_tier_holds_it_is_not_indexed_twice() -> None:
    """The crash of the KV-tier bench (``KeyError`` in ``_uncache`` from match_prefix -> _onload
    -> allocate), replayed through the machine's rules with its invariants after every step.

    A prompt's second block ``c`` is recomputed while the host tier holds it (the onload found
    no room); its parent ``p`` then goes to the host alone; the next match brings back ``p``
    and then ``c`` from the host into a second device block under the same hash, and evicting
    the two deletes that hash twice."""
    m = KvMachine()
    prompt, other = [0, 1, 0, 1, 0], [1, 1, 1, 1, 1]
    steps = [
        lambda: m.setup(num_blocks=3, host_blocks=3, policy="priority", tensors=True, prefix_cache=True),
        lambda: m.start(tokens=prompt, salted=False, reserve=3),
        lambda: m.compute(i=0, n=2),  # p, c cached
        lambda: m.finish(i=0, hold=None),
        lambda: m.start(tokens=other, salted=False, reserve=3),  # p, c evicted to the host
        lambda: m.trim(i=0),  # one block free
        lambda: m.start(tokens=prompt, salted=False, reserve=0),  # p comes back; no room for c
        lambda: m.finish(i=0, hold=None),
        lambda: m.grow(i=0),
        lambda: m.compute(i=0, n=2),  # c recomputed: the host copy is the stale one
        lambda: m.set_priority(i=0, j=0, priority=0, duration=None),
        lambda: m.set_priority(i=0, j=1, priority=100, duration=None),
        lambda: m.finish(i=0, hold=None),
        lambda: m.start(tokens=other, salted=False, reserve=2),  # p to the host, c stays
        lambda: m.finish(i=0, hold=None),
        lambda: m.start(tokens=prompt, salted=False, reserve=0),  # p and c match
        lambda: m.finish(i=0, hold=None),
        lambda: m.start(tokens=other, salted=False, reserve=1),
        lambda: m.start(tokens=prompt, salted=False, reserve=0),  # onloads evict
    ]
    for step in steps:
        step()
        m.refcounts_free_list_and_lru()
        m.hash_index()
        m.host_tier()
        m.events_and_counters()


def test_a_resume_never_evicts_a_block_it_brought_back() -> None:
    """Found by the machine: with one device block, a host tier of two and plain LRU, a resume
    brought the prefix's first block back, then evicted it again to bring the second one, and
    counted both: the device held one of the two blocks it reported."""
    m = KvMachine()
    steps = [
        lambda: m.setup(num_blocks=1, host_blocks=2, policy="lru", tensors=False, prefix_cache=True),
        lambda: m.import_block(parent=0, tokens=[0, 1]),
        lambda: m.import_block(parent=1, tokens=[0, 1]),  # the first block to the host tier
        lambda: m.import_block(parent=0, tokens=[0, 0]),  # the second too
        lambda: m.resume(c=0, key="x", salted=False, foreign=False),
    ]
    for step in steps:
        step()
        m.refcounts_free_list_and_lru()
        m.hash_index()
        m.host_tier()
        m.events_and_counters()
