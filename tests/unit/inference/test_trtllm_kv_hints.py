"""Pause/resume hints on the TensorRT-LLM engine, on CPU with the stand-in ``LLM``: a hint's
prefix is rebuilt from the cache events, a resume (or a pause's expected end) submits one
one-token warm-up over it with the pause's retention, and nothing of it reaches a client."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from test_trtllm_engine import Completion, FakeLLM, Result, engine, fake_api

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hashes, salted_root
from loopwire.common.model_def import dummy_definition
from loopwire.inference.config import ModelConfig
from loopwire.inference.engine import KvHint
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.server import EngineOptions
from loopwire.inference.trtllm_engine import TrtLlmEngine
from loopwire.inference.trtllm_kv_hints import StoredBlocks, TrtPauseHints

BS = 4
TOKENS = list(range(100, 112))  # three full blocks
HASHES = block_hashes(TOKENS, BS)
PAUSE = KvHint(resume=False, seconds=600, priority=90)
RESUME = KvHint(resume=True, seconds=0)


def stored(trt_hashes: list[int], tokens: list[int], parent: int | None = None) -> dict:
    blocks = [{"type": "stored_block", "block_hash": h, "cache_level": 0,
               "tokens": [{"type": "unique_token", "token_id": t} for t in tokens[i * BS:(i + 1) * BS]]}
              for i, h in enumerate(trt_hashes)]
    return {"event_id": 0, "data": {"type": "stored", "parent_hash": parent, "blocks": blocks}}


def moved(trt_hash: int, to_host: bool) -> dict:
    level = {"type": "event_diff", "old_value": int(not to_host), "new_value": int(to_host)}
    return {"event_id": 0, "data": {"type": "updated", "block_hash": trt_hash, "cache_level": level, "priority": None}}


class WatchedLLM(FakeLLM):
    """Also keeps each request's result and says when one was submitted."""

    def __init__(self, script: list[Completion]) -> None:
        super().__init__(script)
        self.results: list[Result] = []
        self.submitted = asyncio.Event()

    def generate_async(self, inputs: dict, **kwargs: Any) -> Result:
        self.results.append(super().generate_async(inputs, **kwargs))
        self.submitted.set()
        return self.results[-1]


def cached(llm: FakeLLM, **options: Any) -> TrtLlmEngine:
    """An engine whose events reported TOKENS, submitted unsalted, cached as TensorRT-LLM blocks
    901-903, in two events."""
    e = engine(llm, block_size=BS, **options)
    e._events.salts.submitted(TOKENS[:BS], "")
    e.translate_events([stored([901, 902], TOKENS[:8]), stored([903], TOKENS[8:], parent=902)])
    return e


async def test_resume_submits_one_warm_up_over_the_prefix_rebuilt_from_events() -> None:
    llm = FakeLLM([Completion([7], "length")])
    e = cached(llm)
    assert await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, PAUSE) == 3
    assert llm.calls == []  # a pause moves nothing: TensorRT-LLM cannot demote after the fact
    assert await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, RESUME) == 3
    [(prompt, sent)] = llm.calls
    assert prompt == TOKENS + TOKENS[-1:]  # every block of the prefix matched whole
    assert sent["sampling_params"].kwargs["max_tokens"] == 1 and sent["streaming"] is True
    retention = sent["kv_cache_retention_config"]
    assert [r.args for r in retention.args[0]] == [(0, 12, 90, timedelta(seconds=30)), (12, None, 0, None)]
    assert retention.args[1:] == (0,)  # the pause's priority for the grace; the scratch block lowest
    await e.close()


async def test_a_foreign_root_or_a_broken_chain_touches_nothing() -> None:
    llm = FakeLLM()
    e = cached(llm)
    tenant_b = salted_root("tenant-b")
    assert await e.hint_prefix("s", HASHES, tenant_b, RESUME) == 0  # another tenant's chain
    assert await e.hint_prefix("s", block_hashes(TOKENS, BS, tenant_b), tenant_b, RESUME) == 0
    assert await e.hint_prefix("s", HASHES, tenant_b, PAUSE) == 0 and e._hints.num_paused == 0
    assert await e.hint_prefix("s", [HASHES[0], HASHES[2]], ROOT_BLOCK_HASH, RESUME) == 1
    assert llm.calls[0][0] == TOKENS[:4] + TOKENS[3:4]  # the chain stopped where the parent did not follow
    assert len(llm.calls) == 1
    await e.close()


async def test_unknown_hashes_stop_the_chain() -> None:
    llm = FakeLLM([Completion([7], "length")])
    e = cached(llm)
    assert await e.hint_prefix("s", [HASHES[0], HASHES[1], 12345, HASHES[2]], ROOT_BLOCK_HASH, RESUME) == 2
    assert llm.calls[0][0] == TOKENS[:8] + TOKENS[7:8]
    e.translate_events([{"event_id": 1, "data": {"type": "removed", "block_hashes": [901]}}])
    assert await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, RESUME) == 0  # its first block evicted
    assert len(llm.calls) == 1
    await e.close()


async def test_the_warm_up_output_reaches_no_client_and_is_aborted_after_its_first_token() -> None:
    warm = Completion([555, 556], "length")
    llm = FakeLLM([warm, Completion([5, 6], "stop")])
    e = cached(llm)
    await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, RESUME)
    tokens = [t async for out in e.generate(GenerationRequest("r", TOKENS + [1], 4)) for t in out.token_ids]
    assert tokens == [5, 6]  # the warm-up's 555 went nowhere
    await asyncio.gather(*list(e._warm_ups))
    assert e._warm_ups == set() and e._handles == {} and e.stats().running == 0
    await e.close()


async def test_a_warm_up_left_unfinished_after_its_first_output_is_aborted() -> None:
    llm = WatchedLLM([Completion([555, 556], "length")])
    e = cached(llm)
    await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, RESUME)
    await asyncio.gather(*list(e._warm_ups))
    assert llm.results[0].aborted
    await e.close()


async def test_a_pause_warms_up_ahead_of_its_expected_end_without_a_resume() -> None:
    llm = WatchedLLM([Completion([7], "length")])
    e = cached(llm)
    hint = KvHint(resume=False, seconds=600, expected_pause_s=0.01, priority=70)
    assert await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, hint) == 3
    await asyncio.wait_for(llm.submitted.wait(), 30)
    assert llm.calls[0][0] == TOKENS + TOKENS[-1:]
    start, end, priority, kept = llm.calls[0][1]["kv_cache_retention_config"].args[0][0].args
    assert (start, end, priority) == (0, 12, 69)  # just below the pause: a session back goes first
    assert timedelta(seconds=30) < kept <= timedelta(seconds=600)  # until the pause runs out, not the grace
    assert e._hints.num_paused == 1  # the resume hint is still to come
    await e.close()


def test_pauses_end_or_warm_up_when_due() -> None:
    blocks = StoredBlocks(16)
    parent = ROOT_BLOCK_HASH
    for h, i in zip(HASHES, range(0, 12, BS), strict=True):
        blocks.stored(h, parent, TOKENS[i:i + BS])
        parent = h
    warmed: list[tuple[list[int], int, float, str]] = []
    hints = TrtPauseHints(blocks, lambda *warm_up: warmed.append(warm_up), 0.01)
    hints.pause("a", HASHES, ROOT_BLOCK_HASH, now=0.0, seconds=100, expected_pause_s=10, priority=80, salt="t")
    hints.pause("b", HASHES[:1], ROOT_BLOCK_HASH, now=0.0, seconds=5, expected_pause_s=0, priority=80, salt="t")
    assert hints.next_event() == 5.0  # b's end (no expected pause: no warm-up)
    hints.run_due(5.0)
    assert warmed == [] and hints.num_paused == 1
    assert hints.next_event() == 10 - (2 * 3 * 0.01 + 0.25)  # a's expected end less the copy's lead
    hints.run_due(10.0)
    assert warmed == [(TOKENS, 79, 90.0, "t")] and hints.num_paused == 1 and hints.next_event() == 100.0
    assert hints.resume("a", HASHES, ROOT_BLOCK_HASH, priority=50, salt="t") == 3
    assert warmed[1:] == [(TOKENS, 80, 30.0, "t")] and hints.num_paused == 0  # the pause's priority, for the grace


async def test_the_block_map_stays_within_what_tensorrt_llm_holds() -> None:
    e = cached(FakeLLM(), kv_blocks=2)
    assert len(e._hints.blocks) == 2 and HASHES[0] not in e._hints.blocks  # the oldest went first
    model = ModelConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2)
    llm = FakeLLM()
    options = EngineOptions(engine="trtllm", model="/ckpt", block_size=BS, host_kv_bytes=10 * 1024)
    big = TrtLlmEngine.create(options, dummy_definition(), fake_api(llm), model)
    block_bytes = 2 * 2 * 2 * 2 * 16 * BS  # K and V, 16-bit, 2 layers, 2 KV heads of 16
    assert big._hints.blocks.capacity == 65536 + 10 * 1024 // block_bytes  # device count not reported yet
    big.read_iteration_stats([{"kvCacheStats": {"maxNumBlocks": 1, "usedNumBlocks": 1, "freeNumBlocks": 0}}])
    assert big._hints.blocks.capacity == 1 + 10 * 1024 // block_bytes
    big._events.salts.submitted(list(range(BS)), "")
    big.translate_events([stored(list(range(1, 40)), list(range(39 * BS)))])
    assert len(big._hints.blocks) == len(big._events.cached()) == big._hints.blocks.capacity  # both maps bounded
    big.translate_events([{"event_id": 1, "data": {"type": "removed", "block_hashes": list(range(1, 40))}}])
    assert len(big._hints.blocks) == len(big._events.cached()) == 0


async def test_counters_count_paused_blocks_sent_to_the_host_and_the_host_blocks_warm_ups_cover() -> None:
    llm = FakeLLM([Completion([7], "length")])
    e = cached(llm)
    assert e.hint_counters() == (0, 0)
    e.translate_events([moved(903, to_host=True)])  # not paused yet: TensorRT-LLM's own eviction
    await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, PAUSE)
    e.translate_events([moved(901, to_host=True), moved(902, to_host=True), moved(777, to_host=True)])
    assert e.hint_counters() == (2, 0)
    assert await e.hint_prefix("s", HASHES, ROOT_BLOCK_HASH, RESUME) == 3
    assert e.hint_counters() == (2, 3)  # the three were on the host tier when the warm-up went
    e.translate_events([moved(h, to_host=False) for h in (901, 902, 903)])
    assert e.hint_counters() == (2, 3)
    await e.close()
