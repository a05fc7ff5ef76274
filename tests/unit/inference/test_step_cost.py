"""The measured step price: it recovers a step cost it observed, and the draft-length policy priced
by it verifies drafts only where they pay, on the CPU reference engine too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from inference_helpers import make_core, run_all

from loopwire.common.model_def import dummy_definition
from loopwire.inference.config import EngineConfig, model_preset
from loopwire.inference.cost_model import CostModel
from loopwire.inference.draft_length import AcceptanceStats, DraftLengthPolicy
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.simulated_engine import simulated_core
from loopwire.inference.step_cost import MeasuredStepCost, features

chunk_sets = st.lists(st.tuples(st.integers(0, 4096), st.integers(1, 17)), min_size=1, max_size=16)


def _seconds(coef: tuple[float, ...], chunks: list[tuple[int, int]], rows: int) -> float:
    """A machine whose step costs a fixed part, a part per token, one per attended key position
    (each new token attends to its context and the new tokens before it) and one per logits row."""
    a, per_token, per_key, per_row = coef
    keys = sum(ctx + i + 1 for ctx, n in chunks for i in range(n))
    return a + per_token * sum(n for _, n in chunks) + per_key * keys + per_row * rows


@settings(max_examples=40, deadline=None)
@given(coef=st.tuples(st.floats(1e-3, 0.1), st.floats(1e-4, 0.02), st.floats(0, 1e-5), st.floats(0, 5e-3)),
       steps=st.lists(chunk_sets, min_size=12, max_size=40), query=chunk_sets)
def test_the_fit_prices_a_step_as_the_machine_that_ran_the_observed_ones(coef, steps, query) -> None:
    cost = MeasuredStepCost(decay=1.0)
    rng = np.random.default_rng(len(steps))
    design = []
    for chunks in steps:  # decode steps (a logits row per token) and prefill-like ones (one row each)
        rows = sum(n for _, n in chunks) if rng.random() < 0.7 else len(chunks)
        cost.observe(chunks, rows, _seconds(coef, chunks, rows))
        design.append(features(chunks, rows))
    asked = features(query, sum(n for _, n in query))
    # Only a step whose features the observed ones span has one price (twelve one-token decode
    # steps say nothing about a step of two sequences: a fixed part and a part per token trade off).
    assume(np.linalg.matrix_rank(np.array([*design, asked])) == np.linalg.matrix_rank(np.array(design)))
    want = _seconds(coef, query, sum(n for _, n in query))
    assert cost.step_seconds(query) == pytest.approx(want, rel=1e-6, abs=1e-9)


def test_before_enough_steps_rows_are_free_and_an_empty_step_costs_nothing() -> None:
    cost = MeasuredStepCost(min_steps=8)
    for _ in range(7):
        cost.observe([(100, 1)], 1, 0.05)
    assert cost.coefficients() is None
    assert cost.step_seconds([(100, 9)]) == cost.step_seconds([(100, 1)])
    assert cost.step_seconds([]) == 0.0
    with pytest.raises(ValueError):
        MeasuredStepCost(decay=0.0)


def _cpu_like(per_row: float) -> MeasuredStepCost:
    """Steps of one sequence at 1..9 rows, 40 ms plus ``per_row`` a row."""
    cost = MeasuredStepCost()
    for rows in [1, 2, 3, 5, 9] * 4:
        cost.observe([(400, rows)], rows, 0.040 + per_row * rows)
    return cost


def _policy(cost: MeasuredStepCost, accept: float) -> DraftLengthPolicy:
    stats = AcceptanceStats(8, prior_weight=1000.0, prior_accept=accept)  # acceptance known
    return DraftLengthPolicy(cost, 8, explore_every=0, stats=stats)


def test_a_costly_row_and_rare_acceptance_turn_speculation_off_and_free_rows_verify_it_all() -> None:
    assert _policy(_cpu_like(0.013), accept=0.05).cap([400]) == 0
    assert _policy(_cpu_like(0.0), accept=0.5).cap([400]) == 8
    mid = _policy(_cpu_like(0.013), accept=0.7).cap([400])
    assert 1 <= mid < 8  # pays for the likely positions only


def test_the_reference_engine_prices_its_drafts_by_its_own_steps(tiny_model) -> None:
    core = make_core(tiny_model)
    assert core.step_cost is not None and core.draft_policy is not None
    assert core.draft_policy.cost is core.step_cost
    run_all(core, [GenerationRequest("a", list(range(1, 40)), 12, stop_token_ids=())])
    assert core.step_cost.steps == core.steps  # every step it ran was measured
    config = EngineConfig(model=model_preset("tiny"))
    assert simulated_core(config, CostModel.named("h200", "8b"), dummy_definition())[0].step_cost is None
    assert make_core(tiny_model, draft_length="fixed").draft_policy is None
