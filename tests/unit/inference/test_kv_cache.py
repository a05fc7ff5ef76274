"""The block manager: a hypothesis state machine over allocate/acquire/release/commit/
retain/evict, plus the prefix-cache and event behaviour the router depends on."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hashes
from loopwire.inference.kv_cache import BlockManager, CacheEventKind

BS = 4


class BlockManagerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.bm = BlockManager(num_blocks=12, block_size=BS)
        self.owned: list[list[int]] = []  # what "sequences" hold, one reference per entry
        self.retained: dict[str, list[int]] = {}
        self.clock = 0.0

    @rule(n=st.integers(1, 5))
    def allocate(self, n: int) -> None:
        free = self.bm.num_free
        got = self.bm.allocate(n)
        if n > free:
            assert got is None and self.bm.num_free == free
        else:
            assert got is not None and len(set(got)) == n
            assert all(self.bm.blocks[b].ref == 1 and self.bm.blocks[b].hash == 0 for b in got)
            self.owned.append(got)

    @precondition(lambda self: self.owned)
    @rule(i=st.integers(0, 100), tokens=st.lists(st.integers(0, 3), min_size=BS, max_size=BS))
    def commit_first(self, i: int, tokens: list[int]) -> None:
        blocks = self.owned[i % len(self.owned)]
        h = self.bm.commit(blocks[0], ROOT_BLOCK_HASH, tokens)
        assert h == block_hashes(tokens, BS)[0]

    @precondition(lambda self: self.owned)
    @rule(i=st.integers(0, 100))
    def release(self, i: int) -> None:
        self.bm.release(self.owned.pop(i % len(self.owned)))

    @rule(tokens=st.lists(st.integers(0, 3), min_size=1, max_size=3 * BS))
    def match(self, tokens: list[int]) -> None:
        ids, hashes = self.bm.match_prefix(tokens)
        assert hashes == block_hashes(tokens, BS)[: len(hashes)]
        assert len(ids) * BS <= max(len(tokens) - 1, 0)
        if ids:
            self.owned.append(ids)

    @precondition(lambda self: self.owned)
    @rule(i=st.integers(0, 100), key=st.sampled_from("abc"), seconds=st.floats(0, 5))
    def retain(self, i: int, key: str, seconds: float) -> None:
        self.bm.retain(key, self.owned[i % len(self.owned)], self.clock + seconds)

    @rule(seconds=st.floats(0, 3))
    def tick(self, seconds: float) -> None:
        self.clock += seconds
        self.bm.expire_retentions(self.clock)

    @rule()
    def pressure(self) -> None:
        self.bm.drop_oldest_retention()

    @invariant()
    def accounting(self) -> None:
        bm = self.bm
        refs = [b.ref for b in bm.blocks]
        assert min(refs) >= 0
        assert bm.num_used == sum(1 for r in refs if r > 0)
        held = sum(len(x) for x in self.owned) + sum(len(r.block_ids) for r in bm._retentions.values())
        assert sum(refs) == held
        for h, block_id in bm._by_hash.items():
            assert bm.blocks[block_id].hash == h
        for b in bm.blocks:
            in_lru = bm.is_evictable(b.block_id)
            in_free = b.block_id in bm._free
            assert (b.ref > 0) + in_lru + in_free == 1
            assert not in_lru or b.hash
            assert not in_free or not b.hash


TestBlockManager = BlockManagerMachine.TestCase
TestBlockManager.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_prefix_hits_lru_eviction_and_events() -> None:
    bm = BlockManager(num_blocks=4, block_size=BS)
    tokens = list(range(9))
    blocks = bm.allocate(3)
    assert blocks is not None
    h1 = bm.commit(blocks[0], ROOT_BLOCK_HASH, tokens[:4])
    h2 = bm.commit(blocks[1], h1, tokens[4:8])
    assert [e.kind for e in bm.drain_events()] == [CacheEventKind.STORED] * 2
    bm.release(blocks)
    assert bm.num_used == 0 and bm.num_cached == 2
    ids, hashes = bm.match_prefix(tokens)
    assert ids == blocks[:2] and hashes == [h1, h2] == block_hashes(tokens, BS)
    bm.release(ids)
    # Four fresh blocks: the free ones first, then the cached ones in LRU order (tail block first).
    assert bm.allocate(4) is not None
    removed = [e for e in bm.drain_events() if e.kind is CacheEventKind.REMOVED]
    assert [e.block_hashes for e in removed] == [[h2], [h1]]
    assert bm.num_cached == 0 and bm.match_prefix(tokens) == ([], [])


def test_retention_keeps_blocks_until_it_expires() -> None:
    bm = BlockManager(num_blocks=2, block_size=BS)
    blocks = bm.allocate(2)
    assert blocks is not None
    bm.commit(blocks[0], ROOT_BLOCK_HASH, [1, 2, 3, 4])
    bm.retain("session", blocks, until=10.0)
    bm.release(blocks)
    assert bm.allocate(1) is None  # held by the retention
    bm.expire_retentions(now=5.0)
    assert bm.num_free == 0
    bm.expire_retentions(now=10.0)
    assert bm.num_free == 2 and bm.num_retentions == 0


def test_disabled_prefix_cache_never_hits() -> None:
    bm = BlockManager(num_blocks=4, block_size=BS, prefix_cache=False)
    blocks = bm.allocate(1)
    assert blocks is not None
    bm.commit(blocks[0], ROOT_BLOCK_HASH, [1, 2, 3, 4])
    bm.release(blocks)
    assert bm.match_prefix([1, 2, 3, 4, 5]) == ([], []) and bm.drain_events() == []


def test_import_export_round_trip() -> None:
    src = BlockManager(num_blocks=4, block_size=BS)
    dst = BlockManager(num_blocks=4, block_size=BS)
    tokens = list(range(8))
    blocks = src.allocate(2)
    assert blocks is not None
    h1 = src.commit(blocks[0], ROOT_BLOCK_HASH, tokens[:4])
    h2 = src.commit(blocks[1], h1, tokens[4:])
    exported = src.export([h1, h2, 12345])
    assert [b.block_hash for b in exported] == [h1, h2]
    for b in exported:
        assert dst.import_block(b.parent_hash, b.token_ids) is not None
    assert dst.import_block(exported[0].parent_hash, exported[0].token_ids) is None  # already held
    ids, _ = dst.match_prefix(tokens + [99])
    assert len(ids) == 2


def test_a_hash_collision_never_serves_another_prompts_blocks() -> None:
    """The match trusts a block found by hash only when it holds the prompt's tokens: a prompt whose
    hashes collide with cached blocks (what a crafted 64-bit collision would look like) gets a miss."""
    bm = BlockManager(num_blocks=4, block_size=BS)
    victim = list(range(9))
    blocks = bm.allocate(2)
    assert blocks is not None
    h1 = bm.commit(blocks[0], ROOT_BLOCK_HASH, victim[:4])
    h2 = bm.commit(blocks[1], h1, victim[4:8])
    bm.release(blocks)
    attacker = [100 + t for t in victim]
    assert bm.match([h1, h2], attacker) == ([], [])  # the attacker's tokens, the victim's hashes
    ids, hashes = bm.match([h1, h2], victim)
    assert ids == blocks and hashes == [h1, h2]
