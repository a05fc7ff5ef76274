"""Pause and resume hints on the TensorRT-LLM engine.

TensorRT-LLM has no call that moves or re-ranks blocks already cached: a block's retention
priority comes from the ``KvCacheRetentionConfig`` of the request that last used it, an evicted
block goes to the host tier (``KvCacheConfig(host_cache_size=...)``) when its priority is at
least ``secondary_offload_min_priority``, and a request that reuses a host-tier block onloads
it by itself. So the hints map to requests:

* a *resume hint* submits a *warm-up*: the held prefix's token ids as a one-token request, whose
  block reuse onloads the host-tier blocks before the session's next request, kept at the
  pause's priority for ``RESUME_GRACE_S`` by its retention config; its output goes nowhere;
* so does a pause's expected end less the copy's time (``kv_pause_hints.prefetch_at``), an
  estimate: that warm-up keeps the blocks just below the pause's priority until the pause runs
  out, and the pause stays until its resume hint (which warms up again, cheaply: the blocks are
  on the device);
* a *pause hint* is remembered (prefix, priority, when to warm up, until when it counts):
  nothing can be demoted after the fact, and under pressure the blocks leave the device in
  TensorRT-LLM's own order, for the host tier.

The prefix's tokens come from TensorRT-LLM's KV cache events, which the engine re-keys with
loopwire's hashes: ``StoredBlocks`` keeps each stored block's parent, tokens and tier, and a
hint's chain is read from its root while each block's parent is the hash before it, so a chain
that does not start at the caller's salted root (another tenant's) touches nothing. A warm-up
runs under the hinting tenant's salt (a pause remembers it), so it only ever reuses that
tenant's own blocks.
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loopwire.inference.kv_host_tier import MIN_PRIORITY
from loopwire.inference.kv_pause_hints import RESUME_GRACE_S, Pause, held_chain, prefetch_at


@dataclass
class StoredBlock:
    parent: int
    token_ids: array  # uint32, compact: the map holds every block TensorRT-LLM caches
    on_host: bool = False


class StoredBlocks:
    """Loopwire hash -> parent, tokens and tier of each block TensorRT-LLM reports cached, from
    its events; at most ``capacity`` (the blocks it can hold), the least recently stored going
    first should a removed event have been lost."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._blocks: OrderedDict[int, StoredBlock] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    def stored(self, block_hash: int, parent: int, token_ids: Sequence[int], on_host: bool = False) -> None:
        self._blocks[block_hash] = StoredBlock(parent, array("I", token_ids), on_host)
        self._blocks.move_to_end(block_hash)
        self.shrink()

    def removed(self, block_hash: int) -> None:
        self._blocks.pop(block_hash, None)

    def moved(self, block_hash: int, on_host: bool) -> bool:
        """A block changed tier; False when it is not known here."""
        block = self._blocks.get(block_hash)
        if block is None:
            return False
        block.on_host = on_host
        return True

    def shrink(self) -> None:
        while len(self._blocks) > max(0, self.capacity):
            self._blocks.popitem(last=False)

    def chain(self, hashes: Sequence[int], root: int) -> list[tuple[int, StoredBlock]]:
        """The cached part of a prefix (``kv_pause_hints.held_chain``): from ``root`` while each block is known."""
        return held_chain(hashes, root, lambda h: (b.parent, b) if (b := self._blocks.get(h)) is not None else None)


# Submits a warm-up: the prefix's token ids, kept at this retention priority for these seconds,
# under this cache salt (the hinting tenant's).
WarmUp = Callable[[list[int], int, float, str], None]


@dataclass
class SaltedPause(Pause):
    """A pause and the tenant's salt its timed warm-up runs under."""

    salt: str


class TrtPauseHints:
    """The pauses a replica remembers and the warm-ups they lead to; counts for ``GetStatus``:
    blocks of a paused prefix TensorRT-LLM moved to the host tier while the pause counted
    (``demoted_blocks``) and host-tier blocks a warm-up covered (``onloaded_blocks``)."""

    def __init__(self, blocks: StoredBlocks, warm_up: WarmUp, seconds_per_host_block: float) -> None:
        self.blocks = blocks
        self._warm_up = warm_up
        self.seconds_per_host_block = seconds_per_host_block
        self._paused: dict[str, SaltedPause] = {}
        self._paused_blocks: dict[int, int] = {}  # hash -> pauses naming it
        self.demoted_blocks = 0
        self.onloaded_blocks = 0

    @property
    def num_paused(self) -> int:
        return len(self._paused)

    def pause(self, key: str, hashes: Sequence[int], root: int, now: float, seconds: float,
              expected_pause_s: float, priority: int, salt: str) -> int:
        """Remember that the session ``key`` is away: when to warm its prefix up (ahead of the
        expected end) and until when the pause counts. Returns the blocks covered."""
        self._end_pause(key)
        chain = [h for h, _ in self.blocks.chain(hashes, root)]
        if not chain:
            return 0
        until = now + seconds
        start = prefetch_at(now, expected_pause_s, seconds, len(chain), self.seconds_per_host_block)
        self._paused[key] = SaltedPause(chain, root, until, min(start, until), priority, salt)
        for h in chain:
            self._paused_blocks[h] = self._paused_blocks.get(h, 0) + 1
        return len(chain)

    def resume(self, key: str, hashes: Sequence[int], root: int, priority: int, salt: str) -> int:
        """The session is back: one warm-up over its cached prefix, at the pause's priority (the
        hint's when no pause is remembered). Returns the blocks covered."""
        pause = self._end_pause(key)
        return self._warm(hashes, root, pause.priority if pause is not None else priority, RESUME_GRACE_S, salt)

    def _warm(self, hashes: Sequence[int], root: int, priority: int, seconds: float, salt: str) -> int:
        chain = self.blocks.chain(hashes, root)
        if not chain:
            return 0
        self._warm_up([t for _, block in chain for t in block.token_ids], priority, seconds, salt)
        self.onloaded_blocks += sum(block.on_host for _, block in chain)
        return len(chain)

    def moved(self, block_hash: int, on_host: bool) -> None:
        """TensorRT-LLM moved a block between tiers (its events)."""
        if self.blocks.moved(block_hash, on_host) and on_host and block_hash in self._paused_blocks:
            self.demoted_blocks += 1

    def next_event(self) -> float:
        """When a pause next needs attention (a warm-up or its end; inf: never)."""
        return min((min(p.prefetch_at, p.until) for p in self._paused.values()), default=math.inf)

    def run_due(self, now: float) -> None:
        """Warm up the pauses whose expected end is near (ranked just below the pause, so a
        session whose tool has ended goes first, until the pause runs out however late its
        resume comes); forget those that stopped counting."""
        for key, pause in [(k, p) for k, p in self._paused.items() if min(p.prefetch_at, p.until) <= now]:
            if pause.prefetch_at <= now and pause.prefetch_at < pause.until:
                self._warm(pause.hashes, pause.root, max(MIN_PRIORITY, pause.priority - 1), pause.until - now,
                           pause.salt)
                pause.prefetch_at = math.inf
            else:
                self._end_pause(key)

    def _end_pause(self, key: str) -> SaltedPause | None:
        pause = self._paused.pop(key, None)
        if pause is not None:
            for h in pause.hashes:
                left = self._paused_blocks.pop(h) - 1
                if left:
                    self._paused_blocks[h] = left
        return pause
