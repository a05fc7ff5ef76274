"""Pause and resume hints on the KV block pool (``kv_cache.BlockManager``).

A *pause hint* (the harness: a tool call started, the session will be away for about N seconds)
does the opposite of a hold: the session's blocks are let go (its park too) and *demoted*, so
memory pressure moves them to the host tier before anyone else's, where they are kept ahead of
other blocks (the hint's priority) until the hint's retention runs out. A *resume hint* (the
tool ended), or the pause's expected end less the time the copy takes, brings them back to the
device before the session's next request arrives. A hint names the session's prefix by its
chained hashes and touches nothing unless the chain starts at the caller's salted root, so one
tenant's hint can never move another's blocks.

``PauseHints`` is a mixin of ``BlockManager``: the hints work on the pool's own blocks, tiers
and priorities, so they share its state; they live here so the pool's module holds only the
pool.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from loopwire.inference.kv_host_tier import DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY

if TYPE_CHECKING:
    from loopwire.inference.kv_cache import Block, Parked
    from loopwire.inference.kv_host_tier import HostTier, PriorityLru

T = TypeVar("T")  # what a chain walk says of each held block

@dataclass
class Pause:
    """A session away on a tool call: its prefix (chained hashes from its root), when the hint
    stops counting, when to bring the blocks back ahead of the expected end, and the priority
    its blocks keep in the host tier meanwhile."""

    hashes: list[int]
    root: int
    until: float
    prefetch_at: float
    priority: int


PAUSE_PRIORITY = 80  # a paused session's blocks in the host tier: ahead of the default (35)
DEMOTED_RANK = MIN_PRIORITY - 1  # below every retention priority: leaves the device first
RESUME_GRACE_S = 30.0  # blocks brought back keep the pause's priority this long for the request


def prefetch_at(now: float, expected_pause_s: float, counts_s: float, num_blocks: int,
                seconds_per_block: float) -> float:
    """When to start bringing a paused prefix of ``num_blocks`` back: before its expected end (at most
    the pause's ``counts_s``) by the copy's modelled time, doubled for a link shared with other copies,
    and a quarter second; never without an expected pause."""
    if expected_pause_s <= 0:
        return math.inf
    lead = 2 * num_blocks * seconds_per_block + 0.25
    return now + max(0.0, min(expected_pause_s, counts_s) - lead)


def held_chain(hashes: Sequence[int], root: int, held: Callable[[int], tuple[int, T] | None]) -> list[tuple[int, T]]:
    """The held part of a prefix: ``(hash, what held(hash) says of it)`` from the first hash while each is held
    (``held``: its parent and where it is, or None) and its parent is the hash before it, the first one's ``root``
    (a chain from another root is another tenant's: nothing)."""
    out: list[tuple[int, T]] = []
    parent = root
    for h in hashes:
        found = held(h)
        if found is None or found[0] != parent:
            break
        out.append((h, found[1]))
        parent = h
    return out


class PauseHints:
    """The pause/resume half of ``BlockManager`` (which owns every attribute used here)."""

    if TYPE_CHECKING:  # the pool's parts the hints use: declared for the type checker only
        blocks: list[Block]
        host: HostTier | None
        hint_demoted_blocks: int
        _free: list[int]
        _by_hash: dict[int, int]
        _parked: OrderedDict[str, Parked]
        _evictable: PriorityLru
        _paused: dict[str, Pause]

        def drop_parked(self, key: str) -> bool: ...
        def release(self, block_ids: Sequence[int]) -> None: ...
        def set_priority(self, block_id: int, priority: int, until: float = math.inf) -> None: ...
        def _onload(self, h: int, token_ids: tuple[int, ...], *, prefetch: bool = False) -> int | None: ...
        def _rank(self, block: Block) -> int: ...

    def _chain(self, hashes: Sequence[int], root: int) -> list[tuple[int, int | None]]:
        """The held part of a prefix (``held_chain``): ``(hash, device block id or None for the host tier)``."""
        return held_chain(hashes, root, self._held)

    def _held(self, h: int) -> tuple[int, int | None] | None:
        """A held block's parent and where it is: its device block id, or None in the host tier."""
        block_id = self._by_hash.get(h)
        if block_id is not None:
            return self.blocks[block_id].parent, block_id
        held = self.host.blocks.get(h) if self.host is not None else None
        return None if held is None else (held.parent, None)

    def pause(self, key: str, hashes: Sequence[int], root: int, until: float, prefetch_at: float = math.inf,
              priority: int = PAUSE_PRIORITY) -> int:
        """A session (``key``, unique within its tenant) is away until about ``prefetch_at``:
        its held prefix is demoted (let go of its park, evicted first, to the host tier) and kept
        at ``priority`` in the host tier until ``until``. Returns the blocks covered."""
        if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            raise ValueError(f"retention priority {priority} outside {MIN_PRIORITY}..{MAX_PRIORITY}")
        self._end_pause(key)
        chain = self._chain(hashes, root)
        if not chain:
            return 0
        held = {h for h, _ in chain}
        for park_key in [k for k, p in self._parked.items() if p.last_hash in held]:
            self.drop_parked(park_key)  # the session's stream would have pinned them
        for h, block_id in chain:
            if block_id is None:
                assert self.host is not None
                if self.host.blocks[h].priority < priority:
                    self.host.set_priority(h, priority)
                continue
            block = self.blocks[block_id]
            if block.priority > priority:
                continue  # a shared prefix kept higher (instructions, tools) stays as it is
            block.demoted = True
            self.hint_demoted_blocks += 1
            self.set_priority(block_id, priority, until)  # the host tier keeps it at this priority
        self._paused[key] = Pause([h for h, _ in chain], root, until, min(prefetch_at, until), priority)
        return len(chain)

    def resume(self, key: str, hashes: Sequence[int], root: int, now: float) -> int:
        """The session is back (its tool ended): its held prefix comes back to the device, as far
        as there is room without evicting blocks ranked at or above the pause's priority, and
        keeps that priority for ``RESUME_GRACE_S`` so it is there when the request arrives.
        Returns the blocks copied back from the host tier."""
        pause = self._paused.get(key)
        priority = pause.priority if pause is not None else PAUSE_PRIORITY
        self._end_pause(key)
        return self._bring_back(hashes, root, priority, now + RESUME_GRACE_S)

    def _bring_back(self, hashes: Sequence[int], root: int, priority: int, until: float, early: bool = False) -> int:
        """Copy a held prefix back to the device (as far as there is room without evicting blocks
        ranked at or above its rank), every block of it kept at ``priority`` until ``until``.
        ``early``: ahead of an expected end, ranked just below ``priority`` (a session whose
        tool has ended may take the room of one only expected back). Returns the blocks copied
        back from the host tier."""
        rank = priority - 1 if early else priority
        # Each block brought back stays referenced until the end: under plain LRU its rank is
        # everyone's, and the next onload would evict it again (a copy each way, counted as back).
        brought: list[int] = []
        for h, block_id in self._chain(hashes, root):
            if block_id is None:
                lowest = self._evictable.lowest()
                if not self._free and (lowest is None or lowest >= rank):
                    break
                assert self.host is not None
                block_id = self._onload(h, self.host.blocks[h].token_ids, prefetch=True)
                if block_id is None:
                    break
                self.blocks[block_id].early = early
                self.set_priority(block_id, priority, until)
                brought.append(block_id)
                continue
            block = self.blocks[block_id]
            if block.priority <= priority:
                block.demoted, block.early = False, early  # back from the pause: ranked by its priority again
                self.set_priority(block_id, priority, until)
        for block_id in brought:  # in chain order, as each used to be released
            self.release([block_id])
        return len(brought)

    def _end_pause(self, key: str) -> None:
        """The pause stops counting: its blocks are ordinary again (device rank, host priority)."""
        pause = self._paused.pop(key, None)
        if pause is None:
            return
        for h, block_id in self._chain(pause.hashes, pause.root):
            if block_id is None:
                assert self.host is not None
                if self.host.blocks[h].priority == pause.priority:
                    self.host.set_priority(h, DEFAULT_PRIORITY)
                continue
            block = self.blocks[block_id]
            if block.demoted:
                block.demoted = False
                if block_id in self._evictable:
                    self._evictable.add(block_id, self._rank(block))

    def next_pause_event(self) -> float:
        """When a pause next needs the engine (a prefetch or an expiry; inf: never)."""
        return min((min(p.prefetch_at, p.until) for p in self._paused.values()), default=math.inf)

    def _run_pauses(self, now: float) -> None:
        for key, pause in [(k, p) for k, p in self._paused.items() if min(p.prefetch_at, p.until) <= now]:
            if pause.prefetch_at <= now and pause.prefetch_at < pause.until:
                # Ahead of the expected end, which is only an estimate: the blocks keep the pause's
                # priority until the resume hint (or the pause runs out), however late it comes.
                self._bring_back(pause.hashes, pause.root, pause.priority, pause.until, early=True)
                pause.prefetch_at = math.inf
            else:
                self._end_pause(key)

    @property
    def num_paused(self) -> int:
        return len(self._paused)
