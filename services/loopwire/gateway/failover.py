"""Where one response's generation runs: the session's replica link, its load, failover.

The session keeps one Generate stream while its replica lives; a new one is routed on the
first turn or after the replica failed. While a generation runs it counts in its
replica's load (in flight, prompt tokens still to prefill), which the router reads.
When the replica dies mid-stream the generation moves to another, up to
``max_failovers`` times. The placement starts from the stream's link and ends with the one the
stream keeps (``link``): the session adopts it, nothing here writes the session.
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
    from loopwire.gateway.ports import ResponsePorts

log = logging.getLogger("loopwire.gateway")


class Placement:
    """Where one response's generation runs (its replica link and load), and its failovers."""

    def __init__(self, ports: ResponsePorts, stream_id: str, link: GenerateLink | None, response_id: str,
                 conversation: Conversation, watch: Stopwatch, model: str) -> None:
        self.ports = ports
        self.stream_id = stream_id
        self.link = link  # the stream's link: the session's before this response, the session's after
        self.response_id = response_id
        self.conversation = conversation
        self.watch = watch
        self.model = model
        self.attempt = 0
        self.tried: list[Replica] = []
        self.placed: Replica | None = None  # the replica counting this generation as its load
        self.pending_prefill = 0  # prompt tokens it still has to prefill for us

    @property
    def request_id(self) -> str:
        """The generation's id on its replica: the response's, then ``<id>.<attempt>`` per failover."""
        return f"{self.response_id}.{self.attempt}" if self.attempt else self.response_id

    async def route(self) -> GenerateLink:
        """The stream's Generate link; routed anew on the first turn or when its replica failed."""
        if self.link is not None and self.link.alive:  # a live stream is proof enough of a live replica
            return self.link
        if self.link is not None:
            # The stream ended between generations (its replica died or restarted): route anew.
            # A dead replica fails this start and is failed over; a restarted one may serve again.
            old, self.link = self.link, None
            await old.close()
            self.ports.counters.add("relinks", self.model)
            log.warning("session %s: %s's stream ended between generations; routing anew",
                        self.stream_id, old.replica.name)
        with self.watch:
            conversation = self.conversation
            replica = self.ports.routing.choose(len(conversation), conversation.block_hashes, exclude=self.tried,
                                                shared_tokens=conversation.initial_tokens)
            # Count the load at once, so requests routed before this one starts see it.
            cached = replica.cached_prefix_blocks(conversation.block_hashes(replica.block_size)) * replica.block_size
            self.occupy(replica, max(0, len(conversation) - cached))
            self.link = GenerateLink(replica, self.stream_id)
        return self.link

    def occupy(self, replica: Replica, uncached: int) -> None:
        """Count this generation in the replica's load until it ends (the router reads it)."""
        self.vacate()
        self.placed, self.pending_prefill = replica, uncached
        replica.occupy(uncached)

    def prefilled(self) -> None:
        if self.placed is not None:
            self.placed.prefilled(self.pending_prefill)
            self.pending_prefill = 0

    def vacate(self) -> None:
        if self.placed is not None:
            self.prefilled()
            self.placed.vacate()
            self.placed = None

    async def fail_over(self, down: LinkDown) -> GenerateLink:
        """The replica died mid-stream: mark it down and route to another (the caller resends in full)."""
        link = self.link
        assert link is not None
        self.vacate()
        self.ports.routing.mark_down(link.replica)
        self.tried.append(link.replica)
        if self.attempt >= self.ports.settings.max_failovers:
            raise RequestError(common_pb2.ERROR_CODE_UNAVAILABLE, down.message, "", retryable=True, retry_after_ms=500)
        self.attempt += 1
        self.ports.counters.add("failovers", self.model)
        log.warning("response %s (session %s): %s; failing over", self.response_id, self.stream_id, down.message)
        self.link = None  # a failover, not a relink: route() must not count it as one
        await link.close()
        return await self.route()

    async def abandon(self) -> None:
        """Stop the generation on the replica (cancel, cut, stop string)."""
        if self.link is not None:
            await self.link.cancel(self.request_id)
        self.detach()

    def detach(self) -> None:
        """This response no longer listens to the replica, whose held sequence is now unknown."""
        link = self.link
        if link is not None:
            link.done(self.request_id)
            link.forget_held()
        self.vacate()
