"""Checks of a GenerationStart before it reaches an engine: every bad field becomes an
in-stream error that names it (DESIGN §3 invariant 8), so the stream keeps serving."""

from __future__ import annotations

from collections.abc import Iterable

from loopwire.common.errors import Code, RequestError, invalid
from loopwire.common.hashing import SequenceHash
from loopwire.inference.config import EngineConfig
from loopwire.v1 import common_pb2, inference_pb2

MAX_DRAFT_TOKENS = 64
# A generation may ask to be kept or preferred only so much: beyond these a caller could pin
# the KV cache or starve everyone else.
MAX_PRIORITY = 100
MAX_RETENTION_SECONDS = 3600
MAX_HOLD_BLOCKS = 1 << 16  # a HoldPrefix names at most this many blocks (1M tokens at 16 a block)


def check_ids(field: str, ids: Iterable[int], vocab_size: int) -> None:
    for i, t in enumerate(ids):
        if t >= vocab_size:
            raise invalid(f"{field}[{i}]", f"token id {t} is outside the vocabulary (size {vocab_size})")


def resolve_prompt(
    start: inference_pb2.GenerationStart,
    held: tuple[list[int], SequenceHash] | None,
    vocab_size: int,
) -> tuple[list[int], SequenceHash]:
    """The full prompt and its hash: the prompt itself, or the held sequence plus an append."""
    kind = start.WhichOneof("prompt")
    if kind == "full":
        ids = list(start.full.token_ids)
        if not ids:
            raise invalid("start.full.token_ids", "the prompt is empty")
        check_ids("start.full.token_ids", ids, vocab_size)
        return ids, SequenceHash().extend(ids)
    if kind == "append":
        append = start.append
        check_ids("start.append.token_ids", append.token_ids, vocab_size)
        if held is None:
            raise RequestError(
                Code.ERROR_CODE_STATE_LOST,
                "start.append.base_length: this stream holds no sequence to extend; resend the full prompt",
                "start.append.base_length", retryable=True)
        ids, seq_hash = held
        if append.base_length != len(ids):
            raise RequestError(
                Code.ERROR_CODE_STATE_LOST,
                f"start.append.base_length: {append.base_length} != held length {len(ids)}; resend the full prompt",
                "start.append.base_length", retryable=True)
        if append.base_hash != seq_hash.value:
            raise RequestError(
                Code.ERROR_CODE_STATE_LOST,
                "start.append.base_hash: does not match the held sequence; resend the full prompt",
                "start.append.base_hash", retryable=True)
        if not ids and not append.token_ids:
            raise invalid("start.append.token_ids", "the prompt is empty")
        return ids + list(append.token_ids), seq_hash.copy().extend(append.token_ids)
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
    check_ids("start.params.stop_token_ids", p.stop_token_ids, vocab_size)
    check_ids("start.oracle_token_ids", start.oracle_token_ids, vocab_size)
    if start.kv_handle and not start.kv_source:
        raise invalid("start.kv_source", "kv_handle needs the address of the replica that holds it")
    if not -MAX_PRIORITY <= start.priority <= MAX_PRIORITY:
        raise invalid("start.priority", f"must be in [-{MAX_PRIORITY}, {MAX_PRIORITY}]")
    if start.retention_seconds > MAX_RETENTION_SECONDS:
        raise invalid("start.retention_seconds", f"at most {MAX_RETENTION_SECONDS}")
    check_capacity("start.params.max_tokens", prompt_len + p.max_tokens + config.num_draft_tokens, config)
