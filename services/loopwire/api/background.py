"""Background responses (``background: true`` on ``POST /v1/responses``).

The create answers as soon as the gateway has created the response, ``in_progress`` (with
``background: true``); a task of this api process then reads the rest of its Converse stream.
``GET /v1/responses/{id}`` polls it (the store's in-flight entry while it runs, the stored
response once it ended: completed, incomplete, failed or cancelled, with its output), and
``POST /v1/responses/{id}/cancel`` cancels it as any response in flight. A background response
needs ``store: true`` (its poller reads it from the store). With ``stream: true`` the same events
also stream to the client that created it; when that client goes away, the response goes on.

The stream is opened for no client connection (``gateway_client.OWNER`` unset), so a departure
never ends it; the gateway still authenticates the key and counts the stream against the
tenant's own limits.

Bounded: at most ``per_tenant`` background responses of one tenant queued or in progress at once
(and ``total`` in all); a create beyond is a 429 ``rate_limit_exceeded``. A slot is taken before
the gateway is asked and given back the moment the response ends (before a poller can see it
ended).

They live in this process and cannot survive it: on shutdown every running one is cancelled (the
gateway stops its generation, a streaming client gets an ``error`` event), and a restarted api
neither knows nor finishes them; their ids then answer 404, as everything of the store does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from loopwire.api.errors import ApiError, unsupported
from loopwire.api.events import ResponseBuilder
from loopwire.api.gateway_client import ConverseStream
from loopwire.v1 import gateway_pb2

log = logging.getLogger("loopwire.api")

_END = object()  # a subscriber's last item: the response ended (or the subscriber fell behind)
SUBSCRIBER_EVENTS = 8192  # events a streaming client may fall behind before its stream ends (bounds memory)


class Subscriber:
    """A background response's events for the one streaming client that created it."""

    def __init__(self, limit: int = SUBSCRIBER_EVENTS) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._limit = limit
        self.overflowed = False  # the client read too slowly: its stream ends, the response goes on
        self.ended = False

    def push(self, event: dict[str, Any]) -> None:
        if self.ended:
            return
        if self._queue.qsize() >= self._limit:
            self.overflowed = True
            while not self._queue.empty():
                self._queue.get_nowait()
            self.end()
            return
        self._queue.put_nowait(event)

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._queue.put_nowait(_END)

    async def events(self, keepalive_s: float) -> AsyncIterator[dict[str, Any] | None]:
        """The events as they come; a None each ``keepalive_s`` seconds without one (0: never)."""
        while True:
            try:
                item = await asyncio.wait_for(self._queue.get(), keepalive_s or None)
            except TimeoutError:
                yield None
                continue
            if item is _END:
                return
            yield item


class Run:
    """One background response being generated."""

    def __init__(self, owner: str, stream: ConverseStream, builder: ResponseBuilder) -> None:
        self.owner = owner
        self.stream = stream
        self.builder = builder
        self.subscribers: list[Subscriber] = []
        self.over = False

    def subscribe(self) -> Subscriber:
        sub = Subscriber()
        if self.over:
            sub.end()
        else:
            self.subscribers.append(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        with contextlib.suppress(ValueError):
            self.subscribers.remove(sub)

    def publish(self, events: list[dict[str, Any]]) -> None:
        for sub in list(self.subscribers):
            for event in events:
                sub.push(event)
            if sub.ended:
                self.unsubscribe(sub)

    def close(self) -> None:
        self.over = True
        for sub in self.subscribers:
            sub.end()
        self.subscribers.clear()


class BackgroundResponses:
    """This process's background responses: slots per tenant, and the tasks that run them."""

    def __init__(self, per_tenant: int = 16, total: int = 256) -> None:
        self.per_tenant = per_tenant
        self.total = total
        self._slots: dict[str, int] = {}  # owner -> responses queued (slot taken) or running
        self._tasks: set[asyncio.Task[None]] = set()
        self.closing = False

    def running(self, owner: str) -> int:
        return self._slots.get(owner, 0)

    def reserve(self, owner: str) -> None:
        """Take a slot for one more of ``owner``'s background responses (release it if none starts)."""
        if self.per_tenant <= 0:
            raise unsupported("background", "background mode (off on this server)")
        if self.closing:
            raise ApiError(503, "The server is shutting down.", type="server_error", code="unavailable")
        if self._slots.get(owner, 0) >= self.per_tenant or sum(self._slots.values()) >= self.total:
            raise ApiError(429, f"Too many background responses in progress (at most {self.per_tenant} per "
                                "tenant): wait for one to finish, or cancel one.", type="rate_limit_exceeded",
                           param="background", code="rate_limit_exceeded")
        self._slots[owner] = self._slots.get(owner, 0) + 1

    def release(self, owner: str) -> None:
        left = self._slots.get(owner, 0) - 1
        if left > 0:
            self._slots[owner] = left
        else:
            self._slots.pop(owner, None)

    def start(self, owner: str, stream: ConverseStream, events: AsyncIterator[gateway_pb2.ConverseResponse],
              builder: ResponseBuilder, finished: Callable[[], None]) -> Run:
        """Read the rest of the response in a task of its own (its slot taken by ``reserve``);
        ``finished`` runs when it ended (stores it), the slot is given back at the same moment."""
        run = Run(owner, stream, builder)
        task = asyncio.create_task(self._run(run, events, finished), name=f"background {builder.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def _run(self, run: Run, events: AsyncIterator[gateway_pb2.ConverseResponse],
                   finished: Callable[[], None]) -> None:
        builder = run.builder
        try:
            try:
                async for event in events:
                    run.publish(builder.feed(event))
                    if builder.done:
                        break
            except ApiError as e:  # the gateway went away: the poller sees it failed
                run.publish(builder.lost(e))
        except asyncio.CancelledError:  # shutdown: it cannot outlive this process
            builder.status = "cancelled"
            raise
        finally:
            try:
                finished()
            except Exception:
                log.exception("background response %s: ending it failed", builder.id)
            self.release(run.owner)
            run.close()
            if not builder.done:  # cancelled here (shutdown): the gateway stops the generation
                with contextlib.suppress(Exception):
                    await run.stream.cancel(builder.id)
            with contextlib.suppress(Exception):
                await run.stream.close()

    async def shutdown(self, timeout_s: float = 10.0) -> None:
        """Cancel every running background response (they cannot survive this process)."""
        self.closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            log.info("shutdown: cancelling %d background responses", len(tasks))
            await asyncio.wait(tasks, timeout=timeout_s)
