"""InferenceService over real grpc.aio servers on free loopback ports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from loopwire.common import grpc_server
from loopwire.common.hashing import SequenceHash, block_hashes
from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt, assistant_text
from loopwire.gateway.conversation import Conversation
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import common_pb2, inference_pb2, inference_pb2_grpc

pytestmark = pytest.mark.timeout(120)


class Replica:
    def __init__(self, options: EngineOptions) -> None:
        self.options = options

    async def __aenter__(self) -> Replica:
        self.engine = build_engine(self.options)
        self.server = grpc_server.make_server()
        self.servicer = add_servicer(self.server, self.engine)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.address = f"127.0.0.1:{self.port}"
        self.channel = grpc_server.service_channel(self.address)
        self.stub = inference_pb2_grpc.InferenceServiceStub(self.channel)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.channel.close()
        await self.server.stop(0)
        await self.engine.close()


def reference(**kw: object) -> EngineOptions:
    """The reference engine on the tiny dummy model (random weights, cl100k + ChatML)."""
    return EngineOptions(**{"model": "dummy:0", "kv_blocks": 512, "max_output_tokens": 256, **kw})  # type: ignore[arg-type]


class Session:
    """One Generate stream: send requests, read responses per request."""

    def __init__(self, stub: inference_pb2_grpc.InferenceServiceStub) -> None:
        self.queue: asyncio.Queue[inference_pb2.GenerateRequest | None] = asyncio.Queue()
        self.call = stub.Generate(self._requests())

    async def _requests(self) -> AsyncIterator[inference_pb2.GenerateRequest]:
        while (r := await self.queue.get()) is not None:
            yield r

    async def start(self, **start: object) -> None:
        await self.queue.put(inference_pb2.GenerateRequest(start=inference_pb2.GenerationStart(**start)))

    async def cancel(self, request_id: str) -> None:
        await self.queue.put(inference_pb2.GenerateRequest(cancel=inference_pb2.GenerationCancel(request_id=request_id)))

    async def until_done(self, request_id: str) -> tuple[list[int], inference_pb2.GenerateResponse, int]:
        """Tokens, the final response (finished or error) and how many token batches came."""
        tokens: list[int] = []
        batches = 0
        while True:
            r = await self.call.read()
            assert r is not grpc.aio.EOF
            assert r.request_id == request_id
            if r.HasField("tokens"):
                tokens += r.tokens.token_ids
                batches += 1
            else:
                return tokens, r, batches

    async def close(self) -> None:
        await self.queue.put(None)
        assert await self.call.read() is grpc.aio.EOF


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


def params(max_tokens: int = 8, **kw: object) -> inference_pb2.GenerationParams:
    return inference_pb2.GenerationParams(max_tokens=max_tokens, **kw)  # type: ignore[arg-type]


async def test_full_then_append_hits_the_cache_and_bad_appends_lose_state() -> None:
    async with Replica(reference()) as rep:
        s = Session(rep.stub)
        prompt = list(range(100, 160))
        await s.start(request_id="a", session_id="s", full=inference_pb2.FullPrompt(token_ids=prompt), params=params())
        tokens, done, _ = await s.until_done("a")
        fin = done.finished
        assert len(tokens) == 8 and fin.finish_reason == common_pb2.FINISH_REASON_LENGTH
        assert fin.usage.input_tokens == 60 and fin.usage.output_tokens == 8 and fin.replica_id == "replica-0"
        held = prompt + tokens
        assert fin.sequence_length == len(held) and fin.sequence_hash == SequenceHash().extend(held).value

        bad = inference_pb2.AppendPrompt(base_length=len(held) - 1, base_hash=fin.sequence_hash, token_ids=[5])
        await s.start(request_id="b", append=bad, params=params())
        _, err, _ = await s.until_done("b")
        assert err.error.code == common_pb2.ERROR_CODE_STATE_LOST and err.error.field == "start.append.base_length"
        bad = inference_pb2.AppendPrompt(base_length=len(held), base_hash=fin.sequence_hash ^ 1, token_ids=[5])
        await s.start(request_id="b", append=bad, params=params())
        _, err, _ = await s.until_done("b")
        assert err.error.code == common_pb2.ERROR_CODE_STATE_LOST and err.error.field == "start.append.base_hash"

        good = inference_pb2.AppendPrompt(base_length=len(held), base_hash=fin.sequence_hash, token_ids=[5, 6, 7])
        await s.start(request_id="c", append=good, params=params(4))
        tokens2, done2, _ = await s.until_done("c")
        assert len(tokens2) == 4
        assert done2.finished.usage.input_tokens == len(held) + 3
        assert done2.finished.usage.cached_input_tokens == 64
        assert done2.finished.sequence_hash == SequenceHash().extend(held + [5, 6, 7] + tokens2).value
        await s.close()

        fresh = Session(rep.stub)  # a new stream holds nothing: an append is STATE_LOST
        await fresh.start(request_id="x", append=good, params=params())
        _, err, _ = await fresh.until_done("x")
        assert err.error.code == common_pb2.ERROR_CODE_STATE_LOST and err.error.retryable
        await fresh.close()


@pytest.mark.parametrize(
    ("start", "field"),
    [
        (dict(full=inference_pb2.FullPrompt(token_ids=[1, 10**6])), "start.full.token_ids[1]"),
        (dict(full=inference_pb2.FullPrompt(token_ids=[])), "start.full.token_ids"),
        (dict(), "start.prompt"),
        (dict(full=inference_pb2.FullPrompt(token_ids=[1]), params=params(0)), "start.params.max_tokens"),
        (dict(full=inference_pb2.FullPrompt(token_ids=[1]), params=params(-3)), "start.params.max_tokens"),
        (dict(full=inference_pb2.FullPrompt(token_ids=[1]), params=params(257)), "start.params.max_tokens"),
        (dict(full=inference_pb2.FullPrompt(token_ids=[1]), params=params(4, temperature=-1.0)),
         "start.params.temperature"),
        (dict(full=inference_pb2.FullPrompt(token_ids=[1]), params=params(4), oracle_token_ids=[10**7]),
         "start.oracle_token_ids[0]"),
        (dict(append=inference_pb2.AppendPrompt(base_length=3, token_ids=[2**31])), "start.append.token_ids[0]"),
    ],
)
async def test_bad_input_gets_an_in_stream_error_and_the_stream_keeps_serving(start: dict, field: str) -> None:
    async with Replica(reference()) as rep:
        s = Session(rep.stub)
        await s.start(request_id="bad", params=start.pop("params", params()), **start)
        _, err, _ = await s.until_done("bad")
        assert err.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
        assert err.error.field == field and field in err.error.message
        await s.start(request_id="ok", full=inference_pb2.FullPrompt(token_ids=[1, 2, 3]), params=params(2))
        tokens, done, _ = await s.until_done("ok")
        assert len(tokens) == 2 and done.HasField("finished")
        await s.close()


async def test_cancel_frees_blocks_and_status_reports_it() -> None:
    async with Replica(reference(max_output_tokens=4096, kv_blocks=1024)) as rep:
        s = Session(rep.stub)
        await s.start(request_id="long", full=inference_pb2.FullPrompt(token_ids=list(range(1, 200))),
                      params=params(4000))
        first = await s.call.read()
        assert first.HasField("tokens")
        busy = await rep.stub.GetStatus(inference_pb2.GetStatusRequest())
        assert busy.running == 1 and busy.kv_blocks_used > 0
        await s.cancel("long")
        _, done, _ = await s.until_done("long")
        assert done.finished.finish_reason == common_pb2.FINISH_REASON_CANCELLED
        idle = await rep.stub.GetStatus(inference_pb2.GetStatusRequest())
        assert idle.running == 0 and idle.kv_blocks_used == 0 and idle.kv_blocks_total == 1024
        assert idle.engine == "reference" and idle.vocab_size == dummy_definition().vocab_size
        assert idle.tokenizer_digest == dummy_definition().digest
        await s.cancel("nothing")
        r = await s.call.read()
        assert r.error.field == "cancel.request_id"
        await s.close()


async def test_disconnect_frees_blocks() -> None:
    async with Replica(reference(max_output_tokens=4096, kv_blocks=1024)) as rep:
        s = Session(rep.stub)
        await s.start(request_id="gone", full=inference_pb2.FullPrompt(token_ids=list(range(1, 100))),
                      params=params(4000))
        assert (await s.call.read()).HasField("tokens")
        s.call.cancel()
        for _ in range(200):
            status = await rep.stub.GetStatus(inference_pb2.GetStatusRequest())
            if status.kv_blocks_used == 0 and status.running == 0:
                break
            await asyncio.sleep(0.02)
        assert status.kv_blocks_used == 0 and status.running == 0


async def test_watch_cache_reports_the_router_hashes() -> None:
    async with Replica(reference()) as rep:
        watch = rep.stub.WatchCache(inference_pb2.WatchCacheRequest(include_existing=True))
        existing = await watch.read()
        assert existing.events[0].type == inference_pb2.CACHE_EVENT_TYPE_STORED and not existing.events[0].block_hashes
        s = Session(rep.stub)
        prompt = list(range(500, 540))
        await s.start(request_id="a", full=inference_pb2.FullPrompt(token_ids=prompt), params=params(1))
        await s.until_done("a")
        stored: list[int] = []
        while len(stored) < 2:
            r = await watch.read()
            assert r.block_size == 16 and r.replica_id == "replica-0"
            stored += [h for e in r.events if e.type == inference_pb2.CACHE_EVENT_TYPE_STORED for h in e.block_hashes]
        assert stored == block_hashes(prompt, 16)
        watch.cancel()
        await s.close()


async def test_prefill_on_one_replica_decode_on_another_gives_the_same_tokens() -> None:
    """DESIGN §3 invariant 4 (disaggregation is invisible)."""
    prompt = [int(t) for t in range(1000, 1075)]
    async with Replica(reference(replica_id="p", role="prefill")) as pre, \
            Replica(reference(replica_id="d", role="decode")) as dec, Replica(reference()) as alone:
        s = Session(alone.stub)
        await s.start(request_id="r", full=inference_pb2.FullPrompt(token_ids=prompt), params=params(12))
        expected, _, _ = await s.until_done("r")
        await s.close()

        handle = await pre.stub.Prefill(inference_pb2.PrefillRequest(request_id="r", token_ids=prompt))
        assert handle.num_tokens == 75 and handle.block_hashes == block_hashes(prompt, 16)
        pulled = [c async for c in pre.stub.PullKv(inference_pb2.PullKvRequest(kv_handle=handle.kv_handle))]
        assert len(pulled) == 4 and list(pulled[-1].tail_token_ids) == prompt[64:]
        assert pulled[0].block.dtype == "float32" and len(pulled[0].block.keys) > 0

        dec.servicer.peers = frozenset({pre.address})  # --peers: the only replicas it imports KV from
        d = Session(dec.stub)
        await d.start(request_id="r", full=inference_pb2.FullPrompt(token_ids=prompt), params=params(12),
                      kv_handle=handle.kv_handle, kv_source=pre.address)
        got, done, _ = await d.until_done("r")
        assert got == expected
        assert done.finished.usage.cached_input_tokens == 64
        await d.close()

        with pytest.raises(grpc.aio.AioRpcError) as e:
            async for _ in pre.stub.PullKv(inference_pb2.PullKvRequest(kv_handle=b"nope")):
                pass
        assert e.value.code() == grpc.StatusCode.NOT_FOUND


async def test_replayed_session_over_the_stream_with_simulated_replica() -> None:
    """The simulated engine serves replay: oracle tokens out, appends hit the cache, virtual time."""
    model = dummy_definition()
    chat = ChatPrompt(model)
    async with Replica(EngineOptions(engine="simulated", replica_id="sim")) as rep:
        s = Session(rep.stub)
        conv = Conversation(chat, "m", "You are terse.", [])  # builds the prompts as the gateway does
        conv.append([user("hi")])
        prompt = conv.prompt_ids()
        assert prompt == chat.encode_conversation("You are terse.", [], [user("hi")], add_generation_prompt=True)
        held: list[int] = []
        seq_hash = 0
        for turn in range(3):
            text = f"answer {turn} " * 5
            oracle = chat.output_ids(text, [])
            if turn == 0:
                await s.start(request_id=f"t{turn}", full=inference_pb2.FullPrompt(token_ids=prompt),
                              params=params(100), oracle_token_ids=oracle)
            else:
                conv.append([user(f"more {turn}")])
                new = conv.prompt_ids(len(held))
                await s.start(request_id=f"t{turn}", params=params(100), oracle_token_ids=oracle,
                              append=inference_pb2.AppendPrompt(base_length=len(held), base_hash=seq_hash,
                                                                token_ids=new))
            tokens, done, _ = await s.until_done(f"t{turn}")
            assert tokens == oracle
            fin = done.finished
            assert fin.finish_reason == common_pb2.FINISH_REASON_STOP and fin.replica_id == "sim"
            assert fin.timings.ttft_us > 0
            if turn:
                assert fin.usage.cached_input_tokens > 0
            conv.complete([common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=text)]))], tokens,
                assistant_text(text, []))
            # The replica holds exactly the gateway's ids: same length, same hash.
            assert len(conv.ids) == fin.sequence_length and conv.hash_at(fin.sequence_length) == fin.sequence_hash
            held, seq_hash = [0] * fin.sequence_length, fin.sequence_hash
        status = await rep.stub.GetStatus(inference_pb2.GetStatusRequest())
        assert status.engine == "simulated" and status.kv_blocks_total > 10_000
        assert status.engine_kind == common_pb2.ENGINE_KIND_SIMULATED
        await s.close()


async def test_hold_prefix_keeps_a_waiting_sessions_blocks_through_cache_pressure_until_released() -> None:
    """HoldPrefix pins the cached prefix named by its (salted) block hashes: other prompts that
    fill the cache evict everything else, not it; released, it is evictable like any block."""
    from loopwire.common.hashing import block_hashes, salted_root

    async with Replica(reference(kv_blocks=24)) as rep:
        s = Session(rep.stub)
        waiting = list(range(1000, 1160))  # 10 blocks of 16

        async def run(rid: str, prompt: list[int]) -> inference_pb2.GenerateResponse:
            await s.start(request_id=rid, session_id=rid, cache_salt="acme",
                          full=inference_pb2.FullPrompt(token_ids=prompt), params=params(1))
            _, done, _ = await s.until_done(rid)
            return done

        async def pressure(tag: int) -> None:  # three other 10-block prompts: more than the free room
            for n in range(3):
                await run(f"other-{tag}-{n}", [2000 + 500 * n + 37 * tag + i for i in range(160)])

        await run("w1", waiting)
        hashes = block_hashes(waiting, 16, salted_root("acme"))
        hold = inference_pb2.HoldPrefixRequest(hold_id="resp_1", cache_salt="acme", block_hashes=hashes,
                                               retention_seconds=600)
        assert (await rep.stub.HoldPrefix(hold)).held_blocks == 10
        other_tenant = inference_pb2.HoldPrefixRequest(hold_id="x", cache_salt="evil", retention_seconds=600,
                                                       block_hashes=block_hashes(waiting, 16, salted_root("evil")))
        assert (await rep.stub.HoldPrefix(other_tenant)).held_blocks == 0  # its hashes name nothing cached
        await pressure(1)
        assert (await run("w2", waiting)).finished.usage.cached_input_tokens == 160 - 16  # all but the last block

        release = inference_pb2.HoldPrefixRequest(hold_id="resp_1", cache_salt="acme", retention_seconds=0)
        assert (await rep.stub.HoldPrefix(release)).held_blocks == 0
        await pressure(2)
        assert (await run("w3", waiting)).finished.usage.cached_input_tokens == 0  # evicted once let go

        for bad, field in [(inference_pb2.HoldPrefixRequest(cache_salt="acme", retention_seconds=5), "hold_id"),
                           (inference_pb2.HoldPrefixRequest(hold_id="h", retention_seconds=10**6), "retention")]:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await rep.stub.HoldPrefix(bad)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in e.value.details()
        await s.close()


async def test_a_streams_append_continues_its_last_draft_context() -> None:
    """The stream hands its last finish's draft context to the next turn: the session automaton
    goes on from it (no comparison of the held prefix)."""
    async with Replica(reference(engine="simulated", time_scale=0.0)) as rep:
        drafter = rep.engine.core.drafter
        opened: list[bool] = []
        real = drafter.open

        def spy(token_ids, session_id="", namespace="", base=None):  # type: ignore[no-untyped-def]
            kept = drafter._sessions.get(f"{namespace}\x00{session_id}")
            opened.append(kept is not None and base is not None and base() is kept)
            return real(token_ids, session_id, namespace, base)

        drafter.open = spy
        s = Session(rep.stub)
        await s.start(request_id="a", session_id="s", full=inference_pb2.FullPrompt(token_ids=list(range(100, 160))),
                      params=params(4, speculative_decoding=True))
        _, done, _ = await s.until_done("a")
        fin = done.finished
        for rid in "bc":
            append = inference_pb2.AppendPrompt(base_length=fin.sequence_length, base_hash=fin.sequence_hash,
                                                token_ids=[5, 6, 7])
            await s.start(request_id=rid, session_id="s", append=append, params=params(4, speculative_decoding=True))
            _, done, _ = await s.until_done(rid)
            fin = done.finished
        await s.close()
        assert opened == [False, True, True]
