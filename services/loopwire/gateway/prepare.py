"""A request made ready to generate: validated, its conversation found, only the new part
tokenized, admitted under the tenant's rate limits.

A delta (``previous_response_id``) continues the conversation the store holds (rendered again
under a new header when it changes the model name, instructions or tools: a cache break); a full
request on a stream that already holds one continues it when it extends it (or reports
where it breaks: a cache break). A large request's work runs on the gateway's fair work
pool (common/work_pool.py), never on the event loop every stream shares.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loopwire.common.chat_template import ChatTemplateError
from loopwire.common.errors import RequestError
from loopwire.gateway import policy, tool_grammar, validation
from loopwire.gateway.conversation import Conversation, Difference
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

if TYPE_CHECKING:
    from loopwire.gateway.parts import Stream

Code = common_pb2.ErrorCode

@dataclass
class _Work:
    """What the heavy part of preparing found."""

    conversation: Conversation
    new_items: list[common_pb2.Item]
    tokenized: int
    tokenize_ns: int
    difference: Difference | None
    reused: int
    constraint: inference_pb2.Constraint | None


@dataclass
class Prepared:
    conversation: Conversation
    new_items: list[common_pb2.Item]
    bytes_received: int
    tokens_tokenized: int
    tokenize_us: int
    difference: Difference | None
    reused_tokens: int
    # The naive way for this request: forward the full prompt (stateless gateway or client).
    naive: bool
    # What the output must match (tool choice, text format); None: free text.
    constraint: inference_pb2.Constraint | None = None


async def prepare(session: Stream, create: gateway_pb2.CreateResponse, model: str) -> Prepared:
    """Validate, find the conversation, tokenize what is new, admit under the rate limits."""
    try:
        return await _prepare_checked(session, create, model)
    except ChatTemplateError as e:  # the model's own template refused this conversation
        raise RequestError(Code.ERROR_CODE_INVALID_ARGUMENT, str(e)[:500], "create_response.input") from None


async def _prepare_checked(session: Stream, create: gateway_pb2.CreateResponse, model: str) -> Prepared:
    gw = session.gw
    cfg = gw.config
    received = validation.check_size(create, cfg.max_request_bytes)
    policy.check(create, session.tenant, cfg.safety_mode, cfg.allow_replay)
    held: Conversation | None = None
    if create.previous_response_id:
        held = gw.store.resolve(create.previous_response_id, session.tenant.name, session.stream_id)
    previous = None if (cfg.baseline.stateless or create.no_store) else session.conversation
    # The router asks the prompt's block hashes at the replicas' block size: a long prompt's are
    # hashed with the rest of its work, not on the loop (only a new tail of them later).
    block_sizes = {replica.block_size for replica in gw.router.replicas}

    def work() -> _Work:
        """Everything that grows with the request: checks, the cache-break walk, rendering,
        tokenizing, the grammar (on a worker when the request is large)."""
        validation.check_header(create)
        difference: Difference | None = None
        conversation, reused, tokenized, header_ns = held, 0, 0, 0
        if conversation is not None:
            validation.check_items(create.input, conversation.call_ids)
            # A delta inherits what it leaves empty; what it sets anew replaces the held header.
            header = (create.model or conversation.model, create.instructions or conversation.instructions,
                      create.tools or conversation.tools)
            if create.model or create.instructions or create.tools:
                difference = conversation.header_change(*header)
            if difference is not None:
                t0 = time.thread_time_ns()
                conversation, tokenized = conversation.with_header(*header)
                header_ns = time.thread_time_ns() - t0
        else:
            validation.check_items(create.input, ())
            if previous is not None:
                shared, difference = previous.difference(create.model, create.instructions, create.tools,
                                                         create.input)
                if not (difference and difference.first_differing_item == -1):
                    conversation = previous.fork(shared)  # copies ids, re-tokenizes nothing
                    reused = len(conversation.ids)
        t0 = time.thread_time_ns()
        if conversation is None:
            conversation = Conversation(gw.prompt, create.model, create.instructions, create.tools,
                                        cache_salt=session.tenant.name, incremental=not cfg.baseline.full_render,
                                        thinking=thinking(create))
            tokenized = conversation.initial_tokens
        else:
            tokenized += conversation.use_thinking(thinking(create))
        new = list(create.input) if create.previous_response_id else list(create.input[conversation.item_count :])
        breaks_before = conversation.template_breaks
        tokenized += conversation.append(new)
        tokenize_ns = time.thread_time_ns() - t0 + header_ns
        if len(block_sizes) == 1:
            conversation.block_hashes(*block_sizes)
        if conversation.template_breaks != breaks_before and difference is None:
            difference = Difference(-1, "the chat template's rendering does not extend the previous prompt")
        # Recorded output decides a replay's tokens; otherwise the tools and choice shape them.
        constraint = None if create.HasField("replay") or cfg.baseline.unconstrained else tool_grammar.constraint(
            create, gw.model, conversation.tools, think=create.sampling.reasoning_budget_tokens)
        return _Work(conversation, new, tokenized, tokenize_ns, difference, reused, constraint)

    done = await gw.offload(session.tenant.name, received, work)
    conversation, tokenized = done.conversation, done.tokenized
    window = gw.model.context_length
    if window and len(conversation) >= window:
        raise RequestError(
            Code.ERROR_CODE_RESOURCE_EXHAUSTED,
            f"context_length_exceeded: the prompt is {len(conversation)} tokens and model {gw.model.name!r} has a "
            f"{window}-token context window (the reply needs at least one token of it): shorten or compact the "
            "conversation",
            "create_response.input",
            reason=common_pb2.ERROR_REASON_CONTEXT_LENGTH_EXCEEDED,
        )
    if len(conversation) > cfg.max_session_tokens:
        raise RequestError(
            Code.ERROR_CODE_RESOURCE_EXHAUSTED,
            f"conversation is {len(conversation)} tokens, over the gateway's {cfg.max_session_tokens}-token "
            "limit per session: compact it",
            "create_response.input",
            reason=common_pb2.ERROR_REASON_SESSION_TOKEN_LIMIT,
        )
    wait_ms = session.limiter.admit(tokenized)
    if wait_ms:
        gw.metrics.add("rate_limited", model)
        raise RequestError(
            Code.ERROR_CODE_RESOURCE_EXHAUSTED,
            f"tenant {session.tenant.name!r} is over its rate limit",
            "create_response",
            retryable=True,
            retry_after_ms=wait_ms,
            reason=common_pb2.ERROR_REASON_RATE_LIMIT,
        )
    gw.metrics.add("tokens_tokenized", model, tokenized)
    naive = cfg.baseline.stateless or (create.no_store and not create.previous_response_id)
    return Prepared(conversation, done.new_items, received, tokenized, done.tokenize_ns // 1000, done.difference,
                    done.reused, naive, done.constraint)


def thinking(create: gateway_pb2.CreateResponse) -> bool | None:
    """The request's ``enable_thinking`` for the chat template (None: the template's default)."""
    s = create.sampling
    return s.enable_thinking if s.HasField("enable_thinking") else None
