"""The fair prefill policy: a short prompt that arrives while a long one prefills runs its prefill
in the next step, decodes never stall behind a prefill, forks of one conversation compute their
shared prefix once, and priorities still come first. Steps are counted, times are the simulated
engine's virtual clock: nothing here reads a wall clock."""

from __future__ import annotations

import pytest
from inference_helpers import make_core, run_all

from loopwire.common.model_def import dummy_definition
from loopwire.inference.config import EngineConfig
from loopwire.inference.cost_model import CostModel
from loopwire.inference.engine_core import EngineCore
from loopwire.inference.kv_cache import BlockManager
from loopwire.inference.kv_manager import KvCacheManager
from loopwire.inference.scheduler import Scheduler
from loopwire.inference.sequence import GenerationRequest

LONG = list(range(1000, 3000))  # 2,000 tokens


def _steps_until_first_token(core: EngineCore, request_id: str) -> int:
    for n in range(1, 10_000):
        if any(o.request_id == request_id and o.token_ids for o in core.step()):
            return n
    raise AssertionError(f"{request_id} never got a token")


def _simulated(policy: str) -> tuple[EngineCore, CostModel]:
    from loopwire.inference.simulated_engine import simulated_core

    cost = CostModel.named("h200", "8b")
    config = EngineConfig(model=cost.model, num_kv_blocks=cost.kv_blocks_that_fit(16), max_batch_tokens=8192,
                          max_running=256)
    core, _ = simulated_core(config, cost, dummy_definition())
    core.scheduler.policy = policy
    return core, cost


@pytest.mark.parametrize("policy,waits", [("fair", False), ("fcfs", True)])
def test_a_short_prompt_gets_its_prefill_in_the_next_step(tiny_model, policy, waits) -> None:
    core = make_core(tiny_model, num_kv_blocks=512, max_batch_tokens=256)
    core.scheduler.policy = policy
    core.add(GenerationRequest("long", LONG, 4, cache_salt="a"))
    core.step()  # the long prompt is prefilling
    core.add(GenerationRequest("short", [5, 6, 7] * 12, 4, cache_salt="b"))
    steps = _steps_until_first_token(core, "short")
    if waits:  # the old policy: behind every remaining chunk of the long prompt
        assert steps >= len(LONG) // 256
    else:
        assert steps == 1


def _recording(core: EngineCore) -> list[list[tuple[str, int, bool]]]:
    """Every step's plan: (request id, input tokens, decoding) per scheduled sequence."""
    plans: list[list[tuple[str, int, bool]]] = []
    schedule = core.scheduler.schedule

    def record():  # type: ignore[no-untyped-def]
        batch = schedule()
        plans.append([(item.seq.request_id, len(item.token_ids), item.seq.is_decoding) for item in batch])
        return batch

    core.scheduler.schedule = record  # type: ignore[method-assign]
    return plans


@pytest.mark.parametrize("policy", ["fair", "fcfs"])
def test_decodes_run_every_step_while_a_long_prompt_prefills(tiny_model, policy) -> None:
    core = make_core(tiny_model, num_kv_blocks=512, max_batch_tokens=64)
    core.scheduler.policy = policy
    core.add(GenerationRequest("long", LONG, 1))
    core.step()
    core.add(GenerationRequest("decoder", [1, 2, 3], 200, speculative=False))
    plans = _recording(core)
    while "long" in core.seqs:
        core.step()
    decoding = [("decoder", 1, True) in plan for plan in plans[1:]]  # after its own prefill
    assert len(decoding) >= len(LONG) // 64 - 2
    assert all(decoding) if policy == "fair" else not any(decoding)  # fcfs: not even admitted


def test_no_prefill_chunk_is_larger_than_the_cap(tiny_model) -> None:
    core = make_core(tiny_model, num_kv_blocks=512, max_batch_tokens=256)
    core.scheduler.prefill_chunk = 48
    plans = _recording(core)
    run_all(core, [GenerationRequest(f"r{i}", [i + 1] * 300, 2) for i in range(3)])
    assert all(sum(n for _, n, _ in plan) <= 256 for plan in plans)
    assert all(n <= 48 for plan in plans for _, n, decoding in plan if not decoding)
    assert max(len(plan) for plan in plans) == 3  # the three prefill side by side


def test_the_same_outputs_under_either_policy(tiny_model) -> None:
    """Only the order of work changes: greedy outputs are equal."""
    prompts = [list(range(1, 400)), [7, 8, 9] * 5, list(range(50, 130))]
    out = {}
    for policy in ("fcfs", "fair"):
        core = make_core(tiny_model, num_kv_blocks=512, max_batch_tokens=96)
        core.scheduler.policy = policy
        out[policy], _ = run_all(core, [GenerationRequest(f"r{i}", p, 12) for i, p in enumerate(prompts)])
        assert core.blocks.num_used == 0
    assert out["fair"] == out["fcfs"]


def test_forks_of_one_conversation_compute_their_shared_prefix_once() -> None:
    shared = list(range(10_000, 14_000))
    core, _ = _simulated("fair")
    computed = 0
    execute = core.executor.execute

    def counting(batch):  # type: ignore[no-untyped-def]
        nonlocal computed
        computed += sum(len(item.token_ids) for item in batch if not item.seq.is_decoding)
        return execute(batch)

    core.executor.execute = counting  # type: ignore[method-assign]
    _, fin = run_all(core, [GenerationRequest(f"fork{i}", shared + [i + 1] * 40, 1) for i in range(8)])
    assert all(f.usage.output_tokens == 1 for f in fin.values())
    assert computed < len(shared) + 8 * 60  # the prefix once, then each fork's own tail
    assert sum(f.usage.cached_input_tokens for f in fin.values()) >= 7 * (len(shared) - 16)


def test_higher_priority_prefills_first_within_the_budget(tiny_model) -> None:
    core = make_core(tiny_model, num_kv_blocks=512, max_batch_tokens=32)
    core.scheduler.prefill_chunk = 32
    core.add(GenerationRequest("low", [3] * 20, 2, priority=0))
    core.add(GenerationRequest("high", list(range(1, 200)), 2, priority=5))
    batch = core.scheduler.schedule()
    assert [item.seq.request_id for item in batch] == ["high"]


def test_preemption_still_completes_every_request_under_the_fair_policy(tiny_model) -> None:
    tight = make_core(tiny_model, num_kv_blocks=14, max_batch_tokens=64)
    prompts = [[(i * 7 + j) % 97 + 1 for j in range(20 + 7 * i)] for i in range(6)]
    tokens, fin = run_all(tight, [GenerationRequest(f"r{i}", p, 40) for i, p in enumerate(prompts)])
    alone = {}
    for i, p in enumerate(prompts):
        alone.update(run_all(make_core(tiny_model), [GenerationRequest(f"r{i}", p, 40)])[0])
    assert tight.scheduler.num_preemptions > 0 and tokens == alone
    assert all(f.usage.output_tokens == 40 for f in fin.values()) and tight.blocks.num_used == 0


@pytest.mark.parametrize("policy,within", [("fair", True), ("fcfs", False)])
def test_canary_ttft_beside_a_20k_prefill_on_the_simulated_gpu(policy, within) -> None:
    """Virtual time of the simulated H200 + Llama 8B: within 2x of an idle replica under fair."""
    idle_core, _ = _simulated(policy)
    _, fin = run_all(idle_core, [GenerationRequest("canary", list(range(5, 42)), 1, cache_salt="b")])
    idle = fin["canary"].timings.ttft_us
    core, _ = _simulated(policy)
    core.add(GenerationRequest("long", list(range(1000, 21_000)), 1, cache_salt="a"))
    core.step()
    core.add(GenerationRequest("canary", list(range(5, 42)), 1, cache_salt="b"))
    ttft = None
    while core.has_work():
        for out in core.step():
            if out.finished is not None and out.request_id == "canary":
                ttft = out.finished.timings.ttft_us
    assert ttft is not None
    assert (ttft <= 2 * idle) is within


def test_unknown_policy_is_refused() -> None:
    blocks = KvCacheManager(BlockManager(8, 16))
    with pytest.raises(ValueError, match="unknown prefill policy"):
        Scheduler(EngineConfig(), blocks, policy="lifo")
    with pytest.raises(ValueError, match="prefill_chunk"):
        Scheduler(EngineConfig(), blocks, prefill_chunk=0)
