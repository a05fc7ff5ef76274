"""A broken Generate stream tells each waiting generation once, however the break is seen.

The reader and a start's write can both see one break. Told twice, the response failed over
twice and two attempts fed one output: each token batch came twice ("NowNow let me check...").
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from loopwire.gateway.generate_link import GenerateLink, LinkDown
from loopwire.v1 import inference_pb2


def _reset() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "reset")


class BreakingCall:
    """A Generate call whose stream breaks while a start is written; ``reader_first``: the link's
    reader sees the break before the write fails (else the write fails first)."""

    def __init__(self, reader_first: bool) -> None:
        self.reader_first = reader_first
        self.broken = asyncio.Event()
        self.write_failed = asyncio.Event()
        self.link: GenerateLink | None = None

    async def read(self) -> object:
        await self.broken.wait()
        if not self.reader_first:
            await self.write_failed.wait()
        raise _reset()

    async def write(self, request: object) -> None:
        self.broken.set()
        if self.reader_first:
            assert self.link is not None
            await asyncio.wait({self.link._reader})  # the reader has told every waiter
        self.write_failed.set()
        raise _reset()

    def cancel(self) -> None:
        pass


class Stub:
    def __init__(self, call: BreakingCall) -> None:
        self.call = call

    def Generate(self, metadata: object = None) -> BreakingCall:  # noqa: N802 - the gRPC method's name
        return self.call


class Replica:
    name = "r0"

    def __init__(self, call: BreakingCall) -> None:
        self.stub = Stub(call)

    def stream_opened(self) -> None:
        pass

    def stream_closed(self) -> None:
        pass


class Queue:
    def __init__(self) -> None:
        self.messages: list[object] = []

    def put_nowait(self, message: object) -> None:
        self.messages.append(message)


@pytest.mark.parametrize("reader_first", [True, False], ids=["reader-first", "write-first"])
async def test_a_break_seen_by_reader_and_write_tells_the_generation_once(reader_first: bool) -> None:
    call = BreakingCall(reader_first)
    link = GenerateLink(Replica(call), "conv_x")  # type: ignore[arg-type]
    call.link = link
    queue = Queue()
    await link.start(inference_pb2.GenerationStart(request_id="resp_1"), queue)
    await asyncio.wait({link._reader})
    downs = [m for m in queue.messages if isinstance(m, LinkDown)]
    assert [d.request_id for d in downs] == ["resp_1"], queue.messages
    assert not link.alive
