"""Where one response's generation runs: the session's replica link, its load, failover.

The session keeps one Generate stream while its replica lives; a new one is routed on the
first turn or after the replica failed. While a generation runs it counts in its
replica's load (in flight, prompt tokens still to prefill), which the router reads.
When the replica dies mid-stream the generation moves to another, up to
``max_failovers`` times.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from loopwire.common.errors import RequestError
from loopwire.gateway.generate_link import GenerateLink, LinkDown
from loopwire.gateway.metrics import Stopwatch
from loopwire.gateway.replica import Replica
from loopwire.v1 import common_pb2

if TYPE_CHECKING:
    from loopwire.gateway.conversation import Conversation
    from loopwire.gateway.parts import Stream

log = logging.getLogger("loopwire.gateway")


class Placement:
    def __init__(self, session: Stream, conversation: Conversation, watch: Stopwatch, model: str) -> None:
        self.s = session
        self.gw = session.gw
        self.conversation = conversation
        self.watch = watch
        self.model = model
        self.attempt = 0
        self.tried: list[Replica] = []
        self.placed: Replica | None = None  # the replica counting this generation as its load
        self.pending_prefill = 0  # prompt tokens it still has to prefill for us

    async def link(self) -> GenerateLink:
        """The session's Generate stream; routed anew on the first turn or when its replica failed."""
        session = self.s
        if session.link is not None and session.link.alive:  # a live stream is proof enough of a live replica
            return session.link
        if session.link is not None:
            # The stream ended between generations (its replica died or restarted): route anew.
            # A dead replica fails this start and is failed over; a restarted one may serve again.
            old, session.link = session.link, None
            await old.close()
            self.gw.metrics.add("relinks", self.model)
            log.warning("session %s: %s's stream ended between generations; routing anew",
                        session.stream_id, old.replica.name)
        with self.watch:
            conversation = self.conversation
            replica = self.gw.router.choose(len(conversation), conversation.block_hashes, exclude=self.tried,
                                            shared_tokens=conversation.initial_tokens)
            # Count the load at once, so requests routed before this one starts see it.
            cached = replica.cached_prefix_blocks(conversation.block_hashes(replica.block_size)) * replica.block_size
            self.occupy(replica, max(0, len(conversation) - cached))
            session.link = GenerateLink(replica, session.stream_id)
        return session.link

    def occupy(self, replica: Replica, uncached: int) -> None:
        """Count this generation in the replica's load until it ends (the router reads it)."""
        self.vacate()
        self.placed, self.pending_prefill = replica, uncached
        replica.in_flight += 1
        replica.pending_prefill_tokens += uncached

    def prefilled(self) -> None:
        if self.placed is not None:
            self.placed.pending_prefill_tokens -= self.pending_prefill
            self.pending_prefill = 0

    def vacate(self) -> None:
        if self.placed is not None:
            self.prefilled()
            self.placed.in_flight -= 1
            self.placed = None

    async def fail_over(self, down: LinkDown, response_id: str) -> GenerateLink:
        """The replica died mid-stream: mark it down and route to another (the caller resends in full)."""
        link = self.s.link
        assert link is not None
        self.vacate()
        self.gw.router.mark_down(link.replica)
        self.tried.append(link.replica)
        if self.attempt >= self.gw.config.max_failovers:
            raise RequestError(common_pb2.ERROR_CODE_UNAVAILABLE, down.message, "", retryable=True, retry_after_ms=500)
        self.attempt += 1
        self.gw.metrics.add("failovers", self.model)
        log.warning("response %s: %s; failing over", response_id, down.message)
        return await self.link()

    async def abandon(self, request_id: str) -> None:
        """Stop the generation on the replica (cancel, cut, stop string)."""
        if self.s.link is not None:
            await self.s.link.cancel(request_id)
        self.detach(request_id)

    def detach(self, request_id: str) -> None:
        """This response no longer listens to the replica, whose held sequence is now unknown."""
        link = self.s.link
        if link is not None:
            link.done(request_id)
            link.forget_held()
        self.vacate()
