"""The synchronous heart shared by the reference and simulated engines: a step loop over
the scheduler, the KV block manager, a drafter and an executor (the forward pass).

``step()`` plans a batch, runs it, turns logits (or the replay oracle) into tokens, and
returns what each request gained. Nothing here blocks or sleeps, so tests can drive it
step by step and the async runner (``engine.py``) can run it in a worker thread.
"""

from __future__ import annotations

import math
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
from loopwire.inference.kv_cache import BlockManager, KvStore
from loopwire.inference.kv_host_tier import HostTier
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
        self.scheduler = Scheduler(config, self.blocks, config.prefill_policy, config.prefill_chunk_tokens)
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
        self.blocks.expire_retentions(self.clock.now())
        outputs, self._done = self._done, []
        if self.draft_policy is not None:
            self.scheduler.draft_cap = self.draft_policy.cap(
                [len(s.tokens) for s in self.scheduler.running if s.is_decoding and s.draft is not None])
        batch = self.scheduler.schedule()
        onloaded, offloaded = self.blocks.take_transfers()
        if onloaded or offloaded:
            transfer = getattr(self.executor, "transfer", None)  # the simulated engine prices the copies
            if transfer is not None:
                transfer(onloaded, offloaded)
        if not batch:
            return outputs
        now = self.clock.now()
        for item in batch:
            if item.seq.first_scheduled is None:
                item.seq.first_scheduled = now
        started = time.thread_time()  # the step runs in this thread; CPU time ignores other load
        results = self.executor.execute(batch)
        if self.step_cost is not None:
            self.step_cost.observe([(i.start, len(i.token_ids)) for i in batch],
                                   sum(len(i.token_ids) if i.seq.is_decoding else 1 for i in batch if i.sample),
                                   time.thread_time() - started)
        self.steps += 1
        now = self.clock.now()
        masks = self._first_masks(batch, results)
        prefill_tokens = decode_tokens = 0
        fork_logits = {id(item): logits for item, logits in zip(batch, results, strict=True)
                       if item.fork_blocks is not None}
        for item, logits in zip(batch, results, strict=True):
            seq = item.seq
            if item.fork_blocks is not None:  # verified with its sequence's own item
                decode_tokens += len(item.token_ids)
                continue
            if seq.is_decoding:
                decode_tokens += len(item.token_ids)
            else:
                prefill_tokens += len(item.token_ids)
            seq.num_computed = item.start + len(item.token_ids)
            if not item.sample:
                self._commit(seq)
                outputs.append(RequestOutput(seq.request_id, [], prefilled=seq.num_computed))
                continue
            if seq.prefill_done is None:
                seq.prefill_done = now
            if seq.req.prefill_only:
                self._commit(seq)
                self._finish(seq, FinishReason.PREFILLED, retain=True)
                continue
            try:
                new, chosen = self._pick(item, logits, masks.get(seq.request_id), fork_logits)
            except NoAllowedToken as e:
                self._adopt(item, item)
                self._commit(seq)
                self._finish(seq, FinishReason.CONSTRAINT_FAILED, retain=False, error=str(e))
                continue
            if chosen is not item:
                logits = fork_logits[id(chosen)]
            self._adopt(item, chosen)
            accepted = len(new) - 1
            if self.draft_policy is not None and item.draft_limit:
                self.draft_policy.stats.observe(item.draft_limit, len(item.draft.token_ids),
                                                accepted if chosen is item else 0)
            proposed = len(item.draft.token_ids) + sum(len(f.draft.token_ids) for f in item.forks)
            if proposed:
                seq.usage.draft_tokens_proposed += proposed
                seq.usage.draft_tokens_accepted += accepted
            seq.usage.verification_steps += 1
            if proposed:  # K/V of rejected drafts are garbage: not computed
                seq.num_computed = item.start + 1 + accepted
            emitted, reason = self._append(seq, new)
            if emitted and seq.first_token is None:
                seq.first_token = now
            self._commit(seq)
            self._trim(seq)
            outputs.append(RequestOutput(seq.request_id, emitted, logprobs=_logprobs(seq, emitted, logits)))
            if reason is not None:
                self._finish(seq, reason, retain=True)
        self._rates.add(now, prefill_tokens, decode_tokens)
        outputs.extend(self._done)
        self._done = []
        return outputs

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

    def _adopt(self, item: ScheduledSeq, chosen: ScheduledSeq) -> None:
        """Keep the chosen branch's blocks: a fork's replace the sequence's from its partial block
        on; the other branches' blocks go back to the pool."""
        if not item.forks:
            return
        seq = item.seq
        shared = item.start // self.blocks.block_size
        for fork in item.forks:
            assert fork.fork_blocks is not None
            if fork is chosen:
                self.blocks.release(seq.block_ids[shared:])
                seq.block_ids = fork.fork_blocks
            else:
                self.blocks.release(fork.fork_blocks[shared:])

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

    def _commit(self, seq: Sequence) -> None:
        """Enter the sequence's full, computed blocks into the prefix cache."""
        bs = self.blocks.block_size
        while (len(seq.block_hashes) + 1) * bs <= seq.num_computed:
            i = len(seq.block_hashes)
            parent = seq.block_hashes[-1] if seq.block_hashes else seq.cache_root
            seq.block_hashes.append(self.blocks.commit(seq.block_ids[i], parent, seq.tokens[i * bs : (i + 1) * bs]))
        policy = seq.req.retention
        if policy is None:
            return
        now = self.clock.now()
        for i in range(seq.num_prioritized, len(seq.block_hashes)):  # hits from the cache included
            got = policy.block_priority(i * bs, (i + 1) * bs, seq.prompt_len)
            if got is not None:
                priority, duration = got
                self.blocks.set_priority(seq.block_ids[i], priority, math.inf if duration is None else now + duration)
        seq.num_prioritized = len(seq.block_hashes)
    def _trim(self, seq: Sequence) -> None:
        """Give back blocks reserved for drafts that were rejected."""
        keep = -(-len(seq.tokens) // self.blocks.block_size)
        if len(seq.block_ids) > keep:
            self.blocks.release(seq.block_ids[keep:])
            del seq.block_ids[keep:]

    def _finish(self, seq: Sequence, reason: FinishReason, *, retain: bool, error: str = "") -> None:
        now = self.clock.now()
        if seq in self.scheduler.running:
            self.scheduler.running.remove(seq)
        if retain and seq.req.retention_seconds > 0 and seq.block_ids:
            key = seq.req.session_id or seq.request_id
            self.blocks.retain(key, seq.block_ids, now + seq.req.retention_seconds)
        hashes = seq.block_hashes
        if seq.req.park_key and reason is not FinishReason.CANCELLED:
            self.blocks.park(seq.req.park_key, seq.block_ids, hashes)  # the stream's next turn takes them
            seq.block_ids = []
        if seq.draft is not None:
            seq.draft.finish()
        self.scheduler.free(seq)
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
