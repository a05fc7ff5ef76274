"""The simulated engine: roofline costs, virtual time, and the shared scheduler at scale."""

from __future__ import annotations

import asyncio

import pytest

from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.inference.config import EngineConfig
from loopwire.inference.cost_model import CostModel, gpu_spec
from loopwire.inference.sequence import FinishReason, GenerationRequest
from loopwire.inference.server import EngineOptions, build_engine
from loopwire.inference.simulated_engine import plain_id_range, simulated_core

MODEL = dummy_definition()


def test_decode_is_bandwidth_bound_and_prefill_compute_bound() -> None:
    cost = CostModel.named("h200", "8b")
    assert 7.9e9 < cost.model.num_params < 8.2e9  # Llama 3.1 8B
    assert cost.kv_bytes_per_token == 128 * 1024
    decode = cost.step_seconds([(1000, 1)])
    weights_over_bw = cost.weight_bytes / (4.8e12 * 0.8)
    assert weights_over_bw < decode < weights_over_bw * 1.2
    # Decode batches nearly for free; prefill scales with tokens.
    assert cost.step_seconds([(1000, 1)] * 32) < 1.5 * decode
    prefill = cost.step_seconds([(0, 8192)])
    flops_time = 2 * cost.model.num_params * 8192 / (989e12 * 0.65)
    assert prefill > flops_time and prefill / cost.step_seconds([(0, 4096)]) > 1.9
    # A faster GPU is faster; more memory holds more KV.
    assert CostModel.named("b200", "8b").step_seconds([(0, 4096)]) < prefill
    assert CostModel.named("h200", "8b").kv_blocks_that_fit(16) > CostModel.named("h100", "8b").kv_blocks_that_fit(16)
    with pytest.raises(ValueError, match="unknown GPU"):
        gpu_spec("tpu")


def test_virtual_clock_advances_by_modelled_time_and_replay_uses_the_oracle() -> None:
    cost = CostModel.named("h200", "8b")
    core, executor = simulated_core(EngineConfig(model=cost.model, num_kv_blocks=10_000, max_batch_tokens=8192), cost, MODEL)
    oracle = ChatPrompt(MODEL).output_ids("hello " * 40, [])
    core.add(GenerationRequest("r", list(range(1, 3000)), 4096, stop_token_ids=tuple(MODEL.stop_token_ids), oracle=oracle))
    tokens: list[int] = []
    fin = None
    while core.has_work():
        for out in core.step():
            tokens += out.token_ids
            fin = out.finished or fin
    assert tokens == oracle and fin is not None and fin.reason is FinishReason.STOP
    assert core.clock.now() == pytest.approx(executor.busy_seconds)
    assert fin.timings.ttft_us == pytest.approx(fin.timings.queue_us + fin.timings.prefill_us, abs=2)
    assert fin.usage.verification_steps < len(oracle)  # "hello hello ..." is easy to draft
    per_step = fin.timings.decode_us / (fin.usage.verification_steps - 1)
    assert 0.8 * cost.step_seconds([(3000, 1)]) * 1e6 < per_step < 1.5 * cost.step_seconds([(3000, 9)]) * 1e6


def test_without_oracle_tokens_are_reproducible_plain_text() -> None:
    cost = CostModel.named("h100", "1b")
    runs = []
    for _ in range(2):
        core, _ = simulated_core(EngineConfig(model=cost.model, num_kv_blocks=1000), cost, MODEL)
        core.add(GenerationRequest("r", [1, 2, 3], 50))
        tokens = []
        while core.has_work():
            for out in core.step():
                tokens += out.token_ids
        runs.append(tokens)
    assert runs[0] == runs[1] and len(runs[0]) == 50
    # Plain text of the model's tokenizer: no special or added token (a stop id would end the turn).
    specials = set(MODEL.tokenizer.added_tokens.values())
    assert not set(runs[0]) & specials and max(runs[0]) < MODEL.vocab_size
    assert all(MODEL.tokenizer.token_bytes(t) for t in runs[0])


def test_plain_id_range_is_the_longest_run_without_special_tokens() -> None:
    lo, hi = plain_id_range(MODEL)
    specials = set(MODEL.tokenizer.added_tokens.values())
    assert (lo, hi) == (0, min(specials))  # cl100k: every ordinary token comes before <|endoftext|>
    assert not any(lo <= s < hi for s in specials)


def test_hundreds_of_sessions_in_virtual_time_and_batching_beats_serial() -> None:
    cost = CostModel.named("h200", "8b")
    config = EngineConfig(model=cost.model, num_kv_blocks=cost.kv_blocks_that_fit(16), max_batch_tokens=8192,
                          max_running=256)
    core, _ = simulated_core(config, cost, MODEL)
    for i in range(200):
        core.add(GenerationRequest(f"s{i}", [7] * 16 + list(range(1000 + i, 1500 + i)), 100))
    done = 0
    while core.has_work():
        done += sum(1 for out in core.step() if out.finished)
    assert done == 200
    batched = core.clock.now()
    serial = 200 * (cost.step_seconds([(0, 516)]) + 99 * cost.step_seconds([(516, 1)]))
    assert batched < serial / 10
    # The shared 16-token prefix hits, except for requests admitted in the step that computes it.
    assert core.blocks.hit_tokens >= 0.8 * 199 * 16


async def test_time_scale_zero_never_sleeps_and_positive_scale_paces() -> None:
    fast = build_engine(EngineOptions(engine="simulated", time_scale=0.0))
    req = GenerationRequest("r", list(range(1, 200)), 200)
    outs = [o async for o in fast.generate(req)]
    assert outs[-1].finished is not None and outs[-1].finished.usage.output_tokens == 200
    modelled = fast.core.clock.now()  # type: ignore[attr-defined]
    assert modelled > 0.5  # 200 decode steps of an 8B model: seconds of GPU time, replayed at once
    await fast.close()
    paced = build_engine(EngineOptions(engine="simulated", time_scale=1e-6))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    outs = [o async for o in paced.generate(GenerationRequest("r", list(range(1, 200)), 20))]
    assert outs[-1].finished is not None and loop.time() >= t0
    await paced.close()
