"""Cache-aware routing's ties and balance: the choice is a function of the prompt, the seed and the
streams each replica holds, and only a replica holding a conversation's own history may carry
more load for it."""

from __future__ import annotations

import asyncio
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.gateway import router as router_mod
from loopwire.gateway.router import Router

ADDRESSES = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"]


def make_router(seed: int = 0) -> Router:
    """Channels connect lazily: nothing listens on these ports and nothing needs to."""
    return Router(ADDRESSES, "cache-aware", seed=seed)


def replica_state(router: Router, sessions: list[int], cached: list[int], hashes: list[int]) -> None:
    for replica, n, c in zip(router.replicas, sessions, cached, strict=True):
        replica.sessions = n
        replica.cached_blocks = set(hashes[:c])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**63), sessions=st.lists(st.integers(0, 12), min_size=4, max_size=4),
       cached=st.lists(st.integers(0, 40), min_size=4, max_size=4), first=st.integers(1, 2**62),
       shared=st.sampled_from([0, 160, 320]))
def test_the_same_state_and_seed_choose_the_same_replica(seed, sessions, cached, first, shared):
    """A second gateway (another router object, its replicas listed in another order) with the
    same seed, given the same replica state, picks the same replica for the same prompt."""
    hashes = list(range(first, first + 40))

    async def both() -> tuple[str, str]:
        a, b = make_router(seed), make_router(seed)
        b.replicas.reverse()
        replica_state(a, sessions, cached, hashes)
        replica_state(b, sessions[::-1], cached[::-1], hashes)
        return (a.choose(640, lambda bs: hashes, shared_tokens=shared).address,
                b.choose(640, lambda bs: hashes, shared_tokens=shared).address)

    chosen_a, chosen_b = asyncio.run(both())
    assert chosen_a == chosen_b


async def test_equal_replicas_split_prompts_by_the_seeded_hash():
    """With nothing cached and no load anywhere, the prompt and the seed alone decide: every
    replica takes a share, and another seed sends prompts elsewhere."""
    picks = {}
    for seed in (0, 1):
        router = make_router(seed)
        picks[seed] = [router.choose(640, lambda bs, i=i: [i]).address for i in range(1, 401)]
    shares = Counter(picks[0])
    assert set(shares) == set(ADDRESSES)
    assert min(shares.values()) >= 60  # of 400, 100 expected each
    moved = sum(x != y for x, y in zip(picks[0], picks[1], strict=True))
    assert 200 <= moved <= 400  # 3 in 4 expected to move


async def test_a_tie_goes_to_the_replica_with_fewer_streams():
    router = make_router()
    replica_state(router, [3, 1, 3, 3], [0, 0, 0, 0], [7])
    for key in range(1, 50):
        assert router.choose(640, lambda bs, k=key: [k]) is router.replicas[1]


async def test_scores_within_the_tie_ratio_are_a_tie_and_beyond_it_are_not():
    hashes = list(range(1, 41))
    router = make_router()
    replica_state(router, [0, 0, 0, 0], [0, 0, 0, 0], hashes)
    # Queued prefill work on every replica but one: far beyond the tie ratio, the idle one wins.
    for r in router.replicas[1:]:
        r.pending_prefill_tokens = 5_000
    assert router.choose(640, lambda bs: hashes) is router.replicas[0]
    # A few tokens queued are inside it: the seeded hash decides, whatever the queue.
    for r in router.replicas[1:]:
        r.pending_prefill_tokens = 16
    tied = {router.choose(640, lambda bs, k=k: [k]).address for k in range(1, 200)}
    assert tied == set(ADDRESSES)


async def test_a_shared_header_earns_no_extra_load_but_own_history_does():
    """Replica 0 prefilled the agent's instructions and tools first; a new session must not pile
    onto it for that, while a session whose own history it holds may."""
    hashes = list(range(1, 41))  # 640 tokens; the first 10 blocks (160 tokens) are the shared header
    router = make_router()
    replica_state(router, [5, 0, 0, 0], [10, 0, 0, 0], hashes)
    assert router.choose(640, lambda bs: hashes, shared_tokens=160) is not router.replicas[0]
    assert router_mod.BALANCE_SLACK < 5 <= router_mod.HISTORY_SLACK
    replica_state(router, [5, 0, 0, 0], [30, 0, 0, 0], hashes)
    assert router.choose(640, lambda bs: hashes, shared_tokens=160) is router.replicas[0]
