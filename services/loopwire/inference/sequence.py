"""One generation inside an engine: what was asked, what is held, what it cost."""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from loopwire.common.hashing import block_hashes, salted_root
from loopwire.inference.constraint import Grammar
from loopwire.inference.drafter import DraftContext
from loopwire.inference.kv_host_tier import DEFAULT_PRIORITY
from loopwire.inference.logprobs import TokenLogprobs
from loopwire.inference.sampling import SamplingSettings

_arrivals = itertools.count()


class FinishReason(Enum):
    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    PREFILLED = "prefilled"  # a prefill-only request: its KV is ready to pull
    TIMEOUT = "timeout"  # the engine gave up on it (TensorRT-LLM's request timeout)
    CONSTRAINT_FAILED = "constraint_failed"  # its grammar allowed no next token (Finished.error says where)
    NOT_FINISHED = "not_finished"  # the engine ended the stream without a reason


@dataclass(frozen=True)
class TokenRangeRetention:
    """Retention priority (0-100) of the prompt tokens ``[start, end)`` (``end`` None: the whole
    rest of the prompt), for ``duration_s`` seconds (None: as long as they stay cached)."""

    start: int
    end: int | None
    priority: int
    duration_s: float | None = None


@dataclass(frozen=True)
class RetentionPolicy:
    """TensorRT-LLM's ``KvCacheRetentionConfig``: priorities per prompt token range and one for
    the generated tokens; eviction takes the lowest priority first (default 35)."""

    token_ranges: tuple[TokenRangeRetention, ...] = ()
    decode_priority: int = DEFAULT_PRIORITY
    decode_duration_s: float | None = None

    def block_priority(self, start: int, end: int, prompt_len: int) -> tuple[int, float | None] | None:
        """(priority, duration) of the block holding tokens ``[start, end)``: the highest priority
        of what it overlaps; None when nothing sets one."""
        found: list[tuple[int, float | None]] = []
        for r in self.token_ranges:
            r_end = prompt_len if r.end is None else min(r.end, prompt_len)
            if r.start < end and start < r_end:
                found.append((r.priority, r.duration_s))
        if end > prompt_len:
            found.append((self.decode_priority, self.decode_duration_s))
        return max(found, key=lambda f: f[0]) if found else None


@dataclass
class GenerationRequest:
    request_id: str
    prompt: list[int]
    max_tokens: int
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    stop_token_ids: tuple[int, ...] = ()
    speculative: bool = True
    num_draft_tokens: int = 0  # 0: the engine's default
    # Replay: the exact tokens to emit (the recorded assistant turn, ending with the stop token).
    oracle: list[int] | None = None
    priority: int = 0
    session_id: str = ""
    retention_seconds: float = 0.0
    # Compute the prompt's KV and stop (Prefill for disaggregation); held for retention_seconds.
    prefill_only: bool = False
    # Prefix-cache namespace (a tenant): see salted_root.
    cache_salt: str = ""
    # Eviction priorities of this request's blocks (None: the default for all).
    retention: RetentionPolicy | None = None
    # Decode a prompt another replica prefilled: that engine's transfer state (trtllm:
    # DisaggregatedParams of the context-only request, see trtllm_requests.encode_disagg_state).
    disagg_state: bytes = b""
    # The grammar the output must match (constraint.Grammar; None: free text).
    grammar: Grammar | None = None
    # Chained hashes of the prompt's full blocks from the cache salt's root, when the caller
    # holds them (a stream's append: the held ones plus the new); None: the engine hashes it.
    block_hashes: list[int] | None = None
    # When it finishes, park its blocks under this key for the next request with the same key
    # (a Generate stream's next turn), which takes them over instead of matching them again.
    park_key: str = ""
    # The engine may append the output to ``prompt`` itself instead of a copy: the caller gives
    # the list away (a stream's turn, so the context is never copied).
    hand_over_prompt: bool = False
    # Log-probabilities wanted: None, none; k, each output token's with its k most likely tokens.
    top_logprobs: int | None = None
    # The draft context of the request whose finished sequence the prompt starts with (a stream's
    # append; ``Finished.draft``): the drafter goes on from it without comparing that prefix.
    draft_base: weakref.ref[DraftContext] | None = None


@dataclass
class KvAllocation:
    """The KV blocks a sequence holds, owned by ``kv_manager.KvCacheManager``: its block table in
    position order and the prefix-cache hashes of the first, committed ones."""

    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # of block_ids[:len(block_hashes)]
    num_prioritized: int = 0  # blocks whose retention priority is set


@dataclass
class Usage:
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    draft_tokens_proposed: int = 0
    draft_tokens_accepted: int = 0
    verification_steps: int = 0


@dataclass
class Timings:
    queue_us: int = 0
    prefill_us: int = 0
    ttft_us: int = 0
    decode_us: int = 0


@dataclass
class Finished:
    reason: FinishReason
    usage: Usage
    timings: Timings
    # Every token the sequence holds now (prompt + output): the base of the next append (with
    # hand_over_prompt, the request's prompt list itself, the output appended).
    token_ids: list[int]
    # Prefix-cache hashes of its full, computed blocks, chained from the cache salt's root (what
    # Prefill hands to PullKv).
    block_hashes: list[int]
    # A prefill on an engine with its own KV transport: what the decode replica needs (trtllm).
    disagg_state: bytes = b""
    error: str = ""  # why a CONSTRAINT_FAILED generation ended
    # Its draft context, weakly (what the drafter keeps lives on): the next append's draft_base.
    draft: weakref.ref[DraftContext] | None = None


@dataclass
class RequestOutput:
    request_id: str
    token_ids: list[int]
    finished: Finished | None = None
    # Prompt tokens with K/V so far, after a prefill chunk that did not end the prompt (0: none).
    prefilled: int = 0
    # One per token_ids when the request asked for log-probabilities (top_logprobs), else None.
    logprobs: list[TokenLogprobs] | None = None


class SeqStatus(Enum):
    WAITING = 1
    RUNNING = 2
    FINISHED = 3


class Sequence:
    def __init__(self, req: GenerationRequest, now: float, draft: DraftContext | None, max_tokens: int) -> None:
        self.req = req
        self.request_id = req.request_id
        self.tokens: list[int] = req.prompt if req.hand_over_prompt else list(req.prompt)
        self.cache_root = salted_root(req.cache_salt)
        self._hashes = req.block_hashes if req.block_hashes is not None else []  # full blocks of tokens
        self.prompt_len = len(req.prompt)
        self.max_tokens = max_tokens
        self.stop_ids = frozenset(req.stop_token_ids)
        self.num_computed = 0  # tokens whose K/V are in this sequence's blocks
        self.kv = KvAllocation()
        self.status = SeqStatus.WAITING
        self.order = next(_arrivals)
        self.draft = draft
        self.rng = np.random.default_rng(req.sampling.seed)
        self.usage = Usage(input_tokens=self.prompt_len)
        self.cached_recorded = False
        self.arrival = now
        self.first_scheduled: float | None = None
        self.prefill_done: float | None = None
        self.first_token: float | None = None
        self.matcher = req.grammar.matcher() if req.grammar is not None else None

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def remaining(self) -> int:
        """Tokens still to run through the model before the next one can be sampled."""
        return len(self.tokens) - self.num_computed

    @property
    def is_decoding(self) -> bool:
        return self.remaining == 1 and self.num_output > 0

    def prefix_hashes(self, block_size: int) -> list[int]:
        """Chained hashes of the full blocks before the last token, hashing only the tokens
        appended since the last call (or those the request did not bring hashes for)."""
        hashes = self._hashes
        usable = (len(self.tokens) - 1) // block_size
        if len(hashes) < usable:
            parent = hashes[-1] if hashes else self.cache_root
            hashes += block_hashes(self.tokens[len(hashes) * block_size : usable * block_size], block_size, parent)
        return hashes

    def record_cached(self, num_tokens: int) -> None:
        """Prompt tokens the prefix cache served at the first admission (a recompute after a
        preemption is the engine's doing, not the request's)."""
        if not self.cached_recorded:
            self.usage.cached_input_tokens = min(num_tokens, self.prompt_len)
            self.cached_recorded = True

    def sort_key(self) -> tuple[int, int]:
        """Higher priority first, then first come first served."""
        return (-self.req.priority, self.order)
