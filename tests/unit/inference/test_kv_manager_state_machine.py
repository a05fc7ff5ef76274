"""The KV cache manager driven through its request-level calls the way the scheduler and the
engine drive it: admit (``computed_blocks`` then ``allocate_slots``), prefill a chunk
(``allocate_slots``, ``commit``), decode with drafts and draft branches (``allocate_slots``, ``allocate_fork``,
``keep_branch``, ``trim``), finish with a hold or a park, preempt (``free``), over a tiny pool
with and without a host tier, every index checked after every step.

The references are the machine's own: which sequence owns which block (a fork's blocks live only
inside the rule that verifies it), what a sequence's committed hashes must be (the chain of its
tokens from its salted root), and which holds and parks the pool keeps; each block's refcount
must equal its holders, and a block table must always cover what the sequence has computed.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from loopwire.common.hashing import block_hashes
from loopwire.inference.kv_cache import BlockManager
from loopwire.inference.kv_host_tier import HostTier
from loopwire.inference.kv_manager import KvCacheManager
from loopwire.inference.sequence import GenerationRequest, Sequence

BS = 2
BLOCK_BYTES = 64
CONVERSATIONS = ([0, 1, 0, 1, 0, 1, 0, 0], [0, 1, 0, 1, 1, 1, 1, 0], [1, 1, 0, 0, 1, 1, 0, 1])
TURN = st.builds(lambda c, n: CONVERSATIONS[c][:n], st.integers(0, len(CONVERSATIONS) - 1), st.integers(1, 8))
TOKENS = st.one_of(TURN, TURN, st.lists(st.integers(0, 1), min_size=1, max_size=3 * BS + 1))


def blocks_for(tokens: int) -> int:
    return -(-tokens // BS)


class KvManagerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.seqs: list[Sequence] = []
        self.now = 0.0
        self.count = 0

    @initialize(num_blocks=st.integers(1, 8), host_blocks=st.sampled_from([None, 0, 2]),
                prefix_cache=st.booleans() | st.just(True))
    def setup(self, num_blocks: int, host_blocks: int | None, prefix_cache: bool) -> None:
        host = None if host_blocks is None else HostTier(host_blocks * BLOCK_BYTES, BLOCK_BYTES)
        self.pool = BlockManager(num_blocks, BS, prefix_cache=prefix_cache, host=host)
        self.kv = KvCacheManager(self.pool)

    def _seq(self, i: int) -> Sequence:
        return self.seqs[i % len(self.seqs)]

    def _held(self) -> int:
        """Blocks held by holds and parks (which memory pressure may give up)."""
        return (sum(len(r.block_ids) for r in self.pool._retentions.values())
                + sum(len(p.block_ids) for p in self.pool._parked.values()))

    def _allocate_slots(self, seq: Sequence, n: int) -> bool:
        """``allocate_slots`` checked against its contract: the blocks for ``n`` more tokens,
        holds and parks given up only when the pool alone is short, nothing taken on failure."""
        need = blocks_for(seq.num_computed + n) - len(seq.kv.block_ids)
        before, held, ids = self.pool.num_free, self._held(), list(seq.kv.block_ids)
        got = self.kv.allocate_slots(seq, n)
        if need <= before:
            assert self._held() == held, "a hold was given up though the pool had room"
        if got is None:
            assert seq.kv.block_ids == ids and not self.pool._retentions and not self.pool._parked
            return False
        assert got is seq.kv and seq.kv.block_ids[: len(ids)] == ids
        assert len(seq.kv.block_ids) == max(len(ids), blocks_for(seq.num_computed + n))
        return True

    def _free(self, seq: Sequence) -> None:
        self.seqs.remove(seq)
        self.kv.free(seq)
        assert seq.kv.block_ids == [] and seq.kv.block_hashes == [] and seq.num_computed == 0

    # -- rules ----------------------------------------------------------------------------

    @rule(tokens=TOKENS, salted=st.booleans(), park=st.sampled_from(["", "s"]), chunk=st.integers(1, 6))
    def admit(self, tokens: list[int], salted: bool, park: str, chunk: int) -> None:
        """A waiting sequence is admitted with a chunk of its prompt, or keeps nothing."""
        self.count += 1
        req = GenerationRequest(f"r{self.count}", list(tokens), 4, cache_salt="t" if salted else "", park_key=park)
        seq = Sequence(req, self.now, None, 4)
        computed = self.kv.computed_blocks(seq)
        assert computed == seq.num_computed == len(seq.kv.block_ids) * BS <= len(tokens) - 1
        assert seq.kv.block_hashes == seq.prefix_hashes(BS)[: len(seq.kv.block_ids)]
        self.seqs.append(seq)
        if not self._allocate_slots(seq, min(chunk, len(tokens) - computed)):
            self._free(seq)  # the scheduler keeps nothing while a sequence waits

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99), n=st.integers(1, 6), token=st.integers(0, 1))
    def prefill(self, i: int, n: int, token: int) -> None:
        """A prefill chunk of up to ``n`` tokens gets its slots (or the sequence is preempted)
        and runs: its full blocks are committed; one that reached the prompt's end sampled the
        first output token."""
        seq = self._seq(i)
        if seq.num_computed >= len(seq.tokens) - 1 and seq.num_output:
            return  # decoding
        n = min(n, len(seq.tokens) - seq.num_computed)
        if not self._allocate_slots(seq, n):
            self._free(seq)  # preempted
            return
        seq.num_computed += n
        if seq.num_computed == len(seq.tokens):
            seq.tokens.append(token)
        self.kv.commit(seq, self.now)
        self.kv.trim(seq)

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99), k=st.integers(0, 3), alternatives=st.lists(st.integers(1, 3), min_size=1, max_size=2),
          branch=st.sampled_from([1, 2, 0]), accepted=st.integers(0, 3), new=st.integers(0, 1))
    def decode(self, i: int, k: int, alternatives: list[int], branch: int, accepted: int, new: int) -> None:
        """A decode step: the last token and ``k`` drafts, forks for alternative branches while
        blocks last; the target follows one branch and accepts some of its drafts."""
        seq = self._seq(i)
        if seq.num_computed != len(seq.tokens) - 1:
            return
        start = seq.num_computed
        if not self._allocate_slots(seq, 1 + k):
            self._free(seq)  # preempted
            return
        forks = []
        for n in alternatives:
            used = self.pool.num_used
            fork = self.kv.allocate_fork(seq, start, n)
            if fork is None:
                assert self.pool.num_used == used
                break
            assert fork.block_ids[: fork.shared] == seq.kv.block_ids[: fork.shared] and fork.shared == start // BS
            assert len(fork.block_ids) == blocks_for(start + 1 + n)
            assert (fork.copy is None) == (start % BS == 0)
            if fork.copy is not None:
                assert fork.copy == (seq.kv.block_ids[fork.shared], fork.block_ids[fork.shared])
            forks.append((fork, n))
        chosen = forks[branch - 1] if 0 < branch <= len(forks) else None
        drafts = chosen[1] if chosen is not None else k
        a = min(accepted, drafts)
        self.kv.keep_branch(seq, [f for f, _ in forks], None if chosen is None else chosen[0])
        seq.tokens += [new] * (1 + a)
        seq.num_computed = start + 1 + a
        self.kv.commit(seq, self.now)
        self.kv.trim(seq)  # nothing past the tokens; the next token's slot comes with the next step
        assert blocks_for(seq.num_computed) <= len(seq.kv.block_ids) <= blocks_for(len(seq.tokens))

    @precondition(lambda self: self.seqs)
    @rule(i=st.integers(0, 99), hold=st.none() | st.sampled_from([0.5, 4.0]), park=st.booleans())
    def finish(self, i: int, hold: float | None, park: bool) -> None:
        """Finished (held for its session, its committed blocks parked for the stream's next
        turn) or preempted: whatever it holds goes back."""
        seq = self._seq(i)
        if hold is not None:
            self.kv.retain(seq, seq.request_id, self.now + hold)
        if park and seq.req.park_key:
            hashes = list(seq.kv.block_hashes)
            self.kv.park(seq, seq.req.park_key)
            parked = self.pool._parked.get(seq.req.park_key)
            assert (parked is None) == (not hashes or not self.pool.prefix_cache)
            assert parked is None or len(parked.block_ids) == len(hashes)
        self._free(seq)

    @rule(seconds=st.sampled_from([0.25, 1.0, 3.0]))
    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.pool.expire_retentions(self.now)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def refcounts_match_holders(self) -> None:
        pool = self.pool
        expected = [0] * pool.num_blocks
        holders = [s.kv.block_ids for s in self.seqs]
        holders += [r.block_ids for r in pool._retentions.values()]
        holders += [p.block_ids for p in pool._parked.values()]
        for ids in holders:
            for b in ids:
                expected[b] += 1
        assert [b.ref for b in pool.blocks] == expected
        assert pool.num_used + pool.num_free == pool.num_blocks

    @invariant()
    def block_tables_cover_what_is_computed(self) -> None:
        for seq in self.seqs:
            kv = seq.kv
            assert len(set(kv.block_ids)) == len(kv.block_ids)
            assert seq.num_computed <= min(len(kv.block_ids) * BS, len(seq.tokens))
            assert kv.block_hashes == block_hashes(seq.tokens, BS, seq.cache_root)[: len(kv.block_hashes)]
            assert len(kv.block_hashes) * BS <= seq.num_computed
            if self.pool.prefix_cache:  # every full computed block is committed, under its hash
                assert len(kv.block_hashes) == seq.num_computed // BS
                for b, h in zip(kv.block_ids, kv.block_hashes, strict=False):
                    assert self.pool.blocks[b].hash in (0, h)


TestKvManagerStateMachine = KvManagerMachine.TestCase
TestKvManagerStateMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
