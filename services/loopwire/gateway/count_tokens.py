"""``CountTokens``: what a request's prompt would weigh, counted exactly as Converse would build
it (same validation, template and tokenizer), without running or storing anything. A held
conversation is read, never claimed or changed: the count appends to a copy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwire.common.auth import Tenant
from loopwire.common.chat_template import ChatTemplateError
from loopwire.common.errors import RequestError
from loopwire.gateway import policy, validation
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.prepare import thinking
from loopwire.v1 import common_pb2, gateway_pb2

if TYPE_CHECKING:
    from loopwire.gateway.parts import Gateway

Code = common_pb2.ErrorCode
_NO_STREAM = ""  # a unary call belongs to no Converse stream
_PREVIOUS = "request.previous_response_id"


async def count(gw: Gateway, tenant: Tenant, create: gateway_pb2.CreateResponse) -> gateway_pb2.CountTokensResponse:
    cfg = gw.config
    size = validation.check_size(create, cfg.max_request_bytes)
    policy.check(create, tenant, cfg.safety_mode, cfg.allow_replay)
    held: Conversation | None = None
    if create.previous_response_id:
        held = gw.store.peek(create.previous_response_id, tenant.name, _NO_STREAM, _PREVIOUS)

    def tokenize() -> int:
        validation.check_header(create)
        validation.check_items(create.input, held.call_ids if held is not None else ())
        conversation = (held.fork(held.item_count) if held is not None else
                        Conversation(gw.prompt, create.model, create.instructions, create.tools,
                                     cache_salt=tenant.name, incremental=not cfg.baseline.full_render,
                                     thinking=thinking(create)))
        conversation.use_thinking(thinking(create))
        conversation.append(list(create.input))
        return len(conversation)

    try:
        tokens = await gw.offload(tenant.name, size, tokenize)  # a long prompt never stalls this loop's streams
    except ChatTemplateError as e:
        raise RequestError(Code.ERROR_CODE_INVALID_ARGUMENT, str(e)[:500], "request.input") from None
    wait_ms = gw.limiter(tenant).admit(tokens)  # counting costs the gateway what tokenizing does
    if wait_ms:
        raise RequestError(Code.ERROR_CODE_RESOURCE_EXHAUSTED, f"tenant {tenant.name!r} is over its rate limit",
                           "request", retry_after_ms=wait_ms, reason=common_pb2.ERROR_REASON_RATE_LIMIT)
    return gateway_pb2.CountTokensResponse(input_tokens=tokens, context_length=gw.model.context_length)
