"""Test doubles for the gateway: an in-test inference replica and a Converse client.

The replica is a small InferenceService on a real grpc.aio server.

It serves a model definition (the dummy one: cl100k + ChatML) on GetModelInfo and reports
its digest in GetStatus, holds each Generate stream's sequence like a real replica (so
appends are checked against base_length + base_hash and answer STATE_LOST on a mismatch),
emits the oracle tokens (or a fixed answer, as the ids the model would generate for it),
publishes its cached blocks on WatchCache, and records what it received and when it
prefilled, for tests to assert on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import grpc

from loopwire.common import grpc_server
from loopwire.common.hashing import SequenceHash, block_hashes
from loopwire.common.model_def import ModelDefinition, dummy_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway.service import GatewayServicer
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, inference_pb2, inference_pb2_grpc

BLOCK_SIZE = 16
MODEL = dummy_definition()
PROMPT = ChatPrompt(MODEL)


@dataclass
class Received:
    request_id: str
    kind: str  # "full" | "append"
    token_ids: list[int]
    start: inference_pb2.GenerationStart | None = None  # the whole request, for policy checks


@dataclass
class FakeReplica(inference_pb2_grpc.InferenceServiceServicer):
    replica_id: str = "fake-0"
    prefill_s: float = 0.0
    token_delay_s: float = 0.0
    batch: int = 4
    answer: str = "ok"
    lose_state_once: bool = False
    received: list[Received] = field(default_factory=list)
    prefill_intervals: list[tuple[float, float]] = field(default_factory=list)
    # Set when a prefill begins; a prefill given ``prefill_meets`` waits (at most 10 s) until that is set
    # too, so a test can make two things meet instead of hoping that fixed durations overlap.
    prefill_began: asyncio.Event = field(default_factory=asyncio.Event)
    prefill_meets: asyncio.Event | None = None
    cancels: int = 0
    tokens_sent: int = 0
    cached: set[int] = field(default_factory=set)
    stream_metadata: list[dict[str, str]] = field(default_factory=list)
    model: ModelDefinition = field(default_factory=dummy_definition)
    model_info_calls: int = 0
    _watchers: list[asyncio.Queue[list[int]]] = field(default_factory=list)

    async def Generate(self, request_iterator, context):  # noqa: N802
        self.stream_metadata.append({k: v for k, v in context.invocation_metadata() or ()})
        chat = ChatPrompt(self.model)
        held: list[int] = []
        held_hash = SequenceHash()
        cancelled: set[str] = set()
        out: asyncio.Queue[inference_pb2.GenerateResponse | None] = asyncio.Queue()
        tasks: list[asyncio.Task[None]] = []

        async def generate(start: inference_pb2.GenerationStart) -> None:
            nonlocal held, held_hash
            rid = start.request_id
            kind = start.WhichOneof("prompt")
            if kind == "append":
                a = start.append
                self.received.append(Received(rid, "append", list(a.token_ids), start))
                if self.lose_state_once or a.base_length != len(held) or a.base_hash != held_hash.value:
                    self.lose_state_once = False
                    held, held_hash = [], SequenceHash()
                    out.put_nowait(inference_pb2.GenerateResponse(request_id=rid, error=common_pb2.Error(
                        code=common_pb2.ERROR_CODE_STATE_LOST, message="state lost", retryable=True)))
                    return
                prompt = held + list(a.token_ids)
            else:
                self.received.append(Received(rid, "full", list(start.full.token_ids), start))
                prompt = list(start.full.token_ids)
            t0 = time.perf_counter()
            self.prefill_began.set()
            if self.prefill_meets is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.prefill_meets.wait(), 10)
            await asyncio.sleep(self.prefill_s)
            self.prefill_intervals.append((t0, time.perf_counter()))
            self._store(prompt)
            output = list(start.oracle_token_ids) or chat.output_ids(self.answer, [])
            output = output[: start.params.max_tokens or len(output)]
            sent: list[int] = []
            reason = common_pb2.FINISH_REASON_LENGTH
            for i in range(0, len(output), self.batch):
                if rid in cancelled:
                    reason = common_pb2.FINISH_REASON_CANCELLED
                    break
                chunk = output[i : i + self.batch]
                if any(t in start.params.stop_token_ids for t in chunk):
                    chunk = chunk[: next(j for j, t in enumerate(chunk) if t in start.params.stop_token_ids) + 1]
                    reason = common_pb2.FINISH_REASON_STOP
                sent += chunk
                self.tokens_sent += len(chunk)
                out.put_nowait(inference_pb2.GenerateResponse(request_id=rid, tokens=inference_pb2.TokenBatch(token_ids=chunk)))
                if reason == common_pb2.FINISH_REASON_STOP:
                    break
                await asyncio.sleep(self.token_delay_s)
            held = prompt + sent
            held_hash = SequenceHash().extend(held)
            out.put_nowait(inference_pb2.GenerateResponse(request_id=rid, finished=inference_pb2.GenerationFinished(
                finish_reason=reason,
                usage=common_pb2.Usage(input_tokens=len(prompt), output_tokens=len(sent)),
                timings=common_pb2.Timings(prefill_us=int(self.prefill_s * 1e6), ttft_us=int(self.prefill_s * 1e6)),
                sequence_length=len(held), sequence_hash=held_hash.value, replica_id=self.replica_id)))

        async def read() -> None:
            async for request in request_iterator:
                if request.WhichOneof("action") == "start":
                    tasks.append(asyncio.create_task(generate(request.start)))
                else:
                    self.cancels += 1
                    cancelled.add(request.cancel.request_id)
            await asyncio.gather(*tasks)
            out.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (response := await out.get()) is not None:
                yield response
        finally:
            reader.cancel()
            for t in tasks:
                t.cancel()

    def _store(self, prompt: list[int]) -> None:
        new = [h for h in block_hashes(prompt, BLOCK_SIZE) if h not in self.cached]
        self.cached.update(new)
        for q in self._watchers:
            q.put_nowait(new)

    async def GetStatus(self, request, context):  # noqa: N802
        return inference_pb2.GetStatusResponse(
            replica_id=self.replica_id, engine="fake", block_size=BLOCK_SIZE, max_output_tokens=4096,
            prefill_tokens_per_second=10_000, vocab_size=self.model.vocab_size, tokenizer_digest=self.model.digest)

    async def GetModelInfo(self, request, context):  # noqa: N802
        self.model_info_calls += 1
        return inference_pb2.GetModelInfoResponse(model=self.model.to_proto("fake"))

    async def WatchCache(self, request, context):  # noqa: N802
        q: asyncio.Queue[list[int]] = asyncio.Queue()
        self._watchers.append(q)
        try:
            if request.include_existing:
                yield self._cache_event(sorted(self.cached))
            while True:
                yield self._cache_event(await q.get())
        finally:
            self._watchers.remove(q)

    def _cache_event(self, hashes: list[int]) -> inference_pb2.WatchCacheResponse:
        return inference_pb2.WatchCacheResponse(replica_id=self.replica_id, block_size=BLOCK_SIZE, events=[
            inference_pb2.CacheEvent(type=inference_pb2.CACHE_EVENT_TYPE_STORED, block_hashes=hashes)])


async def start_replica(replica: FakeReplica, address: str = "127.0.0.1:0") -> tuple[grpc.aio.Server, str]:
    server = grpc_server.make_server()
    inference_pb2_grpc.add_InferenceServiceServicer_to_server(replica, server)
    port = server.add_insecure_port(address)
    await server.start()
    return server, f"127.0.0.1:{port}"


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


def call_output(call_id: str, output: str) -> common_pb2.Item:
    return common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=call_id, output=output))


BASH = common_pb2.Tool(name="bash", description="run a command", parameters='{"type": "object", "properties": {"command": {"type": "string"}}}')


class Conversation:
    """One Converse stream, driven request by request."""

    def __init__(self, stub: gateway_pb2_grpc.GatewayServiceStub, metadata: tuple[tuple[str, str], ...] | None = None):
        self.call = stub.Converse(metadata=metadata)

    async def send(self, **fields: object) -> list[gateway_pb2.ConverseResponse]:
        await self.call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(**fields)))
        return await self.until_end()

    async def until_end(self) -> list[gateway_pb2.ConverseResponse]:
        events = []
        while True:
            event = await self.call.read()
            assert event is not grpc.aio.EOF, "stream ended before the response did"
            events.append(event)
            if event.WhichOneof("event") in ("completed", "failed"):
                return events

    async def close(self) -> None:
        await self.call.done_writing()


def last(events: list[gateway_pb2.ConverseResponse], kind: str):
    matching = [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]
    assert matching, f"no {kind} event in {[e.WhichOneof('event') for e in events]}"
    return matching[-1]


def kinds(events: list[gateway_pb2.ConverseResponse]) -> list[str]:
    return [e.WhichOneof("event") for e in events]


def streamed_text(events: list[gateway_pb2.ConverseResponse]) -> str:
    """The text the events released, their text deltas joined."""
    return "".join(e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta")


@dataclass
class Mesh:
    servicer: GatewayServicer
    replicas: list[FakeReplica]
    stub: gateway_pb2_grpc.GatewayServiceStub
    servers: list[grpc.aio.Server] = field(default_factory=list)
    channel: grpc.aio.Channel | None = None

    def open(self, key: str | None = None) -> Conversation:
        return Conversation(self.stub, (("authorization", f"Bearer {key}"),) if key else None)
