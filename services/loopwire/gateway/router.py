"""Chooses the inference replica of a session.

Cache-aware policy: the predicted time to first token on each replica =
(uncached prompt tokens + prefill work already queued there) / its prefill speed
+ the running generations it interleaves with x its time per decode step.
The cached part comes from the replica's own ``WatchCache`` events (the leading block
hashes of the prompt it holds); queued work and running generations from the
gateway's own bookkeeping (fresh between polls) plus ``GetStatus``; the speeds are
measured by the gateway from each replica's finished generations, so slower hardware
scores worse. Sessions are sticky: routing happens on a session's first turn and on
failover only. Because a session's future turns follow it, the cache only chooses among
replicas whose load (open sessions + generations) is close to the lightest one's;
otherwise a popular shared prefix would pull every session onto one replica. A replica that
holds the conversation's own history (past the instructions and tools every session shares)
may be further from the lightest than one that holds only that shared header.
Scores within ``TIE_RATIO`` of the best are a tie, broken by fewer open streams and then by a
hash of the prompt seeded with ``seed`` (rendezvous hashing), so the choice never turns on
the last poll's timing: the same state and prompt give the same replica on every gateway.

Replicas come from a static list or from DNS (``discovery.DnsName``), re-resolved every
``discovery_interval_s``: a new address is added; one that disappeared is drained (no new
sessions; its open streams run on) and closed once nothing uses it, or after ``drain_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
from collections.abc import Callable, Sequence

import grpc

from loopwire.common import grpc_server
from loopwire.common.errors import RequestError
from loopwire.gateway.disagg import DisaggPolicy
from loopwire.gateway.discovery import DiscoveryError, DnsName
from loopwire.gateway.replica import Replica
from loopwire.v1 import common_pb2, inference_pb2, inference_pb2_grpc

log = logging.getLogger("loopwire.gateway.router")

POLICIES = ("cache-aware", "round-robin", "least-loaded")
# Cache affinity may pick a replica whose load is at most the lightest's x BALANCE_RATIO +
# BALANCE_SLACK (HISTORY_SLACK for a holder of the conversation's history). A ratio of 1.25 let a
# replica carry a quarter more than the lightest on top of the slack: at 32 sessions on 4 replicas
# the prefill load ended 1.24-1.31x the mean, against 1.05-1.20x with 1.
BALANCE_RATIO = 1.0
BALANCE_SLACK = 2
# A replica holding the conversation's own history (prompt tokens past the instructions and tools,
# which every session of an agent shares) may carry this much more: that hit recurs every turn,
# where a shared header is prefilled once per replica and then held by all. The load counts an
# open stream's generation twice (a session and a request in flight): with a slack of 2 the holder
# of a history fell outside it on ordinary fluctuation; with 6 for the header too, a cold start
# piled its first sessions onto whichever replica prefilled the header first.
HISTORY_SLACK = 6
# The prompt tokens a replica would have to prefill count this many times more in the cache-aware
# score than in the predicted TTFT: they also delay every request queued behind them there (a
# TTFT-only score moved sessions off their prefix's holder whenever it had a short queue, and the
# re-prefill made the next replica's queue longer in turn).
REPREFILL_WEIGHT = 1.0
# Replicas whose cache-aware score is within this fraction of the best one's are a tie. A tie goes
# to the one with fewer open streams, then to the replica ranked first for this prompt by a seeded
# hash (rendezvous hashing): the choice depends on the prompt, the seed and the streams each
# replica holds, not on the last poll's timing, so the same sessions in the same order land on the
# same replicas run after run.
TIE_RATIO = 0.1
_U64 = (1 << 64) - 1
# Two unreachable polls in a row mean a replica is gone; a slow answer counts a fraction of one,
# so only a replica that stays silent for ~STATUS_TIMEOUT_S / SLOW_POLL_WEIGHT seconds is dropped.
POLLS_TO_MARK_DOWN = 2
SLOW_POLL_WEIGHT = 0.1
STATUS_TIMEOUT_S = 2.0
# DNS discovery: how often the name is resolved again, and how long a replica that left it may
# keep its open streams (the inference pods' termination grace period should be at least this).
DISCOVERY_INTERVAL_S = 5.0
DRAIN_TIMEOUT_S = 300.0


class Router:
    """Replicas, their health, cache contents and load; picks one per session."""

    def __init__(self, addresses: Sequence[str] | DnsName, policy: str = "cache-aware", poll_interval_s: float = 0.5,
                 service_token: str = "", discovery_interval_s: float = DISCOVERY_INTERVAL_S,
                 drain_timeout_s: float = DRAIN_TIMEOUT_S, disagg: DisaggPolicy | None = None, seed: int = 0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"routing policy must be one of {', '.join(POLICIES)}")
        self.discovery = addresses if isinstance(addresses, DnsName) else None
        if self.discovery is None and not addresses:
            raise ValueError("at least one inference replica is needed")
        self.policy = policy
        self.seed = seed  # of the rendezvous hash that breaks cache-aware ties
        self.poll_interval_s = poll_interval_s
        self.discovery_interval_s = discovery_interval_s
        self.drain_timeout_s = drain_timeout_s
        self.service_token = service_token
        self.disagg = disagg or DisaggPolicy()  # when a decode replica's prompt is prefilled elsewhere
        self.replicas: list[Replica] = []
        self._rr = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self._replica_tasks: dict[Replica, list[asyncio.Task[None]]] = {}
        self._started = False
        # What the last DNS lookup said when it found no replica or failed ("" = fine or static).
        self.discovery_problem = ""
        # The digest of the model definition the gateway tokenizes with ("" = not known yet).
        self.model_digest = ""
        if not isinstance(addresses, DnsName):
            for address in addresses:
                self._add(address)

    def _add(self, address: str) -> Replica:
        channel = grpc_server.service_channel(address, self.service_token)
        replica = Replica(address, channel, inference_pb2_grpc.InferenceServiceStub(channel))
        self.replicas.append(replica)
        if self._started:
            self._start_replica(replica)
        return replica

    def _start_replica(self, replica: Replica) -> None:
        self._replica_tasks[replica] = [asyncio.create_task(self._poll(replica)),
                                        asyncio.create_task(self._watch(replica))]

    async def start(self) -> None:
        # One status round first, so the first sessions already know each replica's role.
        await asyncio.gather(*(self._poll_once(r) for r in self.replicas))
        self._started = True
        for replica in self.replicas:
            self._start_replica(replica)
        if self.discovery is not None:
            self._tasks.append(asyncio.create_task(self._discover()))

    async def close(self) -> None:
        for replica in list(self.replicas):
            await self._remove(replica)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _remove(self, replica: Replica) -> None:
        tasks = self._replica_tasks.pop(replica, [])
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if replica in self.replicas:
            self.replicas.remove(replica)
        await replica.channel.close()

    async def refresh(self) -> None:
        """Resolve the DNS name once: add new addresses, drain vanished ones, close drained idle ones."""
        assert self.discovery is not None
        try:
            addresses = await self.discovery.resolve()
        except DiscoveryError as e:
            if self.discovery_problem != str(e):
                log.error("%s; keeping the %d replica(s) known", e, len(self.replicas))
            self.discovery_problem = str(e)
            return
        if not addresses:
            problem = f"{self.discovery} resolved to no address: no inference replica to route to"
            if self.discovery_problem != problem:
                log.error("%s", problem)
            self.discovery_problem = problem
        elif self.discovery_problem:
            log.info("%s resolves to %d replica(s) again", self.discovery, len(addresses))
            self.discovery_problem = ""
        now = asyncio.get_running_loop().time()
        known = {r.address: r for r in self.replicas}
        for address in addresses:
            replica = known.get(address)
            if replica is None:
                log.info("replica %s appeared in %s", address, self.discovery)
                self._add(address)
            elif replica.draining:
                log.info("replica %s is back in %s", address, self.discovery)
                replica.draining_since = None
        for replica in list(self.replicas):
            if replica.address in addresses:
                continue
            if replica.draining_since is None:
                log.info("replica %s left %s: draining (%d open stream(s))", replica.name, self.discovery,
                         replica.sessions)
                replica.draining_since = now
            idle = replica.sessions == 0 and replica.in_flight == 0
            if idle or now - replica.draining_since >= self.drain_timeout_s:
                log.info("replica %s drained%s", replica.name, "" if idle else " (drain deadline passed)")
                await self._remove(replica)

    async def _discover(self) -> None:
        while True:
            await asyncio.sleep(self.discovery_interval_s)
            try:
                await self.refresh()
            except Exception:  # noqa: BLE001 - discovery must outlive one bad lookup
                log.exception("replica discovery failed")

    def expect_model(self, digest: str) -> None:
        """The gateway tokenizes with the model definition of this digest: a replica whose tokenizer
        differs is not routed to."""
        self.model_digest = digest

    def prefill_source(self, target: Replica, prompt_length: int, cached_tokens: int) -> Replica | None:
        """The prefill replica to prefill this prompt for ``target`` (a decode replica), or None to
        prefill on ``target`` itself (disagg.py's rule)."""
        return self.disagg.pick(target, self.prefill_replicas(), prompt_length, cached_tokens)

    async def prefill(self, source: Replica, request_id: str, token_ids: Sequence[int],
                      params: inference_pb2.GenerationParams, cache_salt: str) -> bytes | None:
        """Prefill on ``source``: the KV handle the decode replica pulls, or None (prefill locally)."""
        return await self.disagg.prefill(source, request_id, token_ids, params, cache_salt)

    def note_prefill_fallback(self) -> None:
        """A decode replica refused a remote prefill's KV pull: the generation prefilled locally."""
        self.disagg.note_fallback()

    def mark_down(self, replica: Replica) -> None:
        """The replica failed a stream: route around it until a status poll succeeds."""
        if replica.healthy:
            log.warning("replica %s is down", replica.name)
        replica.healthy = False
        replica.cached_blocks.clear()

    def choose(
        self,
        prompt_length: int,
        block_hashes: Callable[[int], Sequence[int]],
        exclude: Sequence[Replica] = (),
        shared_tokens: int = 0,
    ) -> Replica:
        """The replica for a session's next turn; ``block_hashes(block_size)`` is asked lazily.
        ``shared_tokens``: the prompt's leading tokens other sessions share (instructions, tools)."""
        listed = [r for r in self.replicas if not r.draining]
        candidates = [r for r in listed if r.healthy and r not in exclude]
        if not candidates:
            # Every replica missed its polls, which under load means busy more often than dead:
            # try the ones not yet tried for this response rather than fail it outright; a dead
            # one fails the stream and the response fails over (or fails) from there.
            candidates = [r for r in listed if r not in exclude and r.reachable()]
        mismatched = [r for r in candidates if self._mismatched(r)]
        if mismatched and len(mismatched) == len(candidates):
            r = mismatched[0]
            raise RequestError(
                common_pb2.ERROR_CODE_FAILED_PRECONDITION,
                f"replica {r.name} serves a model with tokenizer digest {r.status.tokenizer_digest[:16]}, but the "
                f"gateway tokenizes with {self.model_digest[:16]}: restart the gateway against this model",
            )
        candidates = [r for r in candidates if r not in mismatched]
        # Prefill replicas only prefill (disagg.py) while another replica can hold the session.
        candidates = [r for r in candidates if not r.is_prefill] or candidates
        if not candidates:
            raise RequestError(
                common_pb2.ERROR_CODE_UNAVAILABLE,
                self.discovery_problem if not listed and self.discovery_problem else "no healthy inference replica",
                "",
                retryable=True,
                retry_after_ms=int(self.poll_interval_s * 2000),
            )
        if self.policy == "round-robin":
            chosen = candidates[next(self._rr) % len(candidates)]
        elif self.policy == "least-loaded":
            chosen = min(candidates, key=lambda r: (r.load() + r.status.running, r.sessions, r.routed))
        else:
            chosen = self._cache_aware(candidates, prompt_length, block_hashes, shared_tokens)
        chosen.note_routed()
        return chosen

    def _cache_aware(self, candidates: list[Replica], prompt_length: int,
                     block_hashes: Callable[[int], Sequence[int]], shared_tokens: int) -> Replica:
        cached = self.cached_tokens(candidates, block_hashes)
        balanced = self.balanced(candidates, cached, shared_tokens)
        scores = {r: self._score_s(r, max(0, prompt_length - cached[r])) for r in balanced}
        best = min(scores.values())
        tied = [r for r in balanced if scores[r] <= best * (1 + TIE_RATIO)]
        if len(tied) == 1:
            return tied[0]
        key = self._routing_key(prompt_length, block_hashes(tied[0].block_size))
        return min(tied, key=lambda r: (r.sessions, -self._rank(key, r)))

    @staticmethod
    def cached_tokens(candidates: list[Replica], block_hashes: Callable[[int], Sequence[int]]) -> dict[Replica, int]:
        """The prompt's leading tokens each candidate holds (its mirror of the replica's cache)."""
        return {r: r.cached_prefix_blocks(block_hashes(r.block_size)) * r.block_size for r in candidates}

    @staticmethod
    def balanced(candidates: list[Replica], cached: dict[Replica, int], shared_tokens: int) -> list[Replica]:
        """The candidates whose load is close enough to the lightest one's for the cache to choose
        (``cached``: from ``cached_tokens``; past ``shared_tokens`` it is the conversation's own)."""
        lightest = min(r.sessions + r.load() for r in candidates)

        def slack(r: Replica) -> int:
            return HISTORY_SLACK if cached[r] > shared_tokens else BALANCE_SLACK

        return [r for r in candidates if r.sessions + r.load() <= lightest * BALANCE_RATIO + slack(r)]

    @staticmethod
    def _routing_key(prompt_length: int, hashes: Sequence[int]) -> bytes:
        """What names this prompt to the tie-break: its last full block's chained hash (which
        covers every token before it), or its length when it fills no block."""
        return ((hashes[-1] if hashes else prompt_length) & _U64).to_bytes(8, "little")

    def _rank(self, key: bytes, replica: Replica) -> int:
        digest = hashlib.blake2b(key + replica.name.encode(), digest_size=8, key=(self.seed & _U64).to_bytes(8, "little"))
        return int.from_bytes(digest.digest(), "little")

    def prefill_replicas(self) -> list[Replica]:
        """The prefill-role replicas a decode replica may have a prompt prefilled on now."""
        return [r for r in self.replicas
                if r.is_prefill and r.healthy and not r.draining and not self._mismatched(r)]

    def _mismatched(self, replica: Replica) -> bool:
        digest = replica.status.tokenizer_digest
        return bool(self.model_digest and digest and digest != self.model_digest)

    async def fetch_model(self, timeout_s: float = 60.0) -> inference_pb2.ModelInfo:
        """The model the replicas serve, from the first one that answers (they start in any order)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        last = ""
        while True:
            if self.discovery is not None and not self._started:
                await self.refresh()
                last = self.discovery_problem or last
            for replica in self.replicas:
                try:
                    reply = await replica.stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), timeout=10.0)
                    return reply.model
                except grpc.aio.AioRpcError as e:
                    last = f"{replica.address}: {e.code().name} {e.details()}"
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"no inference replica told its model within {timeout_s:.0f} s (last: {last})")
            await asyncio.sleep(0.2)

    def _score_s(self, replica: Replica, uncached: int) -> float:
        return self._ttft_s(replica, uncached) + REPREFILL_WEIGHT * uncached / replica.prefill_speed()

    @classmethod
    def predicted_ttft_s(cls, replica: Replica, prompt_length: int, block_hashes: Callable[[int], Sequence[int]]) -> float:
        return cls._ttft_s(replica, cls._uncached(replica, prompt_length, block_hashes))

    @staticmethod
    def _uncached(replica: Replica, prompt_length: int, block_hashes: Callable[[int], Sequence[int]]) -> int:
        """Prompt tokens this replica would prefill: those past its cached prefix."""
        return max(0, prompt_length - replica.cached_prefix_blocks(block_hashes(replica.block_size)) * replica.block_size)

    @staticmethod
    def _ttft_s(replica: Replica, uncached: int) -> float:
        prefill_s = (uncached + replica.pending_prefill_tokens) / replica.prefill_speed()
        return prefill_s + replica.load() * replica.token_latency_s

    async def _poll(self, replica: Replica) -> None:
        while True:
            await self._poll_once(replica)
            await asyncio.sleep(self.poll_interval_s)

    async def _poll_once(self, replica: Replica) -> None:
        try:
            status = await replica.stub.GetStatus(inference_pb2.GetStatusRequest(), timeout=STATUS_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            # A replica that cannot be reached is down; one that answers slowly is busy, and
            # taking it out would fail every session it holds (it is only down after many).
            replica.failed_polls += 1 if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED else SLOW_POLL_WEIGHT
            if replica.failed_polls >= POLLS_TO_MARK_DOWN:
                self.mark_down(replica)
        else:
            replica.failed_polls = 0
            if self._mismatched(replica) and replica.status.tokenizer_digest != status.tokenizer_digest:
                log.error("replica %s serves tokenizer digest %s, the gateway's is %s: not routing to it",
                          replica.name, status.tokenizer_digest[:16], self.model_digest[:16])
            replica.status = status
            replica.replica_id = status.replica_id
            if status.block_size:
                replica.block_size = status.block_size
            if not replica.healthy:
                log.info("replica %s is back", replica.name)
            replica.healthy = True

    async def _watch(self, replica: Replica) -> None:
        """Mirror the replica's prefix-cache contents; resubscribe (with a snapshot) after a break."""
        while True:
            try:
                stream = replica.stub.WatchCache(inference_pb2.WatchCacheRequest(include_existing=True))
                replica.cached_blocks.clear()
                async for batch in stream:
                    if batch.block_size:
                        replica.block_size = batch.block_size
                    for event in batch.events:
                        if event.type == inference_pb2.CACHE_EVENT_TYPE_STORED:
                            replica.cached_blocks.update(event.block_hashes)
                        elif event.type == inference_pb2.CACHE_EVENT_TYPE_REMOVED:
                            replica.cached_blocks.difference_update(event.block_hashes)
                        elif event.type == inference_pb2.CACHE_EVENT_TYPE_CLEARED:
                            replica.cached_blocks.clear()
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return
            replica.cached_blocks.clear()
            await asyncio.sleep(self.poll_interval_s)
