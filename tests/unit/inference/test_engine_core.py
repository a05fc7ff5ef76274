"""The shared engine core on the reference model: lossless speculation, replay, nothing
leaks, preemption, priorities (DESIGN §3 invariants 3 and 6)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inference_helpers import make_core, repetitive_prompt, run_all

from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt, assistant_text
from loopwire.common.recorded import load_session, user_item
from loopwire.gateway.conversation import Conversation
from loopwire.inference.config import model_preset
from loopwire.inference.drafter import Draft
from loopwire.inference.model import LlamaModel
from loopwire.inference.sampling import SamplingSettings, target_probs, verify
from loopwire.inference.sequence import FinishReason, GenerationRequest
from loopwire.inference.weights import dummy_weights
from loopwire.v1 import common_pb2

ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]
SESSIONS = ROOT / "examples" / "sessions"


def _greedy(prompts: list[list[int]], max_tokens: int, **req: object) -> list[GenerationRequest]:
    return [GenerationRequest(f"r{i}", p, max_tokens, **req) for i, p in enumerate(prompts)]  # type: ignore[arg-type]


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 4), k=st.integers(1, 8))
def test_speculative_greedy_equals_plain_greedy_on_random_prompts(tiny_model, seed: int, n: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    prompts = [repetitive_prompt(rng, int(rng.integers(2, 90))) for _ in range(n)]
    plain, _ = run_all(make_core(tiny_model), _greedy(prompts, 40, speculative=False))
    spec, fin = run_all(make_core(tiny_model, num_draft_tokens=k), _greedy(prompts, 40))
    assert spec == plain
    assert all(f.usage.output_tokens == 40 for f in fin.values())


def test_speculation_accepts_drafts_and_needs_fewer_steps() -> None:
    """A model that repeats itself (tied embeddings favour the current token): lookup
    drafts are accepted, steps drop, and the output is still plain greedy's."""
    config = replace(model_preset("tiny"), tie_word_embeddings=True)
    model = LlamaModel(config, dummy_weights(config, 0))
    rng = np.random.default_rng(1)
    prompts = [repetitive_prompt(rng, 60, alphabet=8)]
    plain_core = make_core(model)
    plain, _ = run_all(plain_core, _greedy(prompts, 120, speculative=False))
    spec_core = make_core(model)
    spec, fin = run_all(spec_core, _greedy(prompts, 120))
    assert spec == plain
    usage = fin["r0"].usage
    assert usage.draft_tokens_accepted > 0
    assert usage.verification_steps < usage.output_tokens
    assert spec_core.steps < plain_core.steps


def _session_prompts(name: str, turns: int) -> tuple[list[list[int]], list[list[int]]]:
    """Prompt up to each assistant turn and that turn's recorded output tokens, as the gateway builds them
    (the dummy model's ChatML template; each output kept as the ids the model emitted)."""
    prompt = ChatPrompt(dummy_definition())
    s = load_session(SESSIONS / name)
    conv = Conversation(prompt, "", s.instructions, s.tools)
    conv.append([user_item(s.task)])
    prompts, oracles = [], []
    for turn in s.turns[:turns]:
        out = prompt.output_ids(turn.text, turn.calls)
        prompts.append(conv.prompt_ids())
        oracles.append(out)
        output = [common_pb2.Item(message=common_pb2.Message(
            role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=turn.text)]))]
        output += [common_pb2.Item(function_call=c) for c in turn.calls]
        conv.complete(output, out, assistant_text(turn.text, turn.calls))
        conv.append(list(turn.followups))
    assert conv.outputs_retokenized == 0 and conv.template_breaks == 0  # every prompt extends the previous one
    return prompts, oracles


@pytest.mark.parametrize("name", ["function_calling_simple.traj", "sqlfluff__sqlfluff-2419.traj.json"])
def test_speculative_greedy_equals_plain_on_real_session_prompts(tiny_model, name: str) -> None:
    prompts, _ = _session_prompts(name, 3)
    plain, _ = run_all(make_core(tiny_model, num_kv_blocks=1024), _greedy(prompts, 24, speculative=False))
    spec, _ = run_all(make_core(tiny_model, num_kv_blocks=1024), _greedy(prompts, 24))
    assert spec == plain


def test_replay_oracle_emits_recorded_turns_with_real_verification(tiny_model) -> None:
    """Replaying a real session turn by turn: the oracle's tokens come out, the stop token
    ends each turn, drafts are verified against the oracle, the prefix cache serves the
    previous turns."""
    prompts, oracles = _session_prompts("sqlfluff__sqlfluff-2419.traj.json", 6)
    core = make_core(tiny_model, num_kv_blocks=2048, max_batch_tokens=1024)
    stop = tuple(dummy_definition().stop_token_ids)
    accepted = proposed = steps = out_tokens = 0
    for i, (prompt, oracle) in enumerate(zip(prompts, oracles, strict=True)):
        tokens, fin = run_all(core, [GenerationRequest(f"t{i}", prompt, 4096, stop_token_ids=stop, oracle=oracle)])
        f = fin[f"t{i}"]
        assert tokens[f"t{i}"] == oracle and f.reason is FinishReason.STOP
        assert f.token_ids == prompt + oracle
        if i:
            assert f.usage.cached_input_tokens >= len(prompts[i - 1]) - 16
        accepted += f.usage.draft_tokens_accepted
        proposed += f.usage.draft_tokens_proposed
        steps += f.usage.verification_steps
        out_tokens += f.usage.output_tokens
    assert 0 < accepted <= proposed
    assert steps < out_tokens  # mean acceptance length > 1


def test_oracle_without_stop_token_finishes_by_length(tiny_model) -> None:
    tokens, fin = run_all(make_core(tiny_model), [GenerationRequest("r", [1, 2, 3], 100, oracle=[5, 6, 7])])
    assert tokens["r"] == [5, 6, 7] and fin["r"].reason is FinishReason.LENGTH


def test_stop_token_and_max_tokens(tiny_model) -> None:
    core = make_core(tiny_model)
    first, _ = run_all(core, [GenerationRequest("a", [1, 2, 3], 10, speculative=False)])
    stop = first["a"][3]
    tokens, fin = run_all(make_core(tiny_model), [GenerationRequest("b", [1, 2, 3], 10, stop_token_ids=(stop,))])
    assert tokens["b"] == first["a"][: first["a"].index(stop) + 1] and fin["b"].reason is FinishReason.STOP


def test_thousand_cancellations_leak_no_blocks(tiny_model) -> None:
    """DESIGN §3 invariant 6: cancel at every stage (waiting, prefilling, decoding)."""
    core = make_core(tiny_model, num_kv_blocks=64, max_batch_tokens=48)
    rng = np.random.default_rng(0)
    baseline = core.blocks.num_used
    live: list[str] = []
    cancelled = 0
    for i in range(1000):
        core.add(GenerationRequest(f"c{i}", [int(t) for t in rng.integers(0, 100, rng.integers(1, 40))], 30))
        live.append(f"c{i}")
        if rng.random() < 0.5:
            core.step()
        victim = live.pop(int(rng.integers(0, len(live))))
        if core.cancel(victim):
            cancelled += 1
    for rid in live:
        cancelled += core.cancel(rid)
    core.step()
    assert cancelled == 1000
    assert core.blocks.num_used == baseline and not core.seqs and not core.scheduler.has_work()
    assert core.blocks.num_free == core.blocks.num_blocks


def test_preemption_under_tiny_kv_still_completes_every_request_correctly(tiny_model) -> None:
    rng = np.random.default_rng(2)
    prompts = [repetitive_prompt(rng, int(rng.integers(20, 60))) for _ in range(6)]
    alone = {}
    for i, p in enumerate(prompts):
        tokens, _ = run_all(make_core(tiny_model), [GenerationRequest(f"r{i}", p, 40)])
        alone.update(tokens)
    tight = make_core(tiny_model, num_kv_blocks=14, max_batch_tokens=64)
    tokens, fin = run_all(tight, _greedy(prompts, 40))
    assert tight.scheduler.num_preemptions > 0
    assert tokens == alone
    assert all(f.usage.output_tokens == 40 for f in fin.values())
    assert tight.blocks.num_used == 0


def test_higher_priority_runs_first(tiny_model) -> None:
    core = make_core(tiny_model, max_batch_tokens=32, max_running=1)
    for i, prio in enumerate([0, 5, 1]):
        core.add(GenerationRequest(f"p{prio}", [i + 1] * 20, 3, priority=prio))
    order = []
    while core.has_work():
        order += [o.request_id for o in core.step() if o.finished]
    assert order == ["p5", "p1", "p0"]


def test_retention_hint_keeps_session_blocks_in_cache(tiny_model) -> None:
    core = make_core(tiny_model, num_kv_blocks=8, max_batch_tokens=64)
    prompt = list(range(1, 50))
    run_all(core, [GenerationRequest("a", prompt, 2, session_id="s", retention_seconds=3600)])
    held = core.blocks.num_used
    assert held > 0 and core.blocks.num_retentions == 1
    run_all(core, [GenerationRequest("b", list(range(200, 230)), 2)])  # pressure from another session
    _, fin = run_all(core, [GenerationRequest("c", prompt + [7, 8], 2)])
    assert fin["c"].usage.cached_input_tokens == 48


def test_rejection_sampling_keeps_the_target_distribution() -> None:
    """Temperature > 0: the first emitted token is distributed as the target, whatever the draft."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 6)).astype(np.float32)
    settings_ = SamplingSettings(temperature=0.8)
    p = target_probs(logits, settings_)[0]
    counts = np.zeros(6)
    for _ in range(20_000):
        counts[verify(logits, Draft([2, 4]), settings_, rng)[0]] += 1
    assert np.abs(counts / counts.sum() - p).max() < 0.015


def test_top_p_truncates_the_nucleus() -> None:
    p = target_probs(np.log(np.array([[0.5, 0.3, 0.15, 0.05]])), SamplingSettings(temperature=1.0, top_p=0.7))
    np.testing.assert_allclose(p[0], [0.625, 0.375, 0, 0], atol=1e-9)
