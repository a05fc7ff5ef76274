"""The engine protocol the service depends on, and the async runner that puts the
synchronous ``EngineCore`` (reference or simulated) behind it.

Every engine (``reference``, ``simulated``, ``trtllm``) offers the same async surface:
``generate`` yields ``RequestOutput``s, ``cancel`` frees a request's blocks at once,
``stats`` reports load, ``cache_events`` streams prefix-cache changes, and
``export_kv``/``import_kv`` move prefilled blocks between replicas.

Output coalescing lives here: the engine appends tokens to a per-request buffer as fast as
it makes them, and each read takes *everything* produced since the previous read, so a slow
reader gets fewer, larger batches instead of a growing backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from loopwire.common.model_def import ModelDefinition
from loopwire.inference.clock import WallClock
from loopwire.inference.config import EngineConfig
from loopwire.inference.engine_core import EngineCore, EngineStats
from loopwire.inference.kv_events import CacheEvent, CacheEventFeed, CacheEventKind
from loopwire.inference.kv_pause_hints import PAUSE_PRIORITY, prefetch_at
from loopwire.inference.logprobs import TokenLogprobs
from loopwire.inference.sequence import Finished, GenerationRequest, RequestOutput

log = logging.getLogger("loopwire.inference")


@dataclass
class KvBlockData:
    """One exported KV block: identity plus tensors (None for the simulated engine)."""

    block_hash: int
    parent_hash: int
    token_ids: tuple[int, ...]
    keys: np.ndarray | None
    values: np.ndarray | None


class Engine(Protocol):
    name: str
    model_name: str
    definition: ModelDefinition
    config: EngineConfig
    vocab_size: int
    # Whether export_kv/import_kv work (Prefill/PullKv through this service).
    supports_kv_transfer: bool
    # Whether GenerationStart.constraint is honoured (masks on logits; the simulated engine has
    # none, so its synthetic tokens are not constrained).
    supports_constraints: bool

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def generate(self, req: GenerationRequest) -> AsyncIterator[RequestOutput]: ...

    async def cancel(self, request_id: str) -> None: ...

    async def end_stream(self, park_key: str) -> None:
        """The stream whose requests carried ``park_key`` ended: what it parked is let go."""
        ...

    def stats(self) -> EngineStats: ...

    def cache_events(self, include_existing: bool) -> AsyncIterator[list[CacheEvent]]: ...

    async def export_kv(self, block_hashes: list[int]) -> list[KvBlockData]: ...

    async def import_kv(self, blocks: list[KvBlockData]) -> int: ...

    async def hold_prefix(self, key: str, block_hashes: list[int], seconds: float) -> int: ...

    async def hint_prefix(self, key: str, block_hashes: list[int], root: int, hint: KvHint,
                          cache_salt: str = "") -> int:
        """A tool-pause hint on a session's prefix (``kv_cache.BlockManager.pause``/``resume``);
        returns the blocks a pause covers or a resume brought back. ``root`` is
        ``salted_root(cache_salt)``; the salt itself is for an engine that re-submits the prefix
        (TensorRT-LLM's warm-ups run under the tenant's salt)."""
        ...

    def hint_counters(self) -> tuple[int, int]:
        """(blocks demoted by pause hints, blocks brought back by hints) since start."""
        ...


@dataclass(frozen=True)
class KvHint:
    """A harness's hint, as the replica applies it (already checked against the caller's tenant)."""

    resume: bool
    seconds: float  # a pause: how long it counts (the tenant's retention, at most)
    expected_pause_s: float = 0.0  # 0: unknown (no early prefetch)
    priority: int = PAUSE_PRIORITY


@dataclass
class _Stream:
    """Tokens produced for one request and not yet taken by its reader."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] | None = None  # one per token, when the request asked
    finished: Finished | None = None
    prefilled: int = 0  # the latest prefill progress not yet taken
    failure: BaseException | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)


class AsyncEngine:
    """Drives an ``EngineCore`` step after step while it has work.

    ``offload`` runs each step in a worker thread (the reference engine's numpy work must not
    block the event loop); the simulated engine steps inline and, with ``time_scale > 0``,
    sleeps the modelled step time scaled.
    """

    supports_kv_transfer = True
    supports_constraints = True

    def __init__(
        self,
        core: EngineCore,
        name: str,
        model_name: str,
        definition: ModelDefinition,
        *,
        offload: bool,
        time_scale: float = 0.0,
        step_seconds: object = None,
    ) -> None:
        self.core = core
        self.config = core.config
        self.name = name
        self.model_name = model_name
        self.definition = definition
        self.vocab_size = core.config.model.vocab_size
        self._offload = offload
        self._time_scale = time_scale
        self._step_seconds = step_seconds  # callable giving the last modelled step time
        self._inbox: list[tuple[str, object]] = []
        self._streams: dict[str, _Stream] = {}
        self._wake = asyncio.Event()
        self._pause_timer: asyncio.TimerHandle | None = None  # the wake-up for the next pause event
        self._cache_feed = CacheEventFeed()
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # serialises core access between the loop and transfers
        # While a step runs in the worker thread the core is not read: stats come from here.
        self._stepping = False
        self._last_stats = core.stats()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"engine-{self.config.replica_id}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # -- requests ---------------------------------------------------------------------

    async def generate(self, req: GenerationRequest) -> AsyncIterator[RequestOutput]:
        await self.start()
        if req.request_id in self._streams:
            raise ValueError(f"request_id {req.request_id!r} is already running")
        stream = _Stream()
        self._streams[req.request_id] = stream
        self._inbox.append(("add", req))
        self._wake.set()
        try:
            while True:
                await stream.ready.wait()
                stream.ready.clear()
                tokens, stream.tokens = stream.tokens, []
                logprobs, stream.logprobs = stream.logprobs, None
                prefilled, stream.prefilled = stream.prefilled, 0
                if stream.failure is not None:
                    raise RuntimeError(f"engine step failed: {stream.failure}") from stream.failure
                if stream.finished is not None:
                    yield RequestOutput(req.request_id, tokens, stream.finished, logprobs=logprobs)
                    return
                if tokens or prefilled:
                    yield RequestOutput(req.request_id, tokens, prefilled=0 if tokens else prefilled, logprobs=logprobs)
        finally:
            if self._streams.pop(req.request_id, None) is not None and stream.finished is None:
                # The reader went away (cancelled or disconnected): free the blocks now.
                self._inbox.append(("cancel", req.request_id))
                self._wake.set()

    async def cancel(self, request_id: str) -> None:
        self._inbox.append(("cancel", request_id))
        self._wake.set()

    async def end_stream(self, park_key: str) -> None:
        self._inbox.append(("end_stream", park_key))
        self._wake.set()

    def stats(self) -> EngineStats:
        if not self._stepping:
            self._last_stats = self.core.stats()
        return self._last_stats

    async def cache_events(self, include_existing: bool) -> AsyncIterator[list[CacheEvent]]:
        initial = None
        if include_existing:
            async with self._lock:
                initial = [CacheEvent(CacheEventKind.STORED, self.core.blocks.cached_hashes())]
        async for events in self._cache_feed.subscribe(initial):
            yield events

    # -- KV transfer ------------------------------------------------------------------

    async def export_kv(self, block_hashes: list[int]) -> list[KvBlockData]:
        async with self._lock:
            store = self.core.executor.kv_store
            out = []
            for b in self.core.blocks.export(block_hashes):
                keys, values = store.read_block(b.block_id) if store is not None else (None, None)
                out.append(KvBlockData(b.block_hash, b.parent_hash, b.token_ids, keys, values))
            return out

    async def import_kv(self, blocks: list[KvBlockData]) -> int:
        """Enter received blocks into the prefix cache; returns how many were new."""
        async with self._lock:
            store = self.core.executor.kv_store
            added = 0
            for b in blocks:
                block_id = self.core.blocks.import_block(b.parent_hash, b.token_ids)
                if block_id is None:
                    continue
                if store is not None and b.keys is not None and b.values is not None:
                    store.write_block(block_id, b.keys, b.values)
                added += 1
            self._publish()
            return added

    async def hint_prefix(self, key: str, block_hashes: list[int], root: int, hint: KvHint,
                          cache_salt: str = "") -> int:
        async with self._lock:  # the block pool reads the tenant from ``root``: the salt is not needed
            blocks, now = self.core.blocks, self.core.clock.now()
            if hint.resume:
                n = blocks.resume(key, block_hashes, root, now)
            else:
                per_block = getattr(self.core.executor, "seconds_per_host_block", 0.0)
                start = prefetch_at(now, hint.expected_pause_s, hint.seconds, len(block_hashes), per_block)
                n = blocks.pause(key, block_hashes, root, now + hint.seconds, start, hint.priority)
                self._wake_at(blocks.next_pause_event())
            self._price_prefetch()
            return n

    def hint_counters(self) -> tuple[int, int]:
        return self.core.blocks.hint_demoted_blocks, self.core.blocks.hint_onloaded_blocks

    def _price_prefetch(self) -> None:
        """Copies a hint made overlap the session's pause: the executor that models time
        (simulated) occupies its host link with them instead of the next step."""
        n = self.core.blocks.take_prefetched()
        prefetch = getattr(self.core.executor, "prefetch", None)
        if n and prefetch is not None:
            prefetch(n)

    def _wake_at(self, when: float) -> None:
        """Run a step (it runs due pause events) at engine time ``when``: at once on the wall
        clock's time, scaled on a virtual clock's (never with time scale 0: nothing waits there).
        Armed for the earliest pause event when a pause is added and each time the loop goes idle,
        so a later pause's event is armed once the earlier ones have run."""
        if when == math.inf:
            return
        delay = when - self.core.clock.now()
        if not isinstance(self.core.clock, WallClock):
            if self._time_scale <= 0:
                return
            delay *= self._time_scale
        if self._pause_timer is not None:
            self._pause_timer.cancel()  # one timer, for the earliest pause event
        self._pause_timer = asyncio.get_running_loop().call_later(max(0.0, delay), self._wake.set)

    async def hold_prefix(self, key: str, block_hashes: list[int], seconds: float) -> int:
        """Hold the cached prefix of ``block_hashes`` for ``seconds`` of engine time under
        ``key`` (replacing its earlier hold), or release it (0). Memory pressure still wins:
        the scheduler gives up holds before it preempts a running sequence."""
        async with self._lock:
            blocks = self.core.blocks
            if seconds <= 0:
                blocks.drop_retention(key)
                return 0
            held = [b.block_id for b in blocks.export(block_hashes)]
            if not held:
                blocks.drop_retention(key)
                return 0
            blocks.retain(key, held, self.core.clock.now() + seconds)
            return len(held)

    # -- the loop ---------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._inbox and not self.core.has_work():
                self._wake.clear()
                self._wake_at(self.core.blocks.next_pause_event())  # the next pause's prefetch or end
                await self._wake.wait()
            async with self._lock:
                try:
                    self._apply_inbox()
                    if self._offload:
                        self._stepping = True
                        try:
                            outputs = await loop.run_in_executor(None, self.core.step)
                        finally:
                            self._stepping = False
                    else:
                        outputs = self.core.step()
                except Exception as e:  # a bug must fail the requests in flight, not hang them
                    log.exception("engine step failed")
                    self._fail_all(e)
                    continue
            if self._time_scale > 0 and self._step_seconds is not None:
                # The step's tokens exist only once its modelled time has passed.
                await asyncio.sleep(self._step_seconds() * self._time_scale)  # type: ignore[operator]
            async with self._lock:
                self._deliver(outputs)
                self._price_prefetch()
                self._publish()
                self._last_stats = self.core.stats()
            await asyncio.sleep(0)

    def _apply_inbox(self) -> None:
        inbox, self._inbox = self._inbox, []
        for kind, arg in inbox:
            if kind == "add":
                assert isinstance(arg, GenerationRequest)
                if arg.request_id in self._streams:
                    self.core.add(arg)
            elif kind == "end_stream":
                self.core.blocks.drop_parked(str(arg))
            else:
                self.core.cancel(str(arg))

    def _fail_all(self, error: BaseException) -> None:
        for request_id, stream in self._streams.items():
            stream.failure = error
            stream.ready.set()
            if request_id in self.core.seqs:
                self.core.cancel(request_id)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            stream = self._streams.get(out.request_id)
            if stream is None:
                continue
            stream.tokens.extend(out.token_ids)
            if out.logprobs is not None:  # coalesced with their tokens, in the same order
                if stream.logprobs is None:
                    stream.logprobs = []
                stream.logprobs.extend(out.logprobs)
            stream.prefilled = max(stream.prefilled, out.prefilled)
            if out.finished is not None:
                stream.finished = out.finished
            stream.ready.set()

    def _publish(self) -> None:
        events = self.core.blocks.drain_events()
        if events:
            self._cache_feed.publish(events)
