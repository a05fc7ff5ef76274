"""What a generation's start tells its replica: the prompt, the sampling parameters, the rest.

The prompt is an append of only the new ids when the replica holds the conversation's prefix
(the held length and hash of the stream's link prove it), else the full prompt (with the ids
generated so far, after a failover or a resend). ``max_tokens`` is the request's, else the
gateway's default, capped by the replica's limit and by the room left in the context window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loopwire.common import telemetry
from loopwire.common.auth import Tenant
from loopwire.common.model_def import ModelDefinition
from loopwire.gateway.generate_link import GenerateLink
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

if TYPE_CHECKING:
    from loopwire.gateway.prepare import Prepared


@dataclass(frozen=True)
class PromptSent:
    """The prompt a start carries: its ids, how many of the whole prompt the replica already holds,
    and the whole prompt's length (what the prefill placement weighs)."""

    ids: list[int]
    cached: int
    prompt_length: int


def generation_params(sampling: common_pb2.SamplingParams, model: ModelDefinition, default_max_output_tokens: int,
                      replica_limit: int, oracle_length: int, prompt_length: int,
                      generated: int) -> inference_pb2.GenerationParams:
    """The sampling parameters; ``replica_limit``: the replica's output cap (0: none); ``generated``:
    ids already generated (a failover's resend asks only for the rest)."""
    if sampling.max_output_tokens:
        max_tokens = sampling.max_output_tokens
    elif oracle_length:
        max_tokens = min(oracle_length, replica_limit or oracle_length)
    else:
        max_tokens = min(default_max_output_tokens, replica_limit or default_max_output_tokens)
    if replica_limit:
        max_tokens = min(max_tokens, replica_limit)  # the replica's cap, never an error about a field nobody sent
    if model.context_length:  # the reply fits the window after the prompt (prepare refused one that fills it)
        max_tokens = min(max_tokens, model.context_length - prompt_length)
    params = inference_pb2.GenerationParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        seed=sampling.seed,
        max_tokens=max(1, max_tokens - generated),
        stop_token_ids=model.stop_token_ids,
    )
    if sampling.HasField("speculative_decoding"):
        params.speculative_decoding = sampling.speculative_decoding
    if sampling.HasField("top_logprobs"):
        params.top_logprobs = sampling.top_logprobs
    return params


def start_message(request_id: str, stream_id: str, tenant: Tenant, create: gateway_pb2.CreateResponse,
                  prepared: Prepared, params: inference_pb2.GenerationParams, oracle: Sequence[int],
                  generated: Sequence[int]) -> inference_pb2.GenerationStart:
    """The start without its prompt; its KV is salted by the tenant, its trace is this response's."""
    start = inference_pb2.GenerationStart(
        request_id=request_id,
        session_id=stream_id,
        params=params,
        oracle_token_ids=oracle[len(generated):],
        retention_seconds=create.retention_seconds,
        priority=create.priority,
        cache_salt=tenant.name,
    )
    if prepared.constraint is not None:
        start.constraint.CopyFrom(prepared.constraint)
        start.constraint.generated_token_ids.extend(generated)
    telemetry.inject(start.trace_context)  # the generation joins this response's (turn's) trace
    return start


def set_prompt(start: inference_pb2.GenerationStart, prepared: Prepared, link: GenerateLink,
               generated: list[int], resend_full: bool) -> PromptSent:
    """Put the prompt in ``start``: an append when the replica holds the conversation's prefix and
    nothing was generated yet (``resend_full``: never), else the full prompt."""
    conversation = prepared.conversation
    held = link.held_length
    base_hash = conversation.hash_at(held) if held and not resend_full and not prepared.naive else None
    if base_hash is not None and base_hash == link.held_hash and not generated:
        ids = conversation.prompt_ids(held)
        start.append.CopyFrom(inference_pb2.AppendPrompt(base_length=held, base_hash=base_hash, token_ids=ids))
        return PromptSent(ids, held, held + len(ids))  # the replica holds the sequence appended to
    ids = conversation.prompt_ids() + generated
    start.full.CopyFrom(inference_pb2.FullPrompt(token_ids=ids))
    replica = link.replica
    blocks = replica.cached_prefix_blocks(conversation.block_hashes(replica.block_size))
    return PromptSent(ids, min(len(ids), blocks * replica.block_size), len(ids))
