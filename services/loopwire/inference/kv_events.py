"""Prefix-cache events: what a replica's block pool reports as blocks enter (STORED) and leave
(REMOVED) its prefix cache, and the feed that fans them out to ``WatchCache`` subscribers (the
gateway's router keeps its view of each replica from them alone)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from enum import Enum


class CacheEventKind(Enum):
    STORED = 1
    REMOVED = 2


@dataclass
class CacheEvent:
    kind: CacheEventKind
    block_hashes: list[int]


def coalesce(events: Iterable[CacheEvent]) -> list[CacheEvent]:
    """The same changes in fewer events: each run of events of one kind becomes one event with
    their hashes in order. Applied in order to any set of hashes, the result is the same (a run
    of adds is one add of all of them, a run of removals one removal)."""
    out: list[CacheEvent] = []
    for e in events:
        if out and out[-1].kind is e.kind:
            out[-1].block_hashes.extend(e.block_hashes)
        else:
            out.append(CacheEvent(e.kind, list(e.block_hashes)))
    return out


class CacheEventFeed:
    """Fans a replica's cache events out to every WatchCache subscriber.

    A subscriber gets everything published since its last batch as one coalesced batch, so the
    messages it is sent follow how fast it reads, not how many engine steps ran: a long prompt
    prefilled in hundreds of chunks is not hundreds of messages for the watcher (and the
    gateway) to work through during the turns that follow."""

    def __init__(self) -> None:
        self._queues: list[asyncio.Queue[list[CacheEvent]]] = []

    def publish(self, events: list[CacheEvent]) -> None:
        for queue in self._queues:
            queue.put_nowait(events)

    async def subscribe(self, initial: list[CacheEvent] | None = None) -> AsyncIterator[list[CacheEvent]]:
        """Events from now on, after ``initial`` (a snapshot of what the replica holds) if given."""
        queue: asyncio.Queue[list[CacheEvent]] = asyncio.Queue()
        if initial is not None:
            queue.put_nowait(initial)
        self._queues.append(queue)
        try:
            while True:
                batches = [await queue.get()]
                while not queue.empty():
                    batches.append(queue.get_nowait())
                yield coalesce(e for batch in batches for e in batch)
        finally:
            self._queues.remove(queue)
