"""The host-memory KV tier and retention priorities: eviction order, the round trip through
host memory against a fresh prefill, priced copies on the simulated engine, and cancels that
leave nothing held in either tier (DESIGN §4, invariant 6)."""

from __future__ import annotations

import numpy as np
import pytest
from inference_helpers import make_core, run_all

from loopwire.common.hashing import block_hash
from loopwire.common.model_def import dummy_definition
from loopwire.inference.config import EngineConfig, model_preset
from loopwire.inference.cost_model import CostModel
from loopwire.inference.kv_cache import BlockManager, CacheEventKind
from loopwire.inference.kv_host_tier import DEFAULT_PRIORITY, HostTier
from loopwire.inference.sequence import GenerationRequest, RetentionPolicy, TokenRangeRetention
from loopwire.inference.simulated_engine import simulated_core

BS = 4


def _cache_blocks(bm: BlockManager, priorities: list[int]) -> list[int]:
    """One cached, unreferenced block per priority, released in list order; their hashes."""
    hashes = []
    for i, priority in enumerate(priorities):
        (block_id,) = bm.allocate(1) or []
        hashes.append(bm.commit(block_id, 0, [i] * BS))
        bm.set_priority(block_id, priority)
        bm.release([block_id])
    return hashes


def _eviction_order(bm: BlockManager, n: int) -> list[int]:
    bm.drain_events()
    out = []
    for _ in range(n):
        assert bm.allocate(1) is not None
        out += [h for e in bm.drain_events() if e.kind is CacheEventKind.REMOVED for h in e.block_hashes]
    return out


@pytest.mark.parametrize("policy", ["priority", "lru"])
def test_eviction_takes_the_lowest_priority_first_then_the_least_recently_used(policy: str) -> None:
    priorities = [50, 10, 80, 35, 10, 0, 100, 35]
    bm = BlockManager(len(priorities), BS, eviction_policy=policy)
    hashes = _cache_blocks(bm, priorities)
    got = _eviction_order(bm, len(priorities))
    if policy == "priority":
        expected = [h for _, _, h in sorted(zip(priorities, range(len(hashes)), hashes, strict=True))]
    else:
        expected = hashes  # release order
    assert got == expected


def test_a_priority_with_a_duration_falls_back_to_the_default() -> None:
    bm = BlockManager(3, BS)
    hashes = _cache_blocks(bm, [50, 40, 60])
    bm.set_priority(1, 90, until=10.0)  # the 40 block: held high for 10 s
    bm.expire_retentions(5.0)
    assert _eviction_order(bm, 1) == [hashes[0]]  # 50 < 60 < 90
    bm2 = BlockManager(3, BS)
    hashes2 = _cache_blocks(bm2, [50, 40, 60])
    bm2.set_priority(1, 90, until=10.0)
    bm2.expire_retentions(11.0)  # expired: back to 35, the lowest
    assert _eviction_order(bm2, 1) == [hashes2[1]]
    with pytest.raises(ValueError):
        bm2.set_priority(0, 101)


def test_evicted_blocks_move_to_the_host_tier_and_come_back_on_a_hit() -> None:
    host = HostTier(capacity_bytes=3 * 100, block_bytes=100)
    bm = BlockManager(2, BS, host=host)
    tokens = list(range(2 * BS + 1))
    first = bm.allocate(2) or []
    hashes = [bm.commit(first[0], 0, tokens[:BS])]
    hashes.append(bm.commit(first[1], hashes[0], tokens[BS : 2 * BS]))
    bm.release(first)
    bm.drain_events()
    other = bm.allocate(2) or []  # pressure: both go to host, nothing is REMOVED yet
    assert len(host) == 2 and not [e for e in bm.drain_events() if e.kind is CacheEventKind.REMOVED]
    assert set(hashes) <= set(bm.cached_hashes())
    bm.release(other)  # unhashed: free
    ids, got = bm.match_prefix(tokens)
    assert got == hashes and len(ids) == 2 and len(host) == 0
    assert bm.host_hit_tokens == 2 * BS and bm.take_transfers() == (2, 2)
    assert all(bm.blocks[i].hash == h for i, h in zip(ids, hashes, strict=True))
    bm.release(ids)


def test_a_resumes_copies_are_priced_with_it_both_ways_not_with_the_next_step() -> None:
    """A resume brings a paused prefix back while the session is away: the blocks it evicts to
    the host tier for their room are copied then too, so they count with the hint's copies
    (``take_prefetched``, which overlap the pause), not with the next request's step."""
    host = HostTier(capacity_bytes=4 * 100, block_bytes=100)
    bm = BlockManager(2, BS, host=host)
    tokens = list(range(2 * BS))
    first = bm.allocate(2) or []
    hashes = [bm.commit(first[0], 0, tokens[:BS])]
    hashes.append(bm.commit(first[1], hashes[0], tokens[BS:]))
    bm.release(first)
    assert bm.pause("a", hashes, 0, until=100.0) == 2
    other = _cache_blocks(bm, [35, 35])  # another session's: the paused prefix leaves for the host
    assert set(hashes) <= set(host.hashes()) and bm.take_transfers() == (0, 2)
    assert bm.resume("a", hashes, 0, now=1.0) == 2  # its two blocks back, the other two out
    assert set(other) <= set(host.hashes())
    assert bm.take_transfers() == (0, 0) and bm.take_prefetched() == 4


def _paused_prefix(bm: BlockManager, first_token: int) -> list[int]:
    """Two cached blocks of one session's prefix, unreferenced; their hashes."""
    ids = bm.allocate(2) or []
    hashes = [bm.commit(ids[0], 0, [first_token] * BS)]
    hashes.append(bm.commit(ids[1], hashes[0], [first_token + 1] * BS))
    bm.release(ids)
    return hashes


def test_a_prefix_back_ahead_of_its_expected_end_stays_until_the_resume_and_yields_only_to_one() -> None:
    """The expected end is an estimate: blocks brought back ahead of it keep the pause's priority
    (past ``RESUME_GRACE_S``) until the resume hint, however late; a session whose tool has
    ended (a resume) may take their room, another early prefetch may not."""
    host = HostTier(capacity_bytes=8 * 100, block_bytes=100)
    bm = BlockManager(4, BS, host=host)
    third = _paused_prefix(bm, 120)
    assert bm.pause("third", third, 0, until=3600.0) == 2  # back only when resumed
    early = _paused_prefix(bm, 100)
    assert bm.pause("early", early, 0, until=3600.0, prefetch_at=5.0) == 2
    other = _paused_prefix(bm, 110)
    assert bm.pause("other", other, 0, until=3600.0, prefetch_at=6.0) == 2
    _cache_blocks(bm, [35] * 4)  # an active session's: every paused prefix leaves for the host tier
    assert set(third) | set(early) | set(other) <= set(host.hashes())
    bm.expire_retentions(5.0)  # "early"'s expected end less the copy: it comes back
    bm.expire_retentions(6.0)  # and "other"'s, in the room of the ordinary blocks
    bm.expire_retentions(100.0)  # long past the grace: both still there, kept for their sessions
    assert set(early) | set(other) <= set(bm._by_hash)
    assert bm.pause("third", third, 0, until=3600.0, prefetch_at=101.0) == 2
    bm.expire_retentions(101.0)  # a third early prefetch finds no room below its rank
    assert not set(third) & set(bm._by_hash)
    assert bm.resume("third", third, 0, now=102.0) == 2  # its tool ended: it takes an early one's room
    assert set(third) <= set(bm._by_hash)


def test_a_full_host_tier_drops_its_lowest_priority_and_reports_it_removed() -> None:
    host = HostTier(capacity_bytes=2 * 10, block_bytes=10)
    bm = BlockManager(3, BS, host=host)
    hashes = _cache_blocks(bm, [70, 20, 50])
    removed = _eviction_order(bm, 3)  # all three offloaded; the host holds two
    assert removed == [hashes[1]]  # the 20 block left both tiers
    assert set(host.hashes()) == {hashes[0], hashes[2]}


def _recording(core):  # type: ignore[no-untyped-def]
    """Keep the logits every step returns (observing the real executor)."""
    seen: list[np.ndarray] = []
    execute = core.executor.execute

    def run(batch):  # type: ignore[no-untyped-def]
        out = execute(batch)
        seen.extend(lg.copy() for lg in out if lg is not None)
        return out

    core.executor.execute = run
    return seen


def test_host_round_trip_gives_the_logits_of_a_fresh_prefill(tiny_model) -> None:
    rng = np.random.default_rng(3)
    prompt = [int(t) for t in rng.integers(0, 500, 5 * 16 + 3)]
    core = make_core(tiny_model, num_kv_blocks=8, max_batch_tokens=64, host_kv_bytes=1 << 30)
    run_all(core, [GenerationRequest("a", prompt, 1, speculative=False)])
    run_all(core, [GenerationRequest("b", [int(t) for t in rng.integers(500, 900, 7 * 16 + 8)], 1, speculative=False)])
    assert core.blocks.num_host_blocks >= 5  # the first prompt's blocks were pushed out to host memory
    seen = _recording(core)
    tokens, fin = run_all(core, [GenerationRequest("c", prompt, 12, speculative=False)])
    assert fin["c"].usage.cached_input_tokens == 5 * 16 and core.blocks.host_hit_tokens == 5 * 16
    fresh = make_core(tiny_model, prefix_cache=False)
    fresh_seen = _recording(fresh)
    fresh_tokens, _ = run_all(fresh, [GenerationRequest("c", prompt, 12, speculative=False)])
    assert tokens == fresh_tokens
    assert len(seen) == len(fresh_seen) == 12
    for a, b in zip(seen, fresh_seen, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)


def test_retention_policy_keeps_the_instruction_prefix_over_other_sessions(tiny_model) -> None:
    instructions = list(range(1, 33))  # two blocks of shared instructions + tool schemas
    policy = RetentionPolicy((TokenRangeRetention(0, 32, 90),), decode_priority=10)
    core = make_core(tiny_model, num_kv_blocks=10, max_batch_tokens=64)
    run_all(core, [GenerationRequest("a", instructions + [40, 41, 42], 20, speculative=False, retention=policy)])
    for i in range(6):  # other sessions, default priority, fill the pool
        run_all(core, [GenerationRequest(f"o{i}", [int(t) for t in range(300 + 50 * i, 340 + 50 * i)], 2,
                                         speculative=False)])
    _, fin = run_all(core, [GenerationRequest("b", instructions + [77], 2, speculative=False)])
    assert fin["b"].usage.cached_input_tokens == 32
    lru = make_core(tiny_model, num_kv_blocks=10, max_batch_tokens=64, eviction_policy="lru")
    run_all(lru, [GenerationRequest("a", instructions + [40, 41, 42], 20, speculative=False, retention=policy)])
    for i in range(6):
        run_all(lru, [GenerationRequest(f"o{i}", [int(t) for t in range(300 + 50 * i, 340 + 50 * i)], 2,
                                        speculative=False)])
    _, fin = run_all(lru, [GenerationRequest("b", instructions + [77], 2, speculative=False)])
    assert fin["b"].usage.cached_input_tokens == 0  # the same pressure under plain LRU loses it


def test_the_simulated_engine_prices_host_copies_at_the_link_bandwidth() -> None:
    cost = CostModel.named("h200", "8b")
    config = EngineConfig(model=model_preset("8b"), num_kv_blocks=8, block_size=16, max_batch_tokens=4096,
                          host_kv_bytes=1 << 34, drafter="prompt_lookup")
    core, executor = simulated_core(config, cost, dummy_definition())
    prompt = list(range(1000, 1000 + 6 * 16 + 1))
    run_all(core, [GenerationRequest("a", prompt, 1)])
    run_all(core, [GenerationRequest("b", list(range(5000, 5000 + 7 * 16)), 1)])
    _, fin = run_all(core, [GenerationRequest("c", prompt, 1)])
    onloaded, offloaded = core.blocks.onloaded_blocks, core.blocks.offloaded_blocks
    assert fin["c"].usage.cached_input_tokens == 6 * 16  # device and host hits together
    assert onloaded > 0 and core.blocks.host_hit_tokens == onloaded * 16
    block_bytes = 16 * 2 * 32 * 8 * 128 * 2  # Llama 3 8B: 32 layers, 8 KV heads, head dim 128, K and V, BF16
    assert executor.transfer_seconds == pytest.approx((onloaded + offloaded) * block_bytes / 51.2e9)


def test_thousand_cancellations_leave_nothing_held_in_either_tier() -> None:
    cost = CostModel.named("h200", "8b")
    config = EngineConfig(model=model_preset("8b"), num_kv_blocks=24, block_size=4, max_batch_tokens=48,
                          host_kv_bytes=40 * 4 * cost.kv_bytes_per_token, drafter="suffix")
    core, _ = simulated_core(config, cost, dummy_definition())
    rng = np.random.default_rng(0)
    shared = [int(t) for t in rng.integers(0, 100, 12)]
    pool = [shared + [int(t) for t in rng.integers(0, 100, rng.integers(1, 30))] for _ in range(40)]
    live: list[str] = []
    cancelled = 0
    policy = RetentionPolicy((TokenRangeRetention(0, 12, 80, duration_s=0.5),))
    for i in range(1000):
        prompt = pool[int(rng.integers(0, len(pool)))]  # sessions come back: host hits
        core.add(GenerationRequest(f"c{i}", prompt, 30, retention=policy if i % 3 == 0 else None,
                                   session_id=f"s{i % 7}"))
        live.append(f"c{i}")
        for _ in range(int(rng.integers(0, 3))):
            core.step()
        victim = live.pop(int(rng.integers(0, len(live))))
        cancelled += core.cancel(victim)
    for rid in live:
        cancelled += core.cancel(rid)
    core.step()
    bm = core.blocks
    assert cancelled == 1000 and not core.seqs and not core.scheduler.has_work()
    assert bm.num_used == 0 and bm.num_free == bm.num_blocks and bm.num_retentions == 0
    assert bm.offloaded_blocks > 0 and bm.onloaded_blocks > 0  # both directions were exercised
    host = bm.host
    assert host is not None and len(host) <= host.capacity_blocks
    device = set(bm._by_hash)
    for h, b in host.blocks.items():  # host entries are whole cached blocks, never also on the device
        assert h not in device and block_hash(b.parent, b.token_ids) == h and len(b.token_ids) == 4
    assert all(b.priority == DEFAULT_PRIORITY or b.hash for b in bm.blocks)
