"""The numpy Llama: checkpoint loading, paged forward == plain forward, cached == recomputed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from inference_helpers import make_core
from safetensors.numpy import save_file

from loopwire.inference.config import ModelConfig
from loopwire.inference.model import Chunk, LlamaModel
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.weights import dummy_weights, load_checkpoint, load_weights

TINY = ModelConfig(vocab_size=320, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0)


def plain_forward(config: ModelConfig, w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """Textbook Llama, no cache, no paging, float64: logits of every position."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    n, hd = len(ids), config.head_dim
    nh, kvh = config.num_attention_heads, config.num_key_value_heads

    def norm(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + config.rms_norm_eps) * g

    inv = 1.0 / config.rope_theta ** (np.arange(0, hd, 2) / hd)
    ang = np.outer(np.arange(n), inv)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x: np.ndarray) -> np.ndarray:  # [n, heads, hd]
        rot = np.concatenate([-x[..., hd // 2:], x[..., : hd // 2]], -1)
        return x * cos[:, None] + rot * sin[:, None]

    x = w["model.embed_tokens.weight"][ids]
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        h = norm(x, w[p + "input_layernorm.weight"])
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, nh, hd))
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, kvh, hd))
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, kvh, hd)
        out = np.zeros((n, nh, hd))
        for head in range(nh):
            kv = head // (nh // kvh)
            s = q[:, head] @ k[:, kv].T / np.sqrt(hd)
            s[np.triu_indices(n, 1)] = -np.inf
            a = np.exp(s - s.max(-1, keepdims=True))
            out[:, head] = (a / a.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(n, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = norm(x, w[p + "post_attention_layernorm.weight"])
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    head_w = w["model.embed_tokens.weight"] if config.tie_word_embeddings else w["lm_head.weight"]
    return norm(x, w["model.norm.weight"]) @ head_w.T


def write_checkpoint(directory: Path, config: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    weights = dummy_weights(config, seed)
    (directory / "config.json").write_text(json.dumps(config.to_hf()))
    names = sorted(weights)
    save_file({n: weights[n] for n in names[: len(names) // 2]}, str(directory / "model-00001-of-00002.safetensors"))
    save_file({n: weights[n] for n in names[len(names) // 2 :]}, str(directory / "model-00002-of-00002.safetensors"))
    return weights


def test_checkpoint_logits_match_plain_implementation(tmp_path: Path) -> None:
    written = write_checkpoint(tmp_path, TINY, seed=7)
    config, weights = load_checkpoint(tmp_path)
    assert config.hidden_size == TINY.hidden_size and set(weights) == set(written)
    model = LlamaModel(config, weights)
    ids = list(np.random.default_rng(0).integers(0, TINY.vocab_size, 37))
    expected = plain_forward(config, weights, ids)
    # Paged, chunked: 3 chunks over a shuffled block table, then one decode row.
    store = model.new_kv_store(num_blocks=12, block_size=4)
    table = [5, 2, 7, 0, 11, 1, 6, 3, 4, 9]
    got = []
    for lo, hi in [(0, 10), (10, 29), (29, 36), (36, 37)]:
        got.append(model.forward([Chunk(np.array(ids[lo:hi]), lo, table, hi - lo)], store)[0])
    np.testing.assert_allclose(np.concatenate(got), expected, rtol=1e-4, atol=1e-4)


def test_tied_embeddings_checkpoint(tmp_path: Path) -> None:
    tied = ModelConfig(**{**TINY.__dict__, "tie_word_embeddings": True})
    write_checkpoint(tmp_path, tied, seed=1)
    config, weights = load_weights(str(tmp_path), TINY)
    assert config.tie_word_embeddings and "lm_head.weight" not in weights
    ids = [1, 2, 3, 4, 5]
    store = LlamaModel(config, weights).new_kv_store(4, 4)
    got = LlamaModel(config, weights).forward([Chunk(np.array(ids), 0, [0, 1], 5)], store)[0]
    np.testing.assert_allclose(got, plain_forward(config, weights, ids), rtol=1e-4, atol=1e-4)


def test_checkpoint_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(TINY.to_hf()))
    with pytest.raises(ValueError, match="no .safetensors"):
        load_checkpoint(tmp_path)
    save_file({"model.norm.weight": np.ones(TINY.hidden_size, np.float32)}, str(tmp_path / "m.safetensors"))
    with pytest.raises(ValueError, match="lacks tensor"):
        load_checkpoint(tmp_path)
    with pytest.raises(ValueError, match="dummy:<integer seed>"):
        load_weights("dummy:x", TINY)


def test_cached_prefix_logits_equal_full_recompute(tiny_model: LlamaModel) -> None:
    """DESIGN §3 invariant 5, through the engine: the prefix cache serves the second prompt."""
    seen: list[np.ndarray] = []

    def recording(core):
        inner = core.executor.execute

        def execute(batch):
            results = inner(batch)
            seen.extend(r for r in results if r is not None)
            return results

        core.executor.execute = execute
        return core

    rng = np.random.default_rng(3)
    prefix = [int(t) for t in rng.integers(0, 5000, 150)]
    full = prefix + [int(t) for t in rng.integers(0, 5000, 23)]
    cached = recording(make_core(tiny_model, max_batch_tokens=64))
    cached.add(GenerationRequest("warm", prefix, 1))
    while cached.has_work():
        cached.step()
    cached.add(GenerationRequest("hit", full, 1))
    usage = None
    while cached.has_work():
        for out in cached.step():
            if out.finished:
                usage = out.finished.usage
    assert usage is not None and usage.cached_input_tokens == 144
    recompute = recording(make_core(tiny_model, prefix_cache=False, max_batch_tokens=1024))
    recompute.add(GenerationRequest("cold", full, 1))
    while recompute.has_work():
        recompute.step()
    np.testing.assert_allclose(seen[1], seen[2], rtol=1e-5, atol=1e-5)
