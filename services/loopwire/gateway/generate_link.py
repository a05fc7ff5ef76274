"""One Generate stream from a Converse stream to its replica.

The replica keeps the session's sequence (prompt + generated tokens) for the stream,
so the next turn sends only what is new: an ``AppendPrompt`` whose base length and
hash prove it extends what the replica holds. Events are routed by request id into
the queue of the response waiting for them; a broken stream tells every waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Protocol

import grpc

from loopwire.common import telemetry
from loopwire.gateway.replica import Replica
from loopwire.v1 import inference_pb2

# How long a closing link waits for the replica to end an idle stream before cancelling it.
CLOSE_WAIT_S = 5.0


@dataclass
class LinkDown:
    """The stream to the replica broke (replica died or stopped) under the generation ``request_id``."""

    message: str
    request_id: str


class Waiter(Protocol):
    """Where a generation's events go (a response's inbox): called from the link's reader."""

    def put_nowait(self, message: object) -> None: ...


class GenerateLink:
    def __init__(self, replica: Replica, session_id: str) -> None:
        self.replica = replica
        self.session_id = session_id
        trace_context: dict[str, str] = {}
        telemetry.inject(trace_context)  # the replica's stream span joins the response that opened it
        self.call = replica.stub.Generate(metadata=tuple(trace_context.items()))
        self.alive = True
        # What the replica holds for this stream after the last finished generation.
        self.held_length = 0
        self.held_hash = 0
        self._waiters: dict[str, Waiter] = {}
        self._reader = asyncio.create_task(self._read())
        replica.stream_opened()

    def hold(self, length: int, sequence_hash: int) -> None:
        """The replica holds this stream's sequence of ``length`` ids (a finished generation's)."""
        self.held_length, self.held_hash = length, sequence_hash

    def forget_held(self) -> None:
        self.held_length = 0
        self.held_hash = 0

    async def start(self, start: inference_pb2.GenerationStart, queue: Waiter) -> None:
        rid = start.request_id
        self._waiters[rid] = queue
        try:
            await self.call.write(inference_pb2.GenerateRequest(start=start))
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError) as e:
            # The reader may have seen the break first and told this waiter already: a second
            # LinkDown would fail the generation over twice, two attempts feeding one response.
            told = self._waiters.pop(rid, None) is None
            self._down(f"cannot send to replica {self.replica.name}: {e}")
            if not told:
                queue.put_nowait(LinkDown(f"cannot send to replica {self.replica.name}", rid))

    async def cancel(self, request_id: str) -> None:
        if self.alive:
            with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                await self.call.write(inference_pb2.GenerateRequest(cancel=inference_pb2.GenerationCancel(request_id=request_id)))

    def done(self, request_id: str) -> None:
        self._waiters.pop(request_id, None)

    async def close(self) -> None:
        """Half-close the stream and, with no generation running on it, let the replica end it (it
        does at once); cancel only what is still open after that. A call cancelled while gRPC still
        writes its half-close makes gRPC format a traceback on the event loop, every stream."""
        if self.alive:
            with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
                await self.call.done_writing()
            if not self._waiters:
                await asyncio.wait({self._reader}, timeout=CLOSE_WAIT_S)
        self.alive = False
        self.call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self.replica.stream_closed()

    async def _read(self) -> None:
        message = f"replica {self.replica.name} closed the stream"
        try:
            while True:
                response = await self.call.read()
                if response is grpc.aio.EOF:
                    break
                queue = self._waiters.get(response.request_id)
                if queue is not None:
                    queue.put_nowait(response)
        except grpc.aio.AioRpcError as e:
            message = f"replica {self.replica.name}: {e.code().name}: {e.details()}"
        self._down(message)

    def _down(self, message: str) -> None:
        self.alive = False
        for rid, queue in self._waiters.items():
            queue.put_nowait(LinkDown(message, rid))
        self._waiters.clear()
