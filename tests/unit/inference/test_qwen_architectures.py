"""Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm, own head size) on the numpy model, checked
against llama.cpp.

Fixtures (tests/fixtures/tiny_gguf): qwen2-tiny.gguf and qwen3-tiny.gguf, random float32
weights written by scripts/tiny_gguf_fixtures.py (2 layers, hidden 64, 4 heads / 2 kv heads;
Qwen3 with head size 32, untied output; a 512-token BPE and a ChatML template), and
NAME.llama_cpp.npz, llama.cpp's logits (scripts/llama_cpp_golden_archs.py, llama-cpp-python
0.3.36, F32 KV cache) at every position of two prompts + 16 greedy tokens (39 and 93
positions, 512 logits each). Each file is loaded the way a user's is (``load_weights`` on the
path, ``load_definition`` for its tokenizer and template) and also converted to a Hugging
Face directory (config.json + safetensors) to check that loader on the same numbers.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from inference_helpers import make_core, run_all

from loopwire.common.model_def import load_definition
from loopwire.inference.config import ModelConfig
from loopwire.inference.model import Chunk, LlamaModel
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.weights import load_checkpoint, load_weights

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tiny_gguf"
MODELS = ("qwen2-tiny", "qwen3-tiny")
# float32 weights on both sides: only summation order differs (measured: max 6.7e-6 Qwen2, 8.7e-6 Qwen3).
MAX_ABS_DELTA = 1e-4
BLOCK = 16


def _golden(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / f"{name}.llama_cpp.npz") as f:
        return {k: f[k] for k in f.files}


def _meta(golden: dict[str, np.ndarray]) -> dict:
    return json.loads(str(golden["meta"]))


def _prompts(golden: dict[str, np.ndarray]) -> list[str]:
    return sorted(_meta(golden)["prompts"])


def _logits(model: LlamaModel, ids: np.ndarray) -> np.ndarray:
    blocks = -(-len(ids) // BLOCK)
    return model.forward([Chunk(ids.astype(np.int64), 0, list(range(blocks)), len(ids))],
                         model.new_kv_store(blocks, BLOCK))[0]


@pytest.fixture(scope="module", params=MODELS)
def case(request: pytest.FixtureRequest) -> tuple[str, ModelConfig, LlamaModel, dict[str, np.ndarray]]:
    name = request.param
    config, weights = load_weights(str(FIXTURES / f"{name}.gguf"), ModelConfig(1, 1, 1, 1, 1, 1))
    return name, config, LlamaModel(config, weights), _golden(name)


def test_config_read_from_the_gguf(case) -> None:
    name, config, _, _ = case
    arch = name.split("-")[0]
    assert config.architecture == arch
    assert (config.attention_bias, config.qk_norm) == ((True, False) if arch == "qwen2" else (False, True))
    assert config.head_dim == (16 if arch == "qwen2" else 32)
    assert config.tie_word_embeddings == (arch == "qwen2")


def test_logits_match_llama_cpp(case) -> None:
    name, _, model, golden = case
    worst, positions = 0.0, 0
    for prompt in _prompts(golden):
        ids = np.concatenate([golden[f"{prompt}/prompt"], golden[f"{prompt}/greedy"]])
        theirs = golden[f"{prompt}/logits"]
        ours = _logits(model, ids)
        assert ours.shape == theirs.shape
        worst = max(worst, float(np.abs(ours - theirs).max()))
        positions += len(ids)
        np.testing.assert_array_equal(ours.argmax(-1), theirs.argmax(-1))
    print(f"\n{name} vs llama.cpp: {positions} positions x {model.config.vocab_size} logits, max |dlogit| {worst:.2g}")
    assert worst <= MAX_ABS_DELTA


def test_tokenizer_and_template_give_llama_cpps_prompt(case) -> None:
    """The GGUF's own tokenizer, converted, tokenizes each prompt as llama.cpp did."""
    name, _, _, golden = case
    definition = load_definition(str(FIXTURES / f"{name}.gguf"))
    assert definition.architecture == name.split("-")[0]
    for prompt in _prompts(golden):
        text = _meta(golden)["prompts"][prompt]
        assert definition.tokenizer.encode(text) == [int(t) for t in golden[f"{prompt}/prompt"]]


def test_engine_greedy_matches_llama_cpp(case) -> None:
    """Through the scheduler (paged KV, batched decode, chunked prefill): llama.cpp's greedy tokens."""
    _, _, model, golden = case
    prompts = _prompts(golden)
    core = make_core(model, max_batch_tokens=16, block_size=BLOCK)
    requests = [GenerationRequest(p, [int(t) for t in golden[f"{p}/prompt"]], len(golden[f"{p}/greedy"]),
                                  speculative=False) for p in prompts]
    tokens, _ = run_all(core, requests)
    for p in prompts:
        assert tokens[p] == [int(t) for t in golden[f"{p}/greedy"]], p


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = np.ascontiguousarray(t, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def test_hugging_face_directory_gives_the_same_logits(case, tmp_path: Path) -> None:
    """The same weights as a Hugging Face checkpoint (config.json as transformers writes it
    for Qwen2/Qwen3): the same logits, so the HF loader reads these architectures too."""
    name, config, _, golden = case
    hf = config.to_hf()
    assert hf["model_type"] == name.split("-")[0]
    (tmp_path / "config.json").write_text(json.dumps(hf))
    _, weights = load_weights(str(FIXTURES / f"{name}.gguf"), config)
    _write_safetensors(tmp_path / "model.safetensors", weights)
    hf_config, hf_weights = load_checkpoint(tmp_path)
    assert (hf_config.attention_bias, hf_config.qk_norm, hf_config.head_dim) == (
        config.attention_bias, config.qk_norm, config.head_dim)
    prompt = _prompts(golden)[0]
    ids = np.concatenate([golden[f"{prompt}/prompt"], golden[f"{prompt}/greedy"]])
    assert np.abs(_logits(LlamaModel(hf_config, hf_weights), ids) - golden[f"{prompt}/logits"]).max() <= MAX_ABS_DELTA


def test_hf_configs_that_would_be_misread_are_refused() -> None:
    base = {"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1}
    with pytest.raises(ValueError, match="sliding-window"):
        ModelConfig.from_hf({**base, "model_type": "qwen2", "use_sliding_window": True})
    with pytest.raises(ValueError, match="attention_bias"):
        ModelConfig.from_hf({**base, "model_type": "qwen3", "attention_bias": True})
    assert ModelConfig.from_hf({**base, "model_type": "qwen3", "head_dim": 16}).head_dim == 16
