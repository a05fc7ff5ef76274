"""HoldKv: keep a stored response's KV cached while its session waits (for a human, say).

A retention hint on every request would pin the KV of every turn that *might* wait; the
harness instead asks once the session really waits, and lets go once it goes on. The
conversation's chained block hashes (salted with the tenant) name the blocks, and the
replica whose cache view holds the longest prefix of them is asked to pin them. A release
goes to every replica (this gateway may not be the one that asked for the hold).

A HoldKv with a ``hint`` does not pin: around a tool call the harness says the session pauses
(for about how long) and, once the tool ends, that it resumes. The replica that has the
conversation's blocks lets them go to its host tier first under pressure, and brings them back
on the resume, before the next request arrives. The hashes are computed here from the
caller's own stored conversation with its tenant's salt, and the tenant's retention ceiling
bounds a pause as it bounds a hold: no tenant can name, or keep, another's blocks.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from loopwire.common.errors import RequestError
from loopwire.common.kv_hint_limits import MAX_RETENTION_SECONDS, hint_problem
from loopwire.gateway import policy
from loopwire.gateway.events import event, failed
from loopwire.gateway.replica import Replica
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

if TYPE_CHECKING:
    from loopwire.gateway.conversation import Conversation
    from loopwire.gateway.parts import Stream

log = logging.getLogger("loopwire.gateway")

HOLD_TIMEOUT_S = 10.0


async def hold_kv(session: Stream, hold: gateway_pb2.HoldKv) -> gateway_pb2.ConverseResponse:
    """Pin (or release) the KV of ``hold.response_id``, or pass on its pause or resume hint, on
    the replica whose cache holds most of it; a KvHeld event, or a failed one."""
    rid, is_hint = hold.response_id, hold.HasField("hint")
    resume = hold.hint.phase == common_pb2.KV_HINT_PHASE_RESUME  # a resume keeps nothing: it counts no seconds
    try:
        conversation = _checked_conversation(session, hold, resume)
    except RequestError as e:
        return failed(rid, e)
    seconds = 0 if resume else hold.retention_seconds
    replicas = [r for r in session.gw.router.replicas if r.healthy]
    if not is_hint and seconds == 0:
        release = inference_pb2.HoldPrefixRequest(hold_id=rid, cache_salt=session.tenant.name)
        await asyncio.gather(*(_ask(r, release) for r in replicas))
        return event(rid, kv_held=gateway_pb2.KvHeld())
    # A hold still goes to some replica when none has the blocks (it replaces that one's earlier
    # hold of this id); a hint then has nothing to keep or bring back.
    best, hashes = _most_cached(replicas, conversation, at_least=1 if is_hint else 0)
    if best is None:
        return event(rid, kv_held=gateway_pb2.KvHeld())
    reply = await _ask(best, inference_pb2.HoldPrefixRequest(
        hold_id=rid, cache_salt=session.tenant.name, block_hashes=hashes, retention_seconds=seconds,
        hint=hold.hint if is_hint else None))
    if reply is None:
        return event(rid, kv_held=gateway_pb2.KvHeld())
    if is_hint:
        return event(rid, kv_held=gateway_pb2.KvHeld(hinted_blocks=reply.hinted_blocks, replica_id=best.name))
    held = reply.held_blocks
    return event(rid, kv_held=gateway_pb2.KvHeld(blocks=held, replica_id=best.name if held else ""))


def _checked_conversation(session: Stream, hold: gateway_pb2.HoldKv, resume: bool) -> Conversation:
    """The caller's own stored conversation that ``hold`` names, once the hold (or its hint) is
    within the limits and, unless it resumes, the tenant's retention ceiling."""
    if hold.HasField("hint"):
        if problem := hint_problem(hold.hint, hold.retention_seconds):
            field, message = problem
            raise RequestError(common_pb2.ERROR_CODE_INVALID_ARGUMENT, message, f"hold_kv.{field}")
    elif hold.retention_seconds > MAX_RETENTION_SECONDS:
        raise RequestError(common_pb2.ERROR_CODE_INVALID_ARGUMENT, f"at most {MAX_RETENTION_SECONDS} seconds",
                           "hold_kv.retention_seconds")
    if not resume:
        policy.check_hold(hold, session.tenant)
    return session.gw.store.peek(hold.response_id, session.tenant.name, session.stream_id, "hold_kv.response_id")


def _most_cached(replicas: list[Replica], conversation: Conversation, at_least: int) -> tuple[Replica | None, list[int]]:
    """The first replica whose cache view holds the longest prefix of ``conversation`` (of at
    least ``at_least`` blocks), with the conversation's hashes at its block size."""
    best: Replica | None = None
    best_blocks, hashes = at_least - 1, []
    for replica in replicas:
        replica_hashes = conversation.block_hashes(replica.block_size)
        cached = replica.cached_prefix_blocks(replica_hashes)
        if cached > best_blocks:
            best, best_blocks, hashes = replica, cached, replica_hashes
    return best, hashes


async def _ask(replica: Replica, request: inference_pb2.HoldPrefixRequest) -> inference_pb2.HoldPrefixResponse | None:
    """One replica's HoldPrefix; None when it cannot be reached (a hold or hint is a hint, never a failure)."""
    try:
        return await replica.stub.HoldPrefix(request, timeout=HOLD_TIMEOUT_S)
    except grpc.aio.AioRpcError as e:
        log.warning("HoldPrefix on %s failed: %s %s", replica.name, e.code().name, e.details())
        return None
