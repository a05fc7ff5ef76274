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
    from loopwire.gateway.parts import Stream

log = logging.getLogger("loopwire.gateway")

HOLD_TIMEOUT_S = 10.0


async def hold_kv(session: Stream, hold: gateway_pb2.HoldKv) -> gateway_pb2.ConverseResponse:
    """Pin (or release) the KV of ``hold.response_id``; a KvHeld event, or a failed one."""
    rid = hold.response_id
    if hold.HasField("hint"):
        return await _hint(session, hold)
    try:
        if hold.retention_seconds > MAX_RETENTION_SECONDS:
            raise RequestError(common_pb2.ERROR_CODE_INVALID_ARGUMENT, f"at most {MAX_RETENTION_SECONDS} seconds",
                               "hold_kv.retention_seconds")
        policy.check_hold(hold, session.tenant)
        conversation = session.gw.store.peek(rid, session.tenant.name, session.stream_id, "hold_kv.response_id")
    except RequestError as e:
        return failed(rid, e)
    replicas = [r for r in session.gw.router.replicas if r.healthy]
    if hold.retention_seconds == 0:
        await asyncio.gather(*(_ask(r, session.tenant.name, rid, [], 0) for r in replicas))
        return event(rid, kv_held=gateway_pb2.KvHeld())
    best: Replica | None = None
    best_blocks, hashes = 0, []
    for replica in replicas:
        replica_hashes = conversation.block_hashes(replica.block_size)
        cached = replica.cached_prefix_blocks(replica_hashes)
        if best is None or cached > best_blocks:
            best, best_blocks, hashes = replica, cached, replica_hashes
    if best is None:
        return event(rid, kv_held=gateway_pb2.KvHeld())
    held = await _ask(best, session.tenant.name, rid, hashes, hold.retention_seconds)
    return event(rid, kv_held=gateway_pb2.KvHeld(blocks=held, replica_id=best.name if held else ""))


async def _hint(session: Stream, hold: gateway_pb2.HoldKv) -> gateway_pb2.ConverseResponse:
    """A pause or resume hint for the conversation of ``hold.response_id``, sent to the replica
    whose cache holds most of it; a KvHeld event (``hinted_blocks``), or a failed one."""
    rid, hint = hold.response_id, hold.hint
    try:
        if problem := hint_problem(hint, hold.retention_seconds):
            field, message = problem
            raise RequestError(common_pb2.ERROR_CODE_INVALID_ARGUMENT, message, f"hold_kv.{field}")
        pause = hint.phase == common_pb2.KV_HINT_PHASE_PAUSE
        if pause:
            policy.check_hold(hold, session.tenant)
        conversation = session.gw.store.peek(rid, session.tenant.name, session.stream_id, "hold_kv.response_id")
    except RequestError as e:
        return failed(rid, e)
    best: Replica | None = None
    best_blocks, hashes = 0, []
    for replica in (r for r in session.gw.router.replicas if r.healthy):
        replica_hashes = conversation.block_hashes(replica.block_size)
        cached = replica.cached_prefix_blocks(replica_hashes)
        if cached > best_blocks:
            best, best_blocks, hashes = replica, cached, replica_hashes
    if best is None:  # no replica has any of it: nothing to keep or bring back
        return event(rid, kv_held=gateway_pb2.KvHeld())
    request = inference_pb2.HoldPrefixRequest(hold_id=rid, cache_salt=session.tenant.name, block_hashes=hashes,
                                              retention_seconds=hold.retention_seconds if pause else 0, hint=hint)
    try:
        reply = await best.stub.HoldPrefix(request, timeout=HOLD_TIMEOUT_S)
    except grpc.aio.AioRpcError as e:  # a hint, never a failure
        log.warning("KV hint on %s failed: %s %s", best.name, e.code().name, e.details())
        return event(rid, kv_held=gateway_pb2.KvHeld())
    return event(rid, kv_held=gateway_pb2.KvHeld(hinted_blocks=reply.hinted_blocks, replica_id=best.name))


async def _ask(replica: Replica, tenant: str, hold_id: str, hashes: list[int], seconds: int) -> int:
    """One replica's HoldPrefix; 0 when it cannot be reached (a hold is a hint, never a failure)."""
    try:
        reply = await replica.stub.HoldPrefix(inference_pb2.HoldPrefixRequest(
            hold_id=hold_id, cache_salt=tenant, block_hashes=hashes, retention_seconds=seconds),
            timeout=HOLD_TIMEOUT_S)
    except grpc.aio.AioRpcError as e:
        log.warning("HoldPrefix on %s failed: %s %s", replica.name, e.code().name, e.details())
        return 0
    return reply.held_blocks
