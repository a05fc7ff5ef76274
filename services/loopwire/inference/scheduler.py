"""Continuous batching: which sequences run in the next step, and with how many tokens.

Each step has a token budget. Running sequences go first, in priority order: a decoding
sequence costs one token plus its drafts (verified in the same pass), a prefilling one takes
a chunk of what the budget leaves (chunked prefill, so long prompts never stall decodes).
Then waiting sequences are admitted, their cached prefix taken from the prefix cache. When
blocks run out, retention holds are given up first, then the lowest-priority, latest
running sequence is preempted: its blocks are freed and it is recomputed later (its own
blocks usually still sit in the prefix cache, so recompute is cheap).
"""

from __future__ import annotations

from dataclasses import dataclass

from loopwire.inference.config import EngineConfig
from loopwire.inference.drafter import Draft
from loopwire.inference.kv_cache import BlockManager
from loopwire.inference.sequence import SeqStatus, Sequence


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int  # position of the first input token
    token_ids: list[int]  # inputs: a prefill chunk, or the last token followed by drafts
    draft: Draft
    sample: bool  # the chunk reaches the end of the sequence: pick the next token(s)


class Scheduler:
    def __init__(self, config: EngineConfig, blocks: BlockManager) -> None:
        self.config = config
        self.blocks = blocks
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.num_preemptions = 0

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
        self.blocks.release(seq.block_ids)
        seq.block_ids = []
        seq.block_hashes = []
        seq.num_prioritized = 0
        seq.num_computed = 0

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- the step plan ----------------------------------------------------------------

    def schedule(self) -> list[ScheduledSeq]:
        budget = self.config.max_batch_tokens
        out: list[ScheduledSeq] = []
        queue = sorted(self.running, key=Sequence.sort_key)
        preempted = False
        while queue:
            seq = queue.pop(0)
            if budget <= 0:
                break
            if seq.is_decoding:
                draft = self._draft(seq, budget - 1)
                inputs = [seq.tokens[-1], *draft.token_ids]
            else:
                draft = Draft([])
                inputs = seq.tokens[seq.num_computed : seq.num_computed + budget]
            while not self._reserve(seq, len(inputs)):
                if self.blocks.drop_oldest_retention():
                    continue
                victim = queue.pop() if queue else seq
                self.preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.status is not SeqStatus.RUNNING:
                continue
            out.append(self._plan(seq, inputs, draft))
            budget -= len(inputs)
        if not preempted:
            budget = self._admit(out, budget)
        return out

    def _admit(self, out: list[ScheduledSeq], budget: int) -> int:
        self.waiting.sort(key=Sequence.sort_key)
        while self.waiting and budget > 0 and len(self.running) < self.config.max_running:
            seq = self.waiting[0]
            if not seq.block_ids:
                seq.block_ids, seq.block_hashes = self.blocks.match_prefix(seq.tokens, seq.cache_root)
                seq.num_computed = len(seq.block_ids) * self.blocks.block_size
                if not seq.cached_recorded:
                    seq.usage.cached_input_tokens = min(seq.num_computed, seq.prompt_len)
                    seq.cached_recorded = True
            inputs = seq.tokens[seq.num_computed : seq.num_computed + budget]
            if not self._reserve(seq, len(inputs)):
                while self.blocks.drop_oldest_retention():
                    if self._reserve(seq, len(inputs)):
                        break
                else:
                    self.free(seq)  # keep nothing while waiting: others may need the blocks
                    break
            self.waiting.pop(0)
            seq.status = SeqStatus.RUNNING
            self.running.append(seq)
            out.append(self._plan(seq, inputs, Draft([])))
            budget -= len(inputs)
        return budget

    def _plan(self, seq: Sequence, inputs: list[int], draft: Draft) -> ScheduledSeq:
        reaches_end = seq.num_computed + len(inputs) - len(draft.token_ids) == len(seq.tokens)
        return ScheduledSeq(seq, seq.num_computed, inputs, draft, reaches_end)

    def _draft(self, seq: Sequence, budget: int) -> Draft:
        req = seq.req
        if not req.speculative or seq.draft is None:
            return Draft([])
        k = min(req.num_draft_tokens or self.config.num_draft_tokens, budget, seq.max_tokens - seq.num_output - 1)
        if req.oracle is not None:
            k = min(k, len(req.oracle) - seq.num_output - 1)
        if k <= 0:
            return Draft([])
        draft = seq.draft.propose(k)
        if len(draft.token_ids) > k:
            draft = Draft(draft.token_ids[:k], None if draft.probs is None else draft.probs[:k])
        return draft

    def _reserve(self, seq: Sequence, num_inputs: int) -> bool:
        """Make sure ``seq`` has blocks for its next ``num_inputs`` positions."""
        total = seq.num_computed + num_inputs
        need = -(-total // self.blocks.block_size) - len(seq.block_ids)
        if need <= 0:
            return True
        got = self.blocks.allocate(need)
        if got is None:
            return False
        seq.block_ids += got
        return True

    def preempt(self, seq: Sequence) -> None:
        """Recompute later: free the blocks now, keep the tokens."""
        if seq in self.running:
            self.running.remove(seq)
        self.free(seq)
        seq.status = SeqStatus.WAITING
        self.num_preemptions += 1
        self.waiting.append(seq)
