"""Log-probabilities from the reference engine: what they are of, and that speculation and the
replica's coalescing never change them or their alignment with the tokens.

The reference is a plain numpy ``log_softmax`` over the model's own logits for the same
sequence, computed by a separate full forward pass (no KV cache reuse, no drafts)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.inference.config import EngineConfig, model_preset
from loopwire.inference.engine_core import EngineCore
from loopwire.inference.logprobs import TokenLogprobs, certain, token_logprobs
from loopwire.inference.model import Chunk, LlamaModel
from loopwire.inference.outbox import Outbox
from loopwire.inference.reference_engine import reference_core
from loopwire.inference.sampling import SamplingSettings
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.trtllm_requests import output_logprobs
from loopwire.inference.weights import dummy_weights

FAST = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    config = model_preset("tiny")
    return LlamaModel(config, dummy_weights(config, 3))


def core_for(model: LlamaModel, **changes: object) -> EngineCore:
    return reference_core(EngineConfig(model=model.config, num_kv_blocks=256, max_batch_tokens=256).with_(**changes),
                          model)


def generate(core: EngineCore, prompt: list[int], k: int, *, speculative: bool = False, temperature: float = 0.0,
             seed: int = 0, max_tokens: int = 8) -> tuple[list[int], list[TokenLogprobs]]:
    core.add(GenerationRequest("r", list(prompt), max_tokens=max_tokens, stop_token_ids=(),
                               sampling=SamplingSettings(temperature=temperature, seed=seed),
                               speculative=speculative, top_logprobs=k))
    tokens: list[int] = []
    lps: list[TokenLogprobs] = []
    while core.has_work():
        for out in core.step():
            if out.token_ids:  # aligned in every output that carries tokens
                assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids)
                tokens += out.token_ids
                lps += out.logprobs
    return tokens, lps


def reference_logprobs(model: LlamaModel, ids: list[int], start: int) -> np.ndarray:
    """log_softmax of the logits at positions ``start - 1 ..`` predicting ids[start:], from one full pass."""
    block = 16
    blocks = -(-len(ids) // block)
    store = model.new_kv_store(blocks, block)
    logits = model.forward([Chunk(np.asarray(ids, np.int64), 0, list(range(blocks)), len(ids))], store)[0]
    z = logits.astype(np.float64)
    z -= z.max(axis=-1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return lp[start - 1 : len(ids) - 1]


prompts = st.lists(st.integers(0, 400), min_size=3, max_size=16)


@FAST
@given(prompt=prompts, k=st.integers(0, 20))
def test_greedy_logprobs_are_the_models_log_softmax(model, prompt, k):
    tokens, lps = generate(core_for(model), prompt, k)
    ref = reference_logprobs(model, prompt + tokens, len(prompt))
    for i, (token, lp) in enumerate(zip(tokens, lps, strict=True)):
        assert lp.logprob <= 0.0
        assert lp.logprob == pytest.approx(ref[i, token], abs=1e-4)
        assert len(lp.top) == k
        values = [v for _, v in lp.top]
        assert values == sorted(values, reverse=True) and all(v <= 0.0 for v in values)
        if k:
            assert lp.top[0][0] == token  # greedy: the sampled token is the most likely
            want = np.sort(ref[i])[::-1][:k]
            assert np.allclose(values, want, atol=1e-4)


@FAST
@given(prompt=prompts, k=st.integers(0, 5), temperature=st.sampled_from([0.0, 0.8]), seed=st.integers(0, 9))
def test_speculation_changes_neither_tokens_nor_logprobs(model, prompt, k, temperature, seed):
    # A repetitive prompt makes the prompt-lookup drafter propose, so drafts are really accepted.
    prompt = (prompt * 3)[:40]
    plain = generate(core_for(model, drafter="prompt_lookup"), prompt, k, temperature=temperature, seed=seed)
    spec_core = core_for(model, drafter="prompt_lookup")
    spec = generate(spec_core, prompt, k, speculative=True, temperature=temperature, seed=seed)
    if temperature == 0.0:
        assert spec[0] == plain[0]
    # Whatever was sampled, each token's entry is the model's distribution at its position.
    ref = reference_logprobs(model, prompt + spec[0], len(prompt))
    for i, (token, lp) in enumerate(zip(*spec, strict=True)):
        assert lp.logprob == pytest.approx(ref[i, token], abs=1e-4)
    if temperature == 0.0:
        for a, b in zip(plain[1], spec[1], strict=True):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
            assert [t for t, _ in a.top] == [t for t, _ in b.top]


def test_speculation_really_accepts_drafts_with_logprobs(model):
    prompt = [5, 6, 7, 8, 9] * 12
    core = core_for(model, drafter="prompt_lookup")
    tokens, lps = generate(core, prompt, 2, speculative=True, max_tokens=24)
    assert len(lps) == len(tokens) == 24
    assert core.steps < 24 + 1  # fewer verification steps than tokens: drafts were accepted
    ref = reference_logprobs(model, prompt + tokens, len(prompt))
    assert np.allclose([lp.logprob for lp in lps], [ref[i, t] for i, t in enumerate(tokens)], atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(st.integers(0, 99), min_size=1, max_size=5), min_size=1, max_size=8))
async def test_coalesced_batches_keep_logprobs_with_their_tokens(batches):
    """However the replica joins steps into one message, entry i belongs to token i."""
    outbox = Outbox(window_s=10.0)  # a long window: everything after the first batch joins
    for batch in batches:
        outbox.tokens("r", batch, [TokenLogprobs(-t / 100.0, ((t, -t / 100.0),)) for t in batch])
    outbox.close()
    tokens: list[int] = []
    pairs: list[tuple[int, float, int]] = []
    while (message := await outbox.take()) is not None:
        b = message.tokens
        assert len(b.logprobs) == len(b.token_ids)
        tokens += b.token_ids
        pairs += [(t, lp.logprob, lp.top[0].token_id) for t, lp in zip(b.token_ids, b.logprobs, strict=True)]
    assert tokens == [t for batch in batches for t in batch]
    assert all(t == top and lp == pytest.approx(-t / 100.0) for t, lp, top in pairs)


def test_no_logprobs_unless_asked(model):
    core = core_for(model)
    core.add(GenerationRequest("r", [1, 2, 3], max_tokens=4, stop_token_ids=()))
    while core.has_work():
        assert all(out.logprobs is None for out in core.step())


def test_token_logprobs_ranks_ties_by_id_and_caps_at_vocab():
    row = np.array([0.0, 1.0, 1.0, -3.0])
    lp = token_logprobs(row, 3, 20)
    assert [t for t, _ in lp.top] == [1, 2, 0, 3]
    assert np.isclose(sum(np.exp(v) for _, v in lp.top), 1.0)
    assert certain(7, 2) == TokenLogprobs(0.0, ((7, 0.0),)) and certain(7, 0).top == ()


class _Logprob:
    def __init__(self, logprob: float, rank: int) -> None:
        self.logprob, self.rank = logprob, rank


class _Completion:
    def __init__(self, logprobs: list) -> None:  # type: ignore[type-arg]
        self.logprobs = logprobs


def test_trtllm_logprobs_map_to_ours():
    completion = _Completion([{4: _Logprob(-0.1, 1), 9: _Logprob(-2.5, 2)}, {9: _Logprob(-0.7, 1)}, -1.5])
    out = output_logprobs(completion, 0, [4, 5, 6, 7], 2)
    assert out[0] == TokenLogprobs(-0.1, ((4, -0.1), (9, -2.5)))
    assert out[1].logprob == -0.7 and out[1].top == ((9, -0.7),)  # missing sampled token: an upper bound
    assert out[2] == TokenLogprobs(-1.5)
    assert out[3] == certain(7, 2)  # not reported at all
