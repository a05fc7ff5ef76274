"""Draft length by the roofline: the measured acceptance is exact for truncation, the cap is the
whole draft at batch 1 and nothing at a compute-bound batch, and a capped replica emits exactly
what it emits without speculation (DESIGN §4)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import dummy_definition
from loopwire.inference.config import EngineConfig
from loopwire.inference.cost_model import CostModel
from loopwire.inference.draft_length import AcceptanceStats, DraftLengthPolicy
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.simulated_engine import simulated_core

COST = CostModel.named("h200", "8b")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=40), st.integers(0, 12))
def test_expected_tokens_equal_the_mean_of_truncated_drafts(drafts: list[tuple[int, int]], k: int) -> None:
    stats = AcceptanceStats(12, decay=1.0, prior_weight=0.0)
    drafts = [(length, min(acc, length)) for length, acc in drafts]
    for length, acc in drafts:
        stats.observe(12, length, acc)
    acc, length = stats.expected(k)
    assert abs(acc - sum(min(a, k) for _, a in drafts) / len(drafts)) < 1e-9
    assert abs(length - sum(min(n, k) for n, _ in drafts) / len(drafts)) < 1e-9


def _policy(rate: float) -> DraftLengthPolicy:
    """A policy whose drafts are full length and accepted position by position with ``rate``."""
    stats = AcceptanceStats(16, decay=1.0, prior_weight=1000.0, prior_accept=rate)
    return DraftLengthPolicy(COST, 16, stats=stats)


def test_the_whole_draft_pays_at_batch_1_and_none_at_a_compute_bound_batch() -> None:
    k1, speedup1 = _policy(0.6).best([4000])
    assert k1 == 16 and speedup1 > 2.0
    k64, speedup64 = _policy(0.6).best([4000] * 64)
    assert 0 < k64 < 16 and speedup64 > 1.0  # decode at 64 x 4k context still reads a lot of KV
    k512, speedup512 = _policy(0.3).best([500] * 512)
    assert (k512, speedup512) == (0, 1.0)
    # compute-bound: a verified token costs what a decoded one does, so even good drafts do not pay
    assert _policy(0.9).best([500] * 512)[0] == 0


def test_positions_above_the_cap_are_measured_on_exploration_steps() -> None:
    policy = DraftLengthPolicy(COST, 8, explore_every=4)
    caps = [policy.cap([100] * 2048) for _ in range(8)]
    assert caps.count(8) == 2 and caps.count(0) == 6


def _replica(draft_length: str, num_draft_tokens: int = 8):  # type: ignore[no-untyped-def]
    config = EngineConfig(model=COST.model, num_kv_blocks=COST.kv_blocks_that_fit(16), max_batch_tokens=16384,
                          max_running=512, num_draft_tokens=num_draft_tokens, draft_length=draft_length)
    return simulated_core(config, COST, dummy_definition())[0]


def _run(core, n: int, speculative: bool) -> tuple[dict[str, list[int]], int, int]:  # type: ignore[no-untyped-def]
    """n concurrent requests whose outputs repeat their prompts: tokens, drafted tokens, steps."""
    stop = tuple(dummy_definition().stop_token_ids)
    for i in range(n):
        phrase = [1000 + i, 1001 + i, 1002 + i, 1003 + i]
        core.add(GenerationRequest(f"r{i}", phrase * 8, 40, stop_token_ids=stop, oracle=phrase * 10,
                                   speculative=speculative))
    tokens: dict[str, list[int]] = {}
    proposed = 0
    while core.has_work():
        for out in core.step():
            tokens.setdefault(out.request_id, []).extend(out.token_ids)
            if out.finished is not None:
                proposed += out.finished.usage.draft_tokens_proposed
    return tokens, proposed, core.steps


def test_a_capped_replica_drafts_less_at_high_batch_and_emits_the_same_tokens() -> None:
    plain, _, _ = _run(_replica("fixed"), 400, speculative=False)
    fixed, fixed_drafted, _ = _run(_replica("fixed"), 400, speculative=True)
    capped, capped_drafted, _ = _run(_replica("cost"), 400, speculative=True)
    assert fixed == capped == plain
    assert capped_drafted < fixed_drafted
    _, one_fixed, steps_fixed = _run(_replica("fixed"), 1, speculative=True)
    _, one_capped, steps_capped = _run(_replica("cost"), 1, speculative=True)
    assert (one_capped, steps_capped) == (one_fixed, steps_fixed)  # batch 1: the whole draft, as before
