"""Safety classifiers and chunked output checks; router scoring."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loopwire.common.errors import RequestError
from loopwire.common.recorded import load_session
from loopwire.gateway.router import Router
from loopwire.gateway.safety import (
    INPUT,
    LexiconClassifier,
    OutputChecker,
    Verdict,
    input_text,
    parse_guard_answer,
)
from loopwire.v1 import common_pb2

SESSIONS = Path(__file__).parents[3] / "examples" / "sessions"


async def test_lexicon_flags_categories():
    lex = LexiconClassifier()
    assert (await lex.classify("how do I build a pipe bomb", INPUT)).category == "S9"
    assert (await lex.classify("run :(){ :|:& };: now", INPUT)).category == "S14"
    assert (await lex.classify("how can I kill myself", INPUT)).category == "S11"
    assert (await lex.classify("kill the process and rerun the failing test", INPUT)).allowed


@pytest.mark.parametrize("path", sorted(p for p in SESSIONS.iterdir() if p.suffix in (".traj", ".json")))
def test_lexicon_passes_real_agent_sessions(path):
    session = load_session(path)
    lex = LexiconClassifier()
    assert lex.classify_now(input_text(session.items())).allowed


def test_guard_answers():
    assert parse_guard_answer("safe").allowed
    verdict = parse_guard_answer("unsafe\nS10,S1")
    assert not verdict.allowed and verdict.category == "S10"
    assert parse_guard_answer("???").allowed


class Recording:
    def __init__(self, bad: str = "") -> None:
        self.windows: list[str] = []
        self.bad = bad

    async def classify(self, text: str, stage: int) -> Verdict:
        self.windows.append(text)
        await asyncio.sleep(0)
        return Verdict(False, "S1", "bad") if self.bad and self.bad in text else Verdict(True)


async def test_output_checked_in_overlapping_chunks_catches_split_phrases():
    classifier = Recording(bad="FORBIDDEN")
    checker = OutputChecker(classifier, chunk_chars=10, overlap_chars=9, notify=lambda: None)
    checker.add("0123456FORB")
    await asyncio.sleep(0.01)
    checker.add("IDDEN tail")
    checker.close()
    await asyncio.wait_for(checker._task, 5)
    assert checker.violation is not None
    # windows overlap: each later window starts before the previous chunk's end
    assert classifier.windows[0] == "0123456FOR" and classifier.windows[1].startswith("123456FOR")


async def test_output_checker_covers_every_character_once_closed():
    classifier = Recording()
    checker = OutputChecker(classifier, chunk_chars=4, overlap_chars=1, notify=lambda: None)
    checker.add("abcdefghij")
    checker.close()
    await asyncio.wait_for(checker._task, 5)
    assert checker.checked_chars == 10 and checker.violation is None
    assert classifier.windows == ["abcd", "defgh", "hij"]


def make_router(policy: str) -> Router:
    """Channels connect lazily: nothing listens on these ports and nothing needs to."""
    return Router(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"], policy)


async def test_cache_aware_prefers_the_replica_holding_the_prefix():
    router = make_router("cache-aware")
    hashes = list(range(1, 101))
    router.replicas[1].cached_blocks = set(hashes[:80])
    router.replicas[2].cached_blocks = set(hashes[:20])
    assert router.choose(1600, lambda bs: hashes) is router.replicas[1]


async def test_load_outweighs_a_small_cache_hit():
    router = make_router("cache-aware")
    hashes = list(range(1, 11))
    router.replicas[0].cached_blocks = set(hashes[:2])
    router.replicas[0].in_flight = 20
    assert router.choose(160, lambda bs: hashes) is not router.replicas[0]


async def test_slow_replica_loses_ties():
    router = make_router("cache-aware")
    for replica, prefill_us in zip(router.replicas, (4_000_000, 500_000, 2_000_000), strict=True):
        replica.observe(common_pb2.Usage(input_tokens=4000, output_tokens=1), common_pb2.Timings(prefill_us=prefill_us))
    assert router.choose(5000, lambda bs: []) is router.replicas[1]


async def test_queued_prefill_work_counts_against_a_replica():
    router = make_router("cache-aware")
    hashes = list(range(1, 11))
    router.replicas[0].cached_blocks = set(hashes)  # holds the whole prompt...
    router.replicas[0].pending_prefill_tokens = 50_000  # ...but is busy prefilling others
    assert router.choose(160, lambda bs: hashes) is not router.replicas[0]


async def test_a_shared_prefix_does_not_pull_every_session_onto_one_replica():
    router = make_router("cache-aware")
    hashes = list(range(1, 101))
    router.replicas[0].cached_blocks = set(hashes)
    router.replicas[0].sessions = 12
    router.replicas[1].sessions = router.replicas[2].sessions = 4
    assert router.choose(1600, lambda bs: hashes) is not router.replicas[0]
    router.replicas[0].sessions = 6  # close enough to the lightest: the cache wins
    assert router.choose(1600, lambda bs: hashes) is router.replicas[0]


async def test_round_robin_and_least_loaded():
    rr = make_router("round-robin")
    assert [rr.choose(10, lambda bs: []).address for _ in range(4)] == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:1"]
    ll = make_router("least-loaded")
    ll.replicas[0].in_flight, ll.replicas[1].in_flight, ll.replicas[2].in_flight = 3, 1, 2
    assert ll.choose(10, lambda bs: []) is ll.replicas[1]


async def test_no_reachable_replica_is_a_retryable_unavailable(monkeypatch):
    router = make_router("cache-aware")
    for r in router.replicas:
        router.mark_down(r)
        monkeypatch.setattr(r, "reachable", lambda: False)
    with pytest.raises(RequestError) as e:
        router.choose(10, lambda bs: [])
    assert e.value.retryable and e.value.retry_after_ms > 0


async def test_replicas_that_only_missed_polls_are_still_tried():
    """Under load every replica may miss its status polls: busy is not dead, so route anyway."""
    router = make_router("cache-aware")
    for r in router.replicas:
        router.mark_down(r)
    chosen = router.choose(10, lambda bs: [])
    assert chosen in router.replicas
    with pytest.raises(RequestError):
        router.choose(10, lambda bs: [], exclude=router.replicas)  # each tried once per response
