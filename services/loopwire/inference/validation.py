"""Checks of a GenerationStart before it reaches an engine: every bad field becomes an
in-stream error that names it (DESIGN §3 invariant 8), so the stream keeps serving."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from loopwire.common.errors import Code, RequestError, invalid
from loopwire.common.hashing import SequenceHash, block_hashes, salted_root
from loopwire.common.kv_hint_limits import MAX_RETENTION_SECONDS
from loopwire.inference.config import EngineConfig
from loopwire.inference.drafter import DraftContext
from loopwire.inference.logprobs import MAX_TOP_LOGPROBS
from loopwire.v1 import common_pb2, inference_pb2

MAX_DRAFT_TOKENS = 64
# A generation may ask to be kept (MAX_RETENTION_SECONDS) or preferred only so much: beyond
# these a caller could pin the KV cache or starve everyone else.
MAX_PRIORITY = 100
MAX_HOLD_BLOCKS = 1 << 16  # a HoldPrefix names at most this many blocks (1M tokens at 16 a block)


def check_ids(field: str, ids: Sequence[int], vocab_size: int) -> None:
    if not ids or max(ids) < vocab_size:  # at C speed; the loop below only names the culprit
        return
    for i, t in enumerate(ids):
        if t >= vocab_size:
            raise invalid(f"{field}[{i}]", f"token id {t} is outside the vocabulary (size {vocab_size})")


@dataclass
class HeldSequence:
    """What a stream's replica holds after a turn (prompt + output): the base of its next append."""

    tokens: list[int]  # its first ``length`` ids; longer once a request extended it in place
    length: int
    seq_hash: SequenceHash
    cache_salt: str
    block_hashes: list[int]  # chained hashes of the full blocks of tokens[:length], salt's root
    taken: bool = False  # a request extended ``tokens`` in place: a later one copies
    draft: weakref.ref[DraftContext] | None = None  # the draft context that indexed tokens[:length]


@dataclass
class ResolvedPrompt:
    """A request's whole prompt: its length, SequenceHash and block hashes (None: the engine
    hashes it), built from the new ids alone when it appends to what the stream holds."""

    length: int
    seq_hash: SequenceHash
    block_hashes: list[int] | None
    ids: list[int]  # the whole prompt, or the appended ids
    held: HeldSequence | None = None

    def token_ids(self) -> list[int]:
        """The prompt as a list the engine may own: the held list extended in place when no
        other request took it (no copy of the context), else a copy."""
        held = self.held
        if held is None:
            return self.ids
        if held.taken or len(held.tokens) != held.length:
            return held.tokens[: held.length] + self.ids
        held.taken = True
        held.tokens += self.ids
        return held.tokens


def resolve_prompt(
    start: inference_pb2.GenerationStart,
    held: HeldSequence | None,
    vocab_size: int,
    block_size: int,
) -> ResolvedPrompt:
    """The full prompt: the prompt itself, or the held sequence plus an append (O(new ids))."""
    kind = start.WhichOneof("prompt")
    if kind == "full":
        ids = list(start.full.token_ids)
        if not ids:
            raise invalid("start.full.token_ids", "the prompt is empty")
        check_ids("start.full.token_ids", ids, vocab_size)
        full_hashes = block_hashes(ids, block_size, salted_root(start.cache_salt))
        return ResolvedPrompt(len(ids), SequenceHash().extend(ids), full_hashes, ids)
    if kind == "append":
        append = start.append
        new = list(append.token_ids)
        check_ids("start.append.token_ids", new, vocab_size)
        if held is None:
            raise RequestError(
                Code.ERROR_CODE_STATE_LOST,
                "start.append.base_length: this stream holds no sequence to extend; resend the full prompt",
                "start.append.base_length", retryable=True)
        if append.base_length != held.length:
            raise RequestError(
                Code.ERROR_CODE_STATE_LOST,
                f"start.append.base_length: {append.base_length} != held length {held.length}; resend the full prompt",
                "start.append.base_length", retryable=True)
        if append.base_hash != held.seq_hash.value:
            raise RequestError(
                Code.ERROR_CODE_STATE_LOST,
                "start.append.base_hash: does not match the held sequence; resend the full prompt",
                "start.append.base_hash", retryable=True)
        if not held.length and not new:
            raise invalid("start.append.token_ids", "the prompt is empty")
        hashes: list[int] | None = None
        if start.cache_salt == held.cache_salt:
            done = len(held.block_hashes) * block_size
            parent = held.block_hashes[-1] if held.block_hashes else salted_root(held.cache_salt)
            hashes = held.block_hashes + block_hashes(held.tokens[done : held.length] + new, block_size, parent)
        return ResolvedPrompt(held.length + len(new), held.seq_hash.copy().extend(new), hashes, new, held)
    raise invalid("start.prompt", "set full or append")


def check_capacity(field: str, tokens: int, config: EngineConfig) -> None:
    """A request that could never fit the KV cache is refused at once, never queued forever."""
    if -(-tokens // config.block_size) > config.num_kv_blocks:
        raise RequestError(
            Code.ERROR_CODE_RESOURCE_EXHAUSTED,
            f"{field}: {tokens} tokens need more KV than this replica has "
            f"({config.num_kv_blocks} blocks of {config.block_size})", field,
            reason=common_pb2.ERROR_REASON_KV_CAPACITY)


def check_params(start: inference_pb2.GenerationStart, prompt_len: int, config: EngineConfig, vocab_size: int) -> None:
    p = start.params
    if p.max_tokens <= 0:
        raise invalid("start.params.max_tokens", f"must be at least 1 (got {p.max_tokens})")
    if p.max_tokens > config.max_output_tokens:
        raise invalid("start.params.max_tokens", f"{p.max_tokens} is over this server's limit {config.max_output_tokens}")
    if not 0.0 <= p.temperature <= 100.0:  # also refuses NaN and infinity
        raise invalid("start.params.temperature", f"must be a finite number in [0, 100] (got {p.temperature})")
    if not 0.0 <= p.top_p <= 1.0:
        raise invalid("start.params.top_p", "must be in [0, 1] (0 means 1)")
    if p.num_draft_tokens > MAX_DRAFT_TOKENS:
        raise invalid("start.params.num_draft_tokens", f"at most {MAX_DRAFT_TOKENS}")
    if p.HasField("top_logprobs") and p.top_logprobs > MAX_TOP_LOGPROBS:
        raise invalid("start.params.top_logprobs", f"at most {MAX_TOP_LOGPROBS} (got {p.top_logprobs})")
    check_ids("start.params.stop_token_ids", p.stop_token_ids, vocab_size)
    check_ids("start.oracle_token_ids", start.oracle_token_ids, vocab_size)
    if start.kv_handle and not start.kv_source:
        raise invalid("start.kv_source", "kv_handle needs the address of the replica that holds it")
    if not -MAX_PRIORITY <= start.priority <= MAX_PRIORITY:
        raise invalid("start.priority", f"must be in [-{MAX_PRIORITY}, {MAX_PRIORITY}]")
    if start.retention_seconds > MAX_RETENTION_SECONDS:
        raise invalid("start.retention_seconds", f"at most {MAX_RETENTION_SECONDS}")
    check_capacity("start.params.max_tokens", prompt_len + p.max_tokens + config.num_draft_tokens, config)
