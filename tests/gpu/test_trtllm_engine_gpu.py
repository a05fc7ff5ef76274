"""The TensorRT-LLM engine on a real GPU (make test-gpu). Needs ``tensorrt_llm`` and a
Llama checkpoint directory (Hugging Face layout: the model definition is read from it too)
whose path is in ``LOOPWIRE_TRTLLM_MODEL``."""

from __future__ import annotations

import asyncio
import os

import pytest

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hashes
from loopwire.inference.engine import KvHint
from loopwire.inference.sequence import FinishReason, GenerationRequest
from loopwire.inference.server import EngineOptions, build_engine

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine():
    pytest.importorskip("tensorrt_llm")
    model = os.environ.get("LOOPWIRE_TRTLLM_MODEL")
    if not model:
        pytest.skip("set LOOPWIRE_TRTLLM_MODEL to a Llama checkpoint")
    engine = build_engine(EngineOptions(engine="trtllm", model=model, block_size=32))
    assert engine.definition.source == model and engine.vocab_size == engine.definition.vocab_size
    return engine


async def test_streams_tokens_and_reuses_the_prefix(engine) -> None:
    prompt = list(range(1000, 1600))
    outs = [o async for o in engine.generate(GenerationRequest("a", prompt, 16))]
    assert outs[-1].finished is not None and outs[-1].finished.usage.output_tokens == 16
    again = [o async for o in engine.generate(GenerationRequest("b", prompt + [5, 6], 4))]
    assert again[-1].finished is not None and again[-1].finished.usage.cached_input_tokens >= 512


async def test_oracle_replay_emits_the_recording(engine) -> None:
    oracle = [1200, 1201, 1202, 1203]
    outs = [o async for o in engine.generate(GenerationRequest("o", list(range(1000, 1100)), 16, oracle=oracle))]
    tokens = [t for o in outs for t in o.token_ids]
    assert tokens == oracle and outs[-1].finished is not None
    assert outs[-1].finished.reason in (FinishReason.LENGTH, FinishReason.STOP)


async def test_a_resume_hint_warms_the_prefix_up_and_the_next_request_reuses_it(engine) -> None:
    prompt = list(range(2000, 2600))
    [o async for o in engine.generate(GenerationRequest("w", prompt, 4))]
    hashes = block_hashes(prompt, 32)
    async with asyncio.timeout(30):  # the stored events reach the engine's block map
        while hashes[-1] not in engine._hints.blocks:
            await asyncio.sleep(0.05)
    assert await engine.hint_prefix("s", hashes, ROOT_BLOCK_HASH, KvHint(resume=True, seconds=0)) == len(hashes)
    await asyncio.gather(*list(engine._warm_ups))  # its output went to no client, nothing failed
    again = [o async for o in engine.generate(GenerationRequest("w2", prompt + [5, 6], 4))]
    assert again[-1].finished is not None and again[-1].finished.usage.cached_input_tokens >= len(hashes) * 32
