"""Continuous batching: which sequences run in the next step, and with how many tokens.

Each step has a token budget. Two policies plan it:

- ``fair`` (the default): decodes first (one token plus drafts each), then prefill chunks in
  order of fewest tokens left, each capped at ``prefill_chunk`` tokens, waiting sequences
  admitted in that same order. A short prompt that arrives while a long prompt prefills runs
  its whole prefill in the next step, and since no step carries more than ``prefill_chunk``
  tokens of one prompt, it never waits long for the step in flight either. A waiting prompt
  that shares the block another prompt is computing (forks of one conversation) waits a step
  and then finds it in the prefix cache, instead of computing it side by side.
- ``fcfs`` (the old policy, kept for benchmarks): running sequences in arrival order, each
  taking what the budget leaves, then admission. One long prefill takes the whole budget
  every step, so prompts that arrive after it wait for its last chunk.

Higher priority always comes first, in either policy. Cached prefixes come from the prefix
cache at admission. A decode's draft may have alternatives (``Draft.alternatives``): each is
planned as a fork, its own item whose blocks share the sequence's full blocks and start with a
copy of its partial one, so the forward pass runs it as any other sequence; the engine keeps the
branch the target follows. Forks never preempt: without blocks to allocate the alternatives are
dropped. Like a chain's draft rows, a fork may take the least recently used cached blocks; it gives
them back as free blocks after the step, so the next step's forks reuse them.
Blocks are asked for in tokens (``kv_manager.KvCacheManager``); the scheduler never sees a block
id. When blocks run out, retention holds are given up first (by the KV manager), then the
lowest-priority, latest running sequence not yet planned is preempted: its blocks are freed
and it is recomputed later (its own blocks usually still sit in the prefix cache).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loopwire.inference.config import EngineConfig
from loopwire.inference.drafter import Draft
from loopwire.inference.kv_manager import ForkSlots, KvCacheManager
from loopwire.inference.sequence import SeqStatus, Sequence


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int  # position of the first input token
    token_ids: list[int]  # inputs: a prefill chunk, or the last token followed by drafts
    draft: Draft
    sample: bool  # the chunk reaches the end of the sequence: pick the next token(s)
    draft_limit: int = 0  # the most draft tokens this step allowed (what acceptance is measured against)
    fork: ForkSlots | None = None  # an alternative draft branch's blocks (this item is a fork)
    forks: list[ScheduledSeq] = field(default_factory=list)  # a decode's forks, planned after it

    @property
    def block_table(self) -> list[int]:
        return self.seq.kv.block_ids if self.fork is None else self.fork.block_ids

    @property
    def fork_copy(self) -> tuple[int, int] | None:
        """The block whose K/V a fork copies into its first block before the step, and that block."""
        return None if self.fork is None else self.fork.copy


# Prompt tokens one sequence prefills per step under the fair policy: about where a step of a
# GPU stops being bound by reading the weights (8B on an H200: ~170 tokens), so a prompt that
# arrives mid-prefill waits for a step hardly longer than its own, for ~15% more time to prefill
# a lone 20k-token prompt (bench/bench_fairness.py). The reference engine on a CPU, where no step is
# bound by the weights, stays within 2x of idle only at ~32.
DEFAULT_PREFILL_CHUNK = 128
POLICIES = ("fair", "fcfs")


class Scheduler:
    def __init__(self, config: EngineConfig, kv: KvCacheManager, policy: str = "fair",
                 prefill_chunk: int = DEFAULT_PREFILL_CHUNK) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown prefill policy {policy!r}; choose {' or '.join(POLICIES)}")
        if prefill_chunk <= 0:
            raise ValueError("prefill_chunk must be positive")
        self.config = config
        self.kv = kv
        self.policy = policy
        self.prefill_chunk = prefill_chunk
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        # Draft tokens a sequence may verify in the next step (the engine's cost policy; None: no cap).
        self.draft_cap: int | None = None

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out of the queues and free its blocks at once."""
        if seq in self.running:
            self.running.remove(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)
        self.free(seq)

    def free(self, seq: Sequence) -> None:
        self.kv.free(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- the step plan ----------------------------------------------------------------

    def schedule(self) -> list[ScheduledSeq]:
        return self._schedule_fair() if self.policy == "fair" else self._schedule_fcfs()

    def _schedule_fair(self) -> list[ScheduledSeq]:
        budget = self.config.max_batch_tokens
        out: list[ScheduledSeq] = []
        before = self.num_preemptions
        unplanned = list(self.running)  # preemption victims come from these
        waiting = set(self.waiting)
        admitting = True
        # The next block each prefilling prompt computes. A waiting prompt that shares it waits a
        # step and then hits it in the prefix cache, instead of computing it side by side (forks).
        computing = {b for seq in self.running if (b := self.kv.next_block(seq)) is not None}
        for seq in sorted([*self.running, *self.waiting], key=_fair_key):
            if budget <= 0:
                break
            if seq.status is SeqStatus.RUNNING:
                unplanned.remove(seq)
                if seq.is_decoding:
                    draft, limit = self._draft(seq, budget - 1)
                    inputs = [seq.tokens[-1], *draft.token_ids]
                else:
                    draft, limit = Draft([]), 0
                    inputs = seq.tokens[seq.num_computed : seq.num_computed + min(budget, self.prefill_chunk)]
                if not self._make_room(seq, len(inputs), unplanned):
                    continue
                out.append(decode := self._plan(seq, inputs, draft, limit))
                budget -= len(inputs)
                budget -= self._plan_forks(decode, budget, out)
            elif seq in waiting and admitting:  # not one preempted in this step
                if self.num_preemptions > before or len(self.running) >= self.config.max_running:
                    admitting = False
                    continue
                if self.kv.shares_computing(seq, computing):
                    continue
                plan = self._admit_one(seq, min(budget, self.prefill_chunk))
                if plan is None:
                    admitting = False
                    continue
                if (b := self.kv.next_block(seq)) is not None:
                    computing.add(b)
                out.append(plan)
                budget -= len(plan.token_ids)
        return out

    def _schedule_fcfs(self) -> list[ScheduledSeq]:
        budget = self.config.max_batch_tokens
        out: list[ScheduledSeq] = []
        queue = sorted(self.running, key=Sequence.sort_key)
        before = self.num_preemptions
        while queue:
            seq = queue.pop(0)
            if budget <= 0:
                break
            if seq.is_decoding:
                draft, limit = self._draft(seq, budget - 1)
                inputs = [seq.tokens[-1], *draft.token_ids]
            else:
                draft, limit = Draft([]), 0
                inputs = seq.tokens[seq.num_computed : seq.num_computed + budget]
            if not self._make_room(seq, len(inputs), queue):
                continue
            out.append(decode := self._plan(seq, inputs, draft, limit))
            budget -= len(inputs)
            budget -= self._plan_forks(decode, budget, out)
        if self.num_preemptions == before:
            self.waiting.sort(key=Sequence.sort_key)
            while self.waiting and budget > 0 and len(self.running) < self.config.max_running:
                plan = self._admit_one(self.waiting[0], budget)
                if plan is None:
                    break
                out.append(plan)
                budget -= len(plan.token_ids)
        return out

    def _make_room(self, seq: Sequence, num_inputs: int, unplanned: list[Sequence]) -> bool:
        """Blocks for ``seq``'s inputs: holds are given up first, then the least important of the
        sequences not planned yet is preempted (``seq`` itself when it is the least important).
        False when ``seq`` was preempted."""
        while self.kv.allocate_slots(seq, num_inputs) is None:
            victim = max([*unplanned, seq], key=Sequence.sort_key)
            if victim is not seq:
                unplanned.remove(victim)
            self.preempt(victim)
            if victim is seq:
                return False
        return True

    def _admit_one(self, seq: Sequence, limit: int) -> ScheduledSeq | None:
        """Start a waiting sequence with up to ``limit`` inputs; None (holding nothing) when
        its blocks do not fit."""
        computed = self.kv.computed_blocks(seq)
        seq.record_cached(computed)
        inputs = seq.tokens[computed : computed + limit]
        if self.kv.allocate_slots(seq, len(inputs)) is None:
            self.free(seq)  # keep nothing while waiting: others may need the blocks
            return None
        self.waiting.remove(seq)
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)
        return self._plan(seq, inputs, Draft([]))

    def _plan(self, seq: Sequence, inputs: list[int], draft: Draft, draft_limit: int = 0) -> ScheduledSeq:
        reaches_end = seq.num_computed + len(inputs) - len(draft.token_ids) == len(seq.tokens)
        return ScheduledSeq(seq, seq.num_computed, inputs, draft, reaches_end, draft_limit)

    def _draft(self, seq: Sequence, budget: int) -> tuple[Draft, int]:
        """The sequence's draft for this step and the most tokens its main branch was allowed.
        Alternatives come only for unconstrained sequences with deterministic drafts, and all
        branches together (a row each for the last token of a fork) stay within the cost
        policy's cap, or ``draft_branches`` times ``k`` without one."""
        req = seq.req
        if not req.speculative or seq.draft is None:
            return Draft([]), 0
        k = min(req.num_draft_tokens or self.config.num_draft_tokens, budget, seq.max_tokens - seq.num_output - 1)
        if self.draft_cap is not None:
            k = min(k, self.draft_cap)
        if req.oracle is not None:
            k = min(k, len(req.oracle) - seq.num_output - 1)
        if k <= 0:
            return Draft([]), 0
        branches = self.config.draft_branches if seq.matcher is None else 1
        draft = seq.draft.propose(k, branches)
        if len(draft.token_ids) > k:
            draft = Draft(draft.token_ids[:k], None if draft.probs is None else draft.probs[:k], draft.alternatives)
        if draft.alternatives and draft.probs is None and draft.token_ids:
            rows = (self.draft_cap if self.draft_cap is not None else branches * k) - len(draft.token_ids)
            rows = min(rows, budget - len(draft.token_ids))
            alternatives, firsts = [], {draft.token_ids[0]}
            for alt in draft.alternatives[: branches - 1]:
                n = min(len(alt), k, rows - 1)
                if n <= 0:
                    break
                if alt[0] in firsts:  # verification needs each branch to start with its own token
                    continue
                firsts.add(alt[0])
                alternatives.append(alt[:n])
                rows -= n + 1
            draft = Draft(draft.token_ids, alternatives=alternatives)
        elif draft.alternatives:
            draft = Draft(draft.token_ids, draft.probs)
        return draft, k

    def _plan_forks(self, plan: ScheduledSeq, budget: int, out: list[ScheduledSeq]) -> int:
        """Plan a fork per alternative of ``plan``'s draft while blocks and ``budget`` last;
        the tokens they take."""
        seq, used = plan.seq, 0
        start = plan.start  # the position of the sequence's last token, computed in this step
        for alt in plan.draft.alternatives:
            if used + 1 + len(alt) > budget:
                break
            slots = self.kv.allocate_fork(seq, start, len(alt))
            if slots is None:
                break
            fork = ScheduledSeq(seq, start, [seq.tokens[-1], *alt], Draft(alt), True, fork=slots)
            plan.forks.append(fork)
            out.append(fork)
            used += 1 + len(alt)
        if len(plan.forks) < len(plan.draft.alternatives):
            plan.draft = Draft(plan.draft.token_ids, alternatives=[f.draft.token_ids for f in plan.forks])
        return used

    def preempt(self, seq: Sequence) -> None:
        """Recompute later: free the blocks now, keep the tokens."""
        if seq in self.running:
            self.running.remove(seq)
        self.free(seq)
        seq.status = SeqStatus.WAITING
        self.num_preemptions += 1
        self.waiting.append(seq)


def _fair_key(seq: Sequence) -> tuple[int, bool, int, int]:
    """Higher priority first; within a priority decodes, then the prefill with fewest tokens left."""
    return (-seq.req.priority, not seq.is_decoding, seq.remaining, seq.order)
