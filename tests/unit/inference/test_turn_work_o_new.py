"""Per-turn work that follows what is new: each O(new) path here equals its full recomputation.

* ``RateWindow``: the running sums equal summing the steps still in the window.
* ``coalesce`` / ``CacheEventFeed``: a watcher applying the coalesced batches holds the same set
  of hashes as one applying every published event in order, from any set it started with.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.inference.kv_cache import CacheEvent, CacheEventFeed, CacheEventKind, coalesce
from loopwire.inference.rate_window import RateWindow

steps = st.lists(st.tuples(st.floats(0, 5, allow_nan=False), st.integers(0, 4096), st.integers(0, 64),
                           st.booleans()), max_size=60)


@settings(max_examples=300, deadline=None)
@given(steps, st.floats(0.5, 12, allow_nan=False))
def test_rate_window_sums_equal_summing_the_window(script: list[tuple[float, int, int, bool]], window: float) -> None:
    w, now, kept = RateWindow(window), 0.0, []
    for dt, prefill, decode, ask in script:
        now += dt
        w.add(now, prefill, decode)
        kept.append((now, prefill, decode))
        if ask:  # a status after the step (the engine's clock never goes back)
            got = w.totals(now)
            inside = [s for s in kept if s[0] >= now - window]
            span = max(now - inside[0][0], 1e-3) if len(inside) > 1 else 0.0
            assert got == (span, sum(s[1] for s in inside), sum(s[2] for s in inside))


kinds = st.sampled_from([CacheEventKind.STORED, CacheEventKind.REMOVED])
events = st.lists(st.builds(CacheEvent, kinds, st.lists(st.integers(1, 12), max_size=4)), max_size=12)


def apply(held: set[int], batch: list[CacheEvent]) -> set[int]:
    held = set(held)
    for e in batch:
        if e.kind is CacheEventKind.STORED:
            held.update(e.block_hashes)
        else:
            held.difference_update(e.block_hashes)
    return held


@settings(max_examples=300, deadline=None)
@given(events, st.sets(st.integers(1, 12), max_size=8))
def test_coalesced_events_leave_a_watcher_with_the_same_hashes(batch: list[CacheEvent], start: set[int]) -> None:
    before = [CacheEvent(e.kind, list(e.block_hashes)) for e in batch]
    merged = coalesce(batch)
    assert apply(start, merged) == apply(start, batch)
    assert all(a.kind is not b.kind for a, b in zip(merged, merged[1:], strict=False))  # one run, one event
    assert [h for e in merged for h in e.block_hashes] == [h for e in batch for h in e.block_hashes]
    assert batch == before  # the published events (shared by every watcher) are left as they were


@settings(max_examples=100, deadline=None)
@given(st.lists(events, max_size=8), st.lists(st.integers(0, 3), max_size=8))
def test_a_slow_watcher_gets_the_backlog_as_one_batch_with_the_same_result(
        batches: list[list[CacheEvent]], reads_between: list[int]) -> None:
    async def run() -> None:
        feed = CacheEventFeed()
        stream = feed.subscribe(initial=[CacheEvent(CacheEventKind.STORED, [])])
        watched: set[int] = set()
        first = await stream.__anext__()
        assert first == [CacheEvent(CacheEventKind.STORED, [])]
        received, unread = 0, False
        for i, batch in enumerate(batches):
            feed.publish(batch)
            unread = True
            if reads_between and reads_between[i % len(reads_between)] == 0:
                watched = apply(watched, await stream.__anext__())
                received, unread = received + 1, False
        if unread:
            watched = apply(watched, await stream.__anext__())  # everything still queued, at once
            received += 1
        expected = apply(set(), [e for batch in batches for e in batch])
        assert watched == expected and received <= max(1, len(batches))
        await stream.aclose()

    asyncio.run(run())
