"""Per-turn work that follows what is new: each O(new) path here equals its full recomputation.

* ``RateWindow``: the running sums equal summing the steps still in the window.
* ``coalesce`` / ``CacheEventFeed``: a watcher applying the coalesced batches holds the same set
  of hashes as one applying every published event in order, from any set it started with.
* ``BlockManager.retain``: a hold that grows visits only its new blocks and ends as taking every
  block and dropping the old hold would.
* ``SuffixDrafter.open`` with a stream's base: the same context as comparing the whole prefix,
  without reading it.
"""

from __future__ import annotations

import asyncio
import weakref

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.inference.kv_cache import BlockManager, Retention
from loopwire.inference.kv_events import CacheEvent, CacheEventFeed, CacheEventKind, coalesce
from loopwire.inference.rate_window import RateWindow
from loopwire.inference.suffix_tree import SuffixAutomaton, SuffixContext, SuffixDrafter

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


class _Prompt(list):  # type: ignore[type-arg]
    """A prompt that counts the reads of its first ``held`` ids (the prefix a turn appends to)."""

    def __init__(self, ids: list[int], held: int) -> None:
        super().__init__(ids)
        self.held, self.prefix_reads = held, 0

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice) and (i.start or 0) < self.held and i.stop != 0:
            self.prefix_reads += 1
        return super().__getitem__(i)


def _same_automaton(a: SuffixAutomaton, b: SuffixAutomaton) -> bool:
    return (a.length, a.link, a.count, a.first_token, a.first_target, a.more, a.last) == (
        b.length, b.link, b.count, b.first_token, b.first_target, b.more, b.last)


# One op: (stream 0 or 1, what it does, tokens): "open" a turn (appending the tokens to what the stream
# holds, or a full prompt of them), "emit" the tokens as output, "finish" it, or "cancel" it (the
# stream keeps its earlier sequence, as the service does).
ops = st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["open", "open", "emit", "finish", "finish", "cancel"]),
                         st.lists(st.integers(0, 5), max_size=6)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops, st.booleans())
def test_a_stream_turn_continues_its_kept_automaton_as_the_full_comparison_would(
        script: list[tuple[int, str, list[int]]], full_prompts: bool) -> None:
    """Two streams of one session on one drafter: opening a turn with the stream's base (the
    context of its last finished request) gives the same context as comparing the whole prefix
    (a twin drafter told nothing), and reads none of the prefix when that base is the kept one."""
    fast, slow = SuffixDrafter(), SuffixDrafter()
    held: dict[int, tuple[list[int], weakref.ref[SuffixContext] | None]] = {}
    running: dict[int, tuple[SuffixContext, SuffixContext]] = {}
    alive: list[SuffixContext] = []  # every context stays alive: a stale base must still be refused
    kept: SuffixContext | None = None  # the session's kept context, as the drafter keeps it
    for stream, op, tokens in script:
        if op == "open" and stream not in running:
            base_ids, base = held.get(stream, ([], None))
            ids = tokens if full_prompts and not base_ids else [*base_ids, *tokens]
            if not ids:
                continue
            prompt = _Prompt(ids, len(base_ids))
            trusted = base is not None and base() is kept
            a = fast.open(prompt, "s", "t", base)
            b = slow.open(list(ids), "s", "t")
            kept = None
            assert a.tokens == b.tokens == ids and a.prompt_len == b.prompt_len
            assert _same_automaton(a.sam, b.sam)
            assert a.propose(4).token_ids == b.propose(4).token_ids
            if trusted:
                assert prompt.prefix_reads == 0
            running[stream] = (a, b)
            alive += [a, b]
        elif op == "emit" and stream in running:
            for ctx in running[stream]:
                ctx.extend(tokens)
        elif op in ("finish", "cancel") and stream in running:
            a, b = running.pop(stream)
            a.finish()
            b.finish()
            kept = a
            if op == "finish":
                held[stream] = (list(a.tokens), weakref.ref(a))


def _retain_in_full(bm: BlockManager, key: str, block_ids: list[int], until: float) -> None:
    """What ``retain`` did before it followed the new blocks: take every block, drop the old hold."""
    bm.acquire(block_ids)
    bm.drop_retention(key)
    bm._retentions[key] = Retention(list(block_ids), until)


def _state(bm: BlockManager) -> tuple[object, ...]:
    return ([b.ref for b in bm.blocks], list(bm._free), sorted((p, list(k)) for p, k in bm._evictable._buckets.items()),
            [(k, list(r.block_ids), r.until) for k, r in bm._retentions.items()])


# One turn: (the hold it continues, how many of that hold's blocks it keeps, whether in reverse
# order (no session does that: ids equal here and there but not as a prefix), new blocks, how
# many of those are committed, the hold it is kept under, the hold's duration).
turns = st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 8), st.booleans(), st.integers(0, 3),
                           st.integers(0, 3), st.sampled_from("ab"), st.sampled_from([1.0, 2.0])), max_size=30)


@settings(max_examples=300, deadline=None)
@given(turns)
def test_a_growing_hold_changes_only_its_new_blocks_and_ends_as_a_full_retake_would(
        script: list[tuple[str, int, bool, int, int, str, float]]) -> None:
    """Sessions held turn by turn: each turn's sequence starts with some of a hold's blocks and
    adds new ones, is held, then let go. Following only the differing blocks leaves every block's
    references, the free list, the LRU and the holds as taking all and dropping the old hold did,
    and visits only the blocks that differ."""
    fast, slow = BlockManager(48, 2), BlockManager(48, 2)
    visited = [0]
    acquire, release = fast.acquire, fast.release
    fast.acquire = lambda ids: (visited.__setitem__(0, visited[0] + len(ids)), acquire(ids))[1]  # type: ignore[method-assign]
    fast.release = lambda ids: (visited.__setitem__(0, visited[0] + len(ids)), release(ids))[1]  # type: ignore[method-assign]
    for n, (source, keep, backwards, new, committed, key, seconds) in enumerate(script):
        seqs = []
        for bm in (fast, slow):
            hold = bm._retentions.get(source)
            ids = list(hold.block_ids[:keep]) if hold is not None else []
            if backwards:
                ids.reverse()
            bm.acquire(ids)  # the sequence's own references (a parked prefix)
            got = bm.allocate(new)
            if got is None:
                bm.release(ids)
                break
            for i, block_id in enumerate(got[:committed]):
                bm.commit(block_id, n * 8 + i + 1, [n, i])
            seqs.append(ids + got)
        if len(seqs) < 2:
            continue
        assert seqs[0] == seqs[1]
        ids = seqs[0]
        old = fast._retentions.get(key)
        prev = [] if old is None else list(old.block_ids)
        shared = 0
        while shared < min(len(prev), len(ids)) and prev[shared] == ids[shared]:
            shared += 1
        visited[0] = 0
        fast.retain(key, ids, float(n) + seconds)
        if old is not None and all(p != i for p, i in zip(prev[shared:], ids[shared:], strict=False)):
            assert visited[0] == len(ids) - shared + len(prev) - shared  # a hold that grows: only what differs
        _retain_in_full(slow, key, list(ids), float(n) + seconds)
        for bm in (fast, slow):
            bm.release(ids)
        assert _state(fast) == _state(slow)
