"""Conditional prefill/decode disaggregation: when a prompt is prefilled on a prefill replica.

The rule is NVIDIA Dynamo's: a generation placed on a ``--role decode`` replica is prefilled
remotely when its uncached part, ``prompt_len x (1 - prefix_hit_rate)``, is longer than
``max_local_prefill_length`` AND some prefill replica's queue is below ``max_prefill_queue``;
otherwise the decode replica prefills it itself (a short append costs less than a KV transfer,
and a backed-up prefill replica would only add queueing to the time to first token). Replicas
of role ``both`` always prefill locally, as without disaggregation.

A prefill replica's queue is the larger of the requests its ``GetStatus`` says wait there (every
gateway's) and the ``Prefill`` calls this gateway has in flight to it (fresh between polls).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from loopwire.v1 import inference_pb2

if TYPE_CHECKING:
    from loopwire.gateway.replica import Replica

log = logging.getLogger("loopwire.gateway.disagg")

DEFAULT_MAX_LOCAL_PREFILL_LENGTH = 1024
DEFAULT_MAX_PREFILL_QUEUE = 4
PREFILL_TIMEOUT_S = 60.0


def prefill_remotely(prompt_len: int, cached_tokens: int, max_local_prefill_length: int,
                     prefill_queues: Sequence[int], max_prefill_queue: int) -> bool:
    """Dynamo's rule, with ``prefix_hit_rate = cached_tokens / prompt_len`` (in whole tokens, no rounding)."""
    uncached = prompt_len - min(cached_tokens, prompt_len)
    return uncached > max_local_prefill_length and any(q < max_prefill_queue for q in prefill_queues)


def queue_of(replica: Replica) -> int:
    return max(replica.status.waiting, replica.prefills_in_flight)


@dataclass
class DisaggPolicy:
    """The gateway's flags, and what it decided so far (the tests and the benchmark read these)."""

    max_local_prefill_length: int = DEFAULT_MAX_LOCAL_PREFILL_LENGTH
    max_prefill_queue: int = DEFAULT_MAX_PREFILL_QUEUE
    remote: int = 0
    local_long: int = 0  # long prompts a decode replica prefilled itself (no prefill replica free)
    failed: int = 0  # Prefill calls that failed (the generation then prefilled locally)

    def pick(self, target: Replica, prefill_replicas: Sequence[Replica], prompt_len: int,
             cached_tokens: int) -> Replica | None:
        """The prefill replica for this prompt, or None to prefill on ``target`` itself."""
        if not target.is_decode or not prefill_replicas:
            return None
        queues = [queue_of(r) for r in prefill_replicas]
        if not prefill_remotely(prompt_len, cached_tokens, self.max_local_prefill_length, queues,
                                self.max_prefill_queue):
            if prompt_len - cached_tokens > self.max_local_prefill_length:
                self.local_long += 1
            return None
        free = [r for r, q in zip(prefill_replicas, queues, strict=True) if q < self.max_prefill_queue]
        return min(free, key=lambda r: (queue_of(r), r.pending_prefill_tokens, r.routed))

    def note_fallback(self) -> None:
        """A remote prefill came to nothing after ``prefill`` returned (the pull was refused)."""
        self.failed += 1

    async def prefill(self, replica: Replica, request_id: str, token_ids: Sequence[int],
                      params: inference_pb2.GenerationParams, cache_salt: str) -> bytes | None:
        """Run ``Prefill`` there; the handle, or None when it failed (the caller prefills locally)."""
        replica.begin_prefill(len(token_ids))
        try:
            reply = await replica.stub.Prefill(
                inference_pb2.PrefillRequest(request_id=request_id, token_ids=token_ids, params=params,
                                             cache_salt=cache_salt),
                timeout=PREFILL_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            self.failed += 1
            log.warning("prefill of %s on %s failed (%s: %s); prefilling locally", request_id, replica.name,
                        e.code().name, e.details())
            return None
        finally:
            replica.end_prefill(len(token_ids))
        self.remote += 1
        replica.note_routed()
        return bytes(reply.kv_handle)
