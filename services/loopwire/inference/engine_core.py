"""The synchronous heart shared by the reference and simulated engines: a step loop over
the scheduler, the KV cache manager, a drafter and an executor (the forward pass).

``step()`` is three calls: ``schedule`` plans a batch (the scheduler takes blocks from the KV
cache manager in tokens), ``execute`` runs its forward pass, and ``update_from_output`` turns
logits (or the replay oracle) into tokens, keeps the draft branch the target followed, commits
computed blocks to the prefix cache, and returns what each request gained. Nothing here blocks
or sleeps, so tests can drive it step by step and the async runner (``engine.py``) can run it in
a worker thread.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from loopwire.inference.clock import Clock
from loopwire.inference.config import EngineConfig
from loopwire.inference.constraint import batch_masks
from loopwire.inference.cost_model import CostModel
from loopwire.inference.draft_length import DraftLengthPolicy, StepPricer
from loopwire.inference.drafter import Drafter, PromptLookupDrafter
from loopwire.inference.kv_cache import BlockManager
from loopwire.inference.kv_host_tier import HostTier
from loopwire.inference.kv_manager import KvCacheManager
from loopwire.inference.kv_store import KvStore
from loopwire.inference.logprobs import TokenLogprobs, certain, token_logprobs
from loopwire.inference.rate_window import RateWindow
from loopwire.inference.sampling import NoAllowedToken, verify, verify_branches, verify_masked, verify_oracle
from loopwire.inference.scheduler import ScheduledSeq, Scheduler
from loopwire.inference.sequence import (
    Finished,
    FinishReason,
    GenerationRequest,
    RequestOutput,
    SeqStatus,
    Sequence,
    Timings,
)
from loopwire.inference.step_cost import MeasuredStepCost
from loopwire.inference.suffix_tree import SuffixDrafter

# Window of the "recent" throughput reported by status (engine-clock seconds).
_RATE_WINDOW_S = 10.0


class Executor(Protocol):
    """Runs one step's forward pass."""

    kv_store: KvStore | None

    def execute(self, batch: list[ScheduledSeq]) -> list[np.ndarray | None]:
        """Per scheduled sequence: logits of its ``1 + len(draft)`` last positions when it
        samples (None when the executor has no logits: the simulated engine), else None."""
        ...

    def synthetic_token(self, seq: Sequence, position: int) -> int:
        """The token at ``position`` when there are neither logits nor an oracle."""
        ...


@dataclass
class EngineStats:
    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_free: int
    kv_blocks_total: int
    kv_host_blocks_used: int
    kv_host_blocks_total: int
    block_size: int
    recent_tokens_per_second: float
    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    prefix_cache_queried_tokens: int
    prefix_cache_hit_tokens: int
    prefix_cache_host_hit_tokens: int
    num_preemptions: int
    steps: int


class EngineCore:
    def __init__(self, config: EngineConfig, executor: Executor, clock: Clock, drafter: Drafter | None = None) -> None:
        self.config = config
        self.executor = executor
        self.clock = clock
        self.drafter = drafter or make_drafter(config)
        store = executor.kv_store
        host = HostTier(config.host_kv_bytes, host_block_bytes(config, store)) if config.host_kv_bytes else None
        self.blocks = BlockManager(config.num_kv_blocks, config.block_size, config.prefix_cache,
                                   config.eviction_policy, host, store)
        self.kv = KvCacheManager(self.blocks)
        self.scheduler = Scheduler(config, self.kv, config.prefill_policy, config.prefill_chunk_tokens)
        # Draft length by the roofline where the executor prices its steps (the simulated engine),
        # else by the executor's own measured steps (the reference engine).
        if config.draft_length not in ("fixed", "cost"):
            raise ValueError(f"unknown draft_length {config.draft_length!r}; choose fixed or cost")
        if config.draft_branches < 1:
            raise ValueError(f"draft_branches must be at least 1, not {config.draft_branches}")
        cost = getattr(executor, "cost", None)
        self.step_cost: MeasuredStepCost | None = None
        self.draft_policy: DraftLengthPolicy | None = None
        if config.draft_length == "cost":
            pricer: StepPricer = cost if isinstance(cost, CostModel) else MeasuredStepCost()
            self.step_cost = pricer if isinstance(pricer, MeasuredStepCost) else None
            self.draft_policy = DraftLengthPolicy(pricer, config.num_draft_tokens)
        self.seqs: dict[str, Sequence] = {}
        self.steps = 0
        self._done: list[RequestOutput] = []
        self._rates = RateWindow(_RATE_WINDOW_S)  # prefill and decode tokens of the recent steps

    # -- requests ---------------------------------------------------------------------

    def add(self, req: GenerationRequest) -> None:
        """Queue a validated request (see ``validate_request``)."""
        if req.request_id in self.seqs:
            raise ValueError(f"request_id {req.request_id!r} is already running")
        max_tokens = len(req.oracle) if req.oracle is not None else req.max_tokens
        max_tokens = min(max_tokens, req.max_tokens)
        draft = self.drafter.open(req.prompt, req.session_id, req.cache_salt, req.draft_base) if req.speculative else None
        seq = Sequence(req, self.clock.now(), draft, max_tokens)
        self.seqs[req.request_id] = seq
        self.scheduler.add(seq)

    def cancel(self, request_id: str) -> bool:
        """Stop a request now; its blocks return to the pool before this returns."""
        seq = self.seqs.get(request_id)
        if seq is None:
            return False
        self.scheduler.remove(seq)
        self._finish(seq, FinishReason.CANCELLED, retain=False)
        return True

    def has_work(self) -> bool:
        return self.scheduler.has_work() or bool(self._done)

    # -- the step ---------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        batch = self.schedule()
        results = self.execute(batch)
        return self.update_from_output(batch, results)

    def schedule(self) -> list[ScheduledSeq]:
        """Plan the next batch: holds and hints that ran out end, the draft cap follows the
        batch, and the host tier's copies the plan made are priced."""
        self.blocks.expire_retentions(self.clock.now())
        if self.draft_policy is not None:
            self.scheduler.draft_cap = self.draft_policy.cap(
                [len(s.tokens) for s in self.scheduler.running if s.is_decoding and s.draft is not None])
        batch = self.scheduler.schedule()
        onloaded, offloaded = self.blocks.take_transfers()
        if onloaded or offloaded:
            transfer = getattr(self.executor, "transfer", None)  # the simulated engine prices the copies
            if transfer is not None:
                transfer(onloaded, offloaded)
        now = self.clock.now()
        for item in batch:
            if item.seq.first_scheduled is None:
                item.seq.first_scheduled = now
        return batch

    def execute(self, batch: list[ScheduledSeq]) -> list[np.ndarray | None]:
        """The batch's forward pass (nothing for an empty batch), its CPU time observed for the
        draft-length policy."""
        if not batch:
            return []
        started = time.thread_time()  # the step runs in this thread; CPU time ignores other load
        results = self.executor.execute(batch)
        if self.step_cost is not None:
            self.step_cost.observe([(i.start, len(i.token_ids)) for i in batch],
                                   sum(len(i.token_ids) if i.seq.is_decoding else 1 for i in batch if i.sample),
                                   time.thread_time() - started)
        self.steps += 1
        return results

    def update_from_output(self, batch: list[ScheduledSeq], results: list[np.ndarray | None]) -> list[RequestOutput]:
        """Each sequence's gain from the step, then the requests that finished (those cancelled
        since the last step first)."""
        outputs, self._done = self._done, []
        if not batch:
            return outputs
        now = self.clock.now()
        prefill_tokens = sum(len(i.token_ids) for i in batch if i.fork is None and not i.seq.is_decoding)
        self._rates.add(now, prefill_tokens, sum(len(i.token_ids) for i in batch) - prefill_tokens)
        masks = self._first_masks(batch, results)
        fork_logits = {id(item): logits for item, logits in zip(batch, results, strict=True) if item.fork is not None}
        for item, logits in zip(batch, results, strict=True):
            if item.fork is not None:  # verified with its sequence's own item
                continue
            item.seq.num_computed = item.start + len(item.token_ids)
            if not item.sample:
                self.kv.commit(item.seq, self.clock.now())
                outputs.append(RequestOutput(item.seq.request_id, [], prefilled=item.seq.num_computed))
            elif item.seq.req.prefill_only:
                self._mark_prefilled(item.seq, now)
                self.kv.commit(item.seq, self.clock.now())
                self._finish(item.seq, FinishReason.PREFILLED, retain=True)
            else:
                self._mark_prefilled(item.seq, now)
                if (out := self._sample(item, logits, masks.get(item.seq.request_id), fork_logits, now)) is not None:
                    outputs.append(out)
        outputs.extend(self._done)
        self._done = []
        return outputs

    @staticmethod
    def _mark_prefilled(seq: Sequence, now: float) -> None:
        if seq.prefill_done is None:
            seq.prefill_done = now

    def _sample(self, item: ScheduledSeq, logits: np.ndarray | None, mask: np.ndarray | None,
                fork_logits: dict[int, np.ndarray | None], now: float) -> RequestOutput | None:
        """Verify the item's draft (and its forks'), append what the target accepted, keep the
        chosen branch's blocks; the tokens it emitted, None when its grammar allowed none."""
        seq = item.seq
        try:
            new, chosen = self._pick(item, logits, mask, fork_logits)
        except NoAllowedToken as e:
            self.kv.keep_branch(seq, [f.fork for f in item.forks if f.fork is not None], None)
            self.kv.commit(seq, self.clock.now())
            self._finish(seq, FinishReason.CONSTRAINT_FAILED, retain=False, error=str(e))
            return None
        if chosen is not item:
            logits = fork_logits[id(chosen)]
        self.kv.keep_branch(seq, [f.fork for f in item.forks if f.fork is not None], chosen.fork)
        accepted = len(new) - 1
        if self._note_drafts(item, chosen, accepted):  # K/V of rejected drafts are garbage: not computed
            seq.num_computed = item.start + 1 + accepted
        emitted, reason = self._append(seq, new)
        if emitted and seq.first_token is None:
            seq.first_token = now
        self.kv.commit(seq, self.clock.now())
        self.kv.trim(seq)
        output = RequestOutput(seq.request_id, emitted, logprobs=_logprobs(seq, emitted, logits))
        if reason is not None:
            self._finish(seq, reason, retain=True)
        return output

    def _note_drafts(self, item: ScheduledSeq, chosen: ScheduledSeq, accepted: int) -> int:
        """Count a verification step in the request's usage and the draft policy's statistics;
        the draft tokens it proposed over all branches."""
        seq = item.seq
        if self.draft_policy is not None and item.draft_limit:
            self.draft_policy.stats.observe(item.draft_limit, len(item.draft.token_ids),
                                            accepted if chosen is item else 0)
        proposed = len(item.draft.token_ids) + sum(len(f.draft.token_ids) for f in item.forks)
        if proposed:
            seq.usage.draft_tokens_proposed += proposed
            seq.usage.draft_tokens_accepted += accepted
        seq.usage.verification_steps += 1
        return proposed

    def _first_masks(self, batch: list[ScheduledSeq], results: list[np.ndarray | None]) -> dict[str, np.ndarray]:
        """The grammar masks of this step's first sampled position, for every constrained
        sequence together (llguidance computes them in parallel)."""
        todo = [(item.seq, logits) for item, logits in zip(batch, results, strict=True)
                if item.sample and logits is not None and item.seq.matcher is not None
                and item.seq.req.oracle is None and not item.seq.req.prefill_only]
        if not todo:
            return {}
        masks = batch_masks([seq.matcher for seq, _ in todo], todo[0][1].shape[-1])  # type: ignore[misc]
        return {seq.request_id: mask for (seq, _), mask in zip(todo, masks, strict=True)}

    def _pick(self, item: ScheduledSeq, logits: np.ndarray | None, mask: np.ndarray | None,
              fork_logits: dict[int, np.ndarray | None]) -> tuple[list[int], ScheduledSeq]:
        """The step's new tokens and the item (the sequence's own or a fork) whose branch they follow."""
        seq = item.seq
        branches = [item, *item.forks]
        oracle = seq.req.oracle
        if oracle is not None or logits is None:
            base = len(seq.tokens)
            longest = max(len(b.draft.token_ids) for b in branches)
            targets = (oracle[seq.num_output : seq.num_output + longest + 1] if oracle is not None
                       else [self.executor.synthetic_token(seq, base + i) for i in range(longest + 1)])
            chosen = next((b for b in branches if b.draft.token_ids[:1] == targets[:1]), item)
            return verify_oracle(chosen.draft.token_ids, targets[: len(chosen.draft.token_ids) + 1]), chosen
        if mask is not None and seq.matcher is not None:  # constrained sequences have no forks
            return verify_masked(logits, item.draft, seq.req.sampling, seq.rng, mask, seq.matcher), item
        if not item.forks:
            return verify(logits, item.draft, seq.req.sampling, seq.rng), item
        rows = [logits]
        for fork in item.forks:
            fork_rows = fork_logits[id(fork)]
            assert fork_rows is not None  # an executor with logits has them for every item
            rows.append(fork_rows)
        new, j = verify_branches(rows, [b.draft.token_ids for b in branches], seq.req.sampling, seq.rng)
        return new, branches[j]

    def _append(self, seq: Sequence, new: Seq[int]) -> tuple[list[int], FinishReason | None]:
        emitted: list[int] = []
        reason = None
        for t in new:
            seq.tokens.append(t)
            emitted.append(t)
            if t in seq.stop_ids:
                reason = FinishReason.STOP
                break
            if seq.num_output >= seq.max_tokens:
                oracle = seq.req.oracle
                ends_with_stop = oracle is not None and len(oracle) == seq.num_output and oracle[-1] in seq.stop_ids
                reason = FinishReason.STOP if ends_with_stop else FinishReason.LENGTH
                break
        seq.usage.output_tokens = seq.num_output
        if seq.draft is not None:
            seq.draft.extend(emitted)
        return emitted, reason

    def _finish(self, seq: Sequence, reason: FinishReason, *, retain: bool, error: str = "") -> None:
        now = self.clock.now()
        if seq in self.scheduler.running:
            self.scheduler.running.remove(seq)
        if retain and seq.req.retention_seconds > 0:
            self.kv.retain(seq, seq.req.session_id or seq.request_id, now + seq.req.retention_seconds)
        hashes = seq.kv.block_hashes
        if seq.req.park_key and reason is not FinishReason.CANCELLED:
            self.kv.park(seq, seq.req.park_key)  # the stream's next turn takes them
        if seq.draft is not None:
            seq.draft.finish()
        self.kv.free(seq)
        seq.status = SeqStatus.FINISHED
        del self.seqs[seq.request_id]
        first = seq.first_scheduled if seq.first_scheduled is not None else now
        prefill_done = seq.prefill_done if seq.prefill_done is not None else now
        first_token = seq.first_token if seq.first_token is not None else now
        timings = Timings(
            queue_us=_us(first - seq.arrival),
            prefill_us=_us(prefill_done - first),
            ttft_us=_us(first_token - seq.arrival),
            decode_us=_us(now - first_token),
        )
        finished = Finished(reason, seq.usage, timings, seq.tokens, hashes, error=error,
                            draft=None if seq.draft is None else weakref.ref(seq.draft))
        self._done.append(RequestOutput(seq.request_id, [], finished))

    # -- status -----------------------------------------------------------------------

    def stats(self) -> EngineStats:
        now = self.clock.now()
        span, prefill, decode = self._rates.totals(now)

        def rate(n: int) -> float:
            return n / span if span else 0.0

        return EngineStats(
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            kv_blocks_used=self.blocks.num_used,
            kv_blocks_free=self.blocks.num_free,
            kv_blocks_total=self.blocks.num_blocks,
            kv_host_blocks_used=self.blocks.num_host_blocks,
            kv_host_blocks_total=self.blocks.host_capacity_blocks,
            block_size=self.blocks.block_size,
            recent_tokens_per_second=rate(prefill + decode),
            prefill_tokens_per_second=rate(prefill),
            decode_tokens_per_second=rate(decode),
            prefix_cache_queried_tokens=self.blocks.queried_tokens,
            prefix_cache_hit_tokens=self.blocks.hit_tokens,
            prefix_cache_host_hit_tokens=self.blocks.host_hit_tokens,
            num_preemptions=self.scheduler.num_preemptions,
            steps=self.steps,
        )


def host_block_bytes(config: EngineConfig, store: KvStore | None) -> int:
    """Bytes of one KV block: the store's tensors, or the model's BF16 K and V when modelled."""
    if store is not None:
        return int(np.prod(store.block_shape)) * 2 * np.dtype(store.dtype).itemsize
    m = config.model
    return 2 * m.num_hidden_layers * m.num_key_value_heads * m.head_dim * 2 * config.block_size


def make_drafter(config: EngineConfig) -> Drafter:
    if config.drafter == "suffix":
        return SuffixDrafter()
    if config.drafter == "prompt_lookup":
        return PromptLookupDrafter(config.max_ngram, config.min_ngram)
    raise ValueError(f"unknown drafter {config.drafter!r}; choose suffix or prompt_lookup")


def _logprobs(seq: Sequence, emitted: list[int], logits: np.ndarray | None) -> list[TokenLogprobs] | None:
    """The emitted tokens' log-probabilities when asked: token i was picked from logits row i (a
    verification step's rows follow its accepted drafts), so coalesced or speculative output
    lines up with its tokens; no logits (the simulated engine): probability 1."""
    k = seq.req.top_logprobs
    if k is None:
        return None
    if logits is None:
        return [certain(t, k) for t in emitted]
    return [token_logprobs(logits[i], t, k) for i, t in enumerate(emitted)]


def _us(seconds: float) -> int:
    return max(0, int(round(seconds * 1e6)))
