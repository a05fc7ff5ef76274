"""Prompt-lookup drafting, output coalescing, and the async runner's cleanup."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from loopwire.inference.drafter import PromptLookupDrafter
from loopwire.inference.outbox import Outbox
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.server import EngineOptions, build_engine
from loopwire.v1 import inference_pb2


def test_prompt_lookup_proposes_the_continuation_of_the_latest_match() -> None:
    ctx = PromptLookupDrafter(max_ngram=3).open([5, 1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 4, 0, 1, 2, 3])
    assert ctx.propose(3).token_ids == [7, 8, 4]  # trigram (1, 2, 3): latest earlier occurrence
    ctx.extend([7, 8])
    assert ctx.propose(2).token_ids == [4, 0]
    assert PromptLookupDrafter().open([1, 2, 3]).propose(4).token_ids == []


@given(st.lists(st.integers(0, 5), min_size=1, max_size=60), st.integers(1, 8))
def test_proposals_always_continue_an_earlier_occurrence(tokens: list[int], k: int) -> None:
    draft = PromptLookupDrafter(max_ngram=3).open(tokens).propose(k).token_ids
    assert len(draft) <= k
    if draft:
        starts = [i for i in range(1, len(tokens)) if tokens[i : i + len(draft)] == draft and i < len(tokens)]
        assert any(tokens[i - 1] == tokens[-1] for i in starts)


async def test_outbox_coalesces_tokens_while_the_writer_lags() -> None:
    box = Outbox()
    for i in range(50):
        box.tokens("a", [i])
        box.tokens("b", [100 + i])
    box.put(inference_pb2.GenerateResponse(request_id="a", finished=inference_pb2.GenerationFinished()))
    box.tokens("a", [999])  # after a's finish was queued: a new batch, ordered after it
    box.close()
    got = []
    while (r := await box.take()) is not None:
        got.append(r)
    assert [(r.request_id, r.WhichOneof("event")) for r in got] == [
        ("a", "tokens"), ("b", "tokens"), ("a", "finished"), ("a", "tokens")]
    assert list(got[0].tokens.token_ids) == list(range(50))
    assert list(got[1].tokens.token_ids) == list(range(100, 150))


async def test_engine_stream_coalesces_for_a_slow_reader_and_frees_on_disconnect() -> None:
    engine = build_engine(EngineOptions(engine="simulated", time_scale=0.0))
    batches = 0
    total = 0
    async for out in engine.generate(GenerationRequest("slow", list(range(1, 100)), 300)):
        batches += 1
        total += len(out.token_ids)
        await asyncio.sleep(0.01)  # the reader lags behind a virtual-time engine
    assert total == 300 and batches < 100
    gen = engine.generate(GenerationRequest("gone", list(range(1, 100)), 4000))
    await gen.__anext__()
    await gen.aclose()  # the reader disconnects
    for _ in range(100):
        if engine.stats().kv_blocks_used == 0:
            break
        await asyncio.sleep(0.01)
    assert engine.stats().kv_blocks_used == 0 and engine.stats().running == 0
    await engine.close()
