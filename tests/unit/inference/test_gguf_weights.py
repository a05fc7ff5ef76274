"""GGUF weights: the default SmolLM2 file loads with the right shape, llama.cpp's Q/K row
permutation is undone exactly, unsupported or damaged files are refused by name; and the
Hugging Face loader reads real-world configs and bfloat16 safetensors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from required import missing

from loopwire.common import model_def
from loopwire.common.model_def import ModelError, default_model_path
from loopwire.inference import gguf_weights
from loopwire.inference.config import ModelConfig
from loopwire.inference.gguf_weights import load_gguf, unpermute_qk
from loopwire.inference.model import Chunk, LlamaModel
from loopwire.inference.quantized import QuantizedWeight
from loopwire.inference.weights import (
    dummy_weights,
    load_checkpoint,
    load_weights,
    tensor_names,
    tensor_shape,
)

TINY = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0)


def _default_path() -> str:
    try:
        return default_model_path()
    except ModelError as e:
        missing(f"default GGUF model not installed ({e}): `make setup` installs it")


def llama_cpp_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """``LlamaModel.permute`` of llama.cpp's convert_hf_to_gguf.py, verbatim."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, config: ModelConfig, weights: dict[str, np.ndarray], *, arch: str = "llama",
               quantize_matrices: bool = False,
               quant_type: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.Q8_0) -> None:
    """A GGUF file as llama.cpp's converter writes it: GGUF names, permuted Q/K rows; matrices in
    ``quant_type`` with ``quantize_matrices``."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(config.num_hidden_layers)
    w.add_context_length(256)
    w.add_embedding_length(config.hidden_size)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(config.rope_theta)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_token_list([f"t{i}" for i in range(config.vocab_size)])
    to_gguf = {v: k for k, v in gguf_weights._GLOBAL_NAMES.items()}
    layer_to_gguf = {v: k for k, v in gguf_weights._LAYER_NAMES.items()}
    for name, t in weights.items():
        if name.startswith("model.layers."):
            _, _, i, rest = name.split(".", 3)
            gname = f"blk.{i}.{layer_to_gguf[rest]}"
        else:
            gname = to_gguf[name]
        if name.endswith("q_proj.weight"):
            t = llama_cpp_permute(t, config.num_attention_heads, config.num_attention_heads)
        elif name.endswith("k_proj.weight"):
            t = llama_cpp_permute(t, config.num_attention_heads, config.num_key_value_heads)
        if quantize_matrices and t.ndim == 2:
            w.add_tensor(gname, gguf.quants.quantize(t, quant_type), raw_dtype=quant_type)
        else:
            w.add_tensor(gname, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# -- the Q/K permutation ------------------------------------------------------------------


@pytest.mark.parametrize("heads", [1, 3, 9])
def test_unpermute_inverts_llama_cpp_permute(heads: int) -> None:
    w = np.random.default_rng(heads).standard_normal((heads * 64, 40)).astype(np.float32)
    permuted = llama_cpp_permute(w, 9, heads)
    assert not np.array_equal(permuted, w)
    np.testing.assert_array_equal(unpermute_qk(permuted, heads), w)


def test_interleaved_rope_on_permuted_rows_equals_rotate_half_rope() -> None:
    """Why the converter permutes: llama.cpp's RoPE rotates pairs (2j, 2j+1); on permuted
    rows it gives the attention scores of HF's rotate_half on the original rows."""
    rng = np.random.default_rng(0)
    hd, n, base = 16, 7, 10000.0
    wq, wk = rng.standard_normal((2, hd, 24))
    x = rng.standard_normal((n, 24))
    ang = np.outer(np.arange(n), base ** (-np.arange(0, hd, 2) / hd))  # [n, hd/2]

    def rope_half(v: np.ndarray) -> np.ndarray:
        a, b = v[:, : hd // 2], v[:, hd // 2 :]
        return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], -1)

    def rope_interleaved(v: np.ndarray) -> np.ndarray:
        a, b = v[:, 0::2], v[:, 1::2]
        out = np.empty_like(v)
        out[:, 0::2], out[:, 1::2] = a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)
        return out

    hf = rope_half(x @ wq.T) @ rope_half(x @ wk.T).T
    cpp = rope_interleaved(x @ llama_cpp_permute(wq, 1, 1).T) @ rope_interleaved(x @ llama_cpp_permute(wk, 1, 1).T).T
    np.testing.assert_allclose(cpp, hf, rtol=1e-10, atol=1e-10)
    wrong = rope_half(x @ llama_cpp_permute(wq, 1, 1).T) @ rope_half(x @ llama_cpp_permute(wk, 1, 1).T).T
    assert np.abs(wrong - hf).max() > 1e-3  # skipping the un-permute is visible


# -- small crafted files ------------------------------------------------------------------


def test_crafted_gguf_round_trips_to_hf_weights(tmp_path: Path) -> None:
    hf = dummy_weights(TINY, 3)
    write_gguf(tmp_path / "m.gguf", TINY, hf)
    config, weights = load_gguf(tmp_path / "m.gguf")
    assert config.hidden_size == TINY.hidden_size and config.num_key_value_heads == 2
    assert config.context_length == 256 and not config.tie_word_embeddings
    assert set(weights) == set(hf)
    for name, t in hf.items():
        np.testing.assert_array_equal(weights[name], t, err_msg=name)
        assert weights[name].dtype == np.float32 and weights[name].flags.c_contiguous
    # And through load_weights (a path ending in .gguf), quantized to Q8_0: logits close.
    write_gguf(tmp_path / "q.gguf", TINY, hf, quantize_matrices=True)
    qconfig, qweights = load_weights(str(tmp_path / "q.gguf"), TINY)
    ids = np.arange(1, 12)
    ref = LlamaModel(TINY, hf)
    got = LlamaModel(qconfig, qweights)
    a = ref.forward([Chunk(ids, 0, [0, 1, 2], 11)], ref.new_kv_store(3, 4))[0]
    b = got.forward([Chunk(ids, 0, [0, 1, 2], 11)], got.new_kv_store(3, 4))[0]
    assert np.abs(a - b).max() < 0.5 and (a.argmax(-1) == b.argmax(-1)).mean() > 0.9


@pytest.mark.parametrize("quant", [gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_1])
@pytest.mark.parametrize("tied", [False, True])
def test_codes_kept_quantized_give_the_bits_of_the_dequantized_file(tmp_path: Path, quant, tied: bool) -> None:
    """Loaded as codes (the numba kernels) or dequantized by gguf (the float32 kernels), one file
    gives the same logits bit for bit: the Q/K un-permutation acts on quantized outputs, the
    embedding lookup dequantizes the rows it reads, a tied head multiplies by the embedding."""
    config = ModelConfig(**{**TINY.__dict__, "tie_word_embeddings": tied})
    write_gguf(tmp_path / "q.gguf", config, dummy_weights(config, 5), quantize_matrices=True, quant_type=quant)
    _, codes = load_gguf(tmp_path / "q.gguf", quantized=True)
    _, dense = load_gguf(tmp_path / "q.gguf")
    assert isinstance(codes["model.layers.0.self_attn.q_proj.weight"], QuantizedWeight)
    for name, w in codes.items():
        if isinstance(w, QuantizedWeight):
            np.testing.assert_array_equal(w.dequantize().T, dense[name], err_msg=name)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
    quantized, f32 = LlamaModel(config, codes, "numba"), LlamaModel(config, dense, "numba-f32")
    assert quantized.weight_bytes < f32.weight_bytes / 2.5
    a = quantized.forward([Chunk(ids, 0, [0, 1, 2], 11)], quantized.new_kv_store(3, 4))[0]
    b = f32.forward([Chunk(ids, 0, [0, 1, 2], 11)], f32.new_kv_store(3, 4))[0]
    np.testing.assert_array_equal(a, b)
    blas = LlamaModel(config, dense, "blas")
    c = blas.forward([Chunk(ids, 0, [0, 1, 2], 11)], blas.new_kv_store(3, 4))[0]
    np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-4)


def test_tied_gguf_has_no_lm_head(tmp_path: Path) -> None:
    tied = ModelConfig(**{**TINY.__dict__, "tie_word_embeddings": True})
    write_gguf(tmp_path / "t.gguf", tied, dummy_weights(tied, 0))
    config, weights = load_gguf(tmp_path / "t.gguf")
    assert config.tie_word_embeddings and "lm_head.weight" not in weights


def test_unknown_architecture_is_refused_by_name(tmp_path: Path) -> None:
    write_gguf(tmp_path / "q.gguf", TINY, dummy_weights(TINY, 0), arch="gemma")
    with pytest.raises(ValueError, match=r"'gemma' is not supported; supported: llama, qwen2, qwen3"):
        load_gguf(tmp_path / "q.gguf")


def test_damaged_files_are_refused_clearly(tmp_path: Path) -> None:
    write_gguf(tmp_path / "ok.gguf", TINY, dummy_weights(TINY, 0))
    data = (tmp_path / "ok.gguf").read_bytes()
    cases = {
        "empty.gguf": b"",
        "text.gguf": b"this is not a model\n" * 10,
        "header_cut.gguf": data[:100],
        "data_cut.gguf": data[: len(data) - 1000],
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match="GGUF|truncated") as info:
            load_gguf(tmp_path / name)
        assert str(tmp_path / name) in str(info.value), name
    with pytest.raises(FileNotFoundError):
        load_gguf(tmp_path / "absent.gguf")


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    weights = dummy_weights(TINY, 0)
    del weights["model.layers.1.mlp.up_proj.weight"]
    write_gguf(tmp_path / "m.gguf", TINY, weights)
    with pytest.raises(ValueError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_gguf(tmp_path / "m.gguf")


def test_default_path_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_def.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError, match="make setup"):
        default_model_path()


# -- the default model --------------------------------------------------------------------


def test_default_smollm2_gguf_loads() -> None:
    path = _default_path()
    config, weights = load_gguf(path)
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (30, 576, 1536)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (9, 3, 64)
    assert (config.vocab_size, config.rope_theta, config.context_length) == (49152, 100000.0, 8192)
    assert config.rms_norm_eps == pytest.approx(1e-5) and config.tie_word_embeddings
    assert set(weights) == set(tensor_names(config)) and "lm_head.weight" not in weights
    for name, t in weights.items():
        assert t.shape == tensor_shape(config, name) and t.dtype == np.float32, name
        assert np.isfinite(t).all(), name
    # Q8_0 by hand for one embedding row: 18 blocks of (float16 scale, 32 int8).
    reader = gguf.GGUFReader(path)
    raw = next(t for t in reader.tensors if t.name == "token_embd.weight")
    row = np.asarray(raw.data[1000])
    blocks = row.reshape(18, 34)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    manual = (blocks[:, 2:].copy().view(np.int8).astype(np.float32) * scale).reshape(-1)
    np.testing.assert_array_equal(weights["model.embed_tokens.weight"][1000], manual)
    norm = next(t for t in reader.tensors if t.name == "blk.7.ffn_norm.weight")
    np.testing.assert_array_equal(weights["model.layers.7.post_attention_layernorm.weight"], norm.data)


# -- Hugging Face checkpoints as published ------------------------------------------------


def _write_bf16_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = (np.ascontiguousarray(t, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def test_hf_checkpoint_with_real_config_and_bfloat16(tmp_path: Path) -> None:
    """A config.json like SmolLM2's (extra keys, rope_theta, tied embeddings,
    max_position_embeddings) and bfloat16 tensors, lm_head included although tied."""
    tied = ModelConfig(**{**TINY.__dict__, "tie_word_embeddings": True, "rope_theta": 100000.0})
    weights = dummy_weights(tied, 5)
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    hf_config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "initializer_range": 0.02,
        "hidden_size": 32, "intermediate_size": 64, "max_position_embeddings": 8192,
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "head_dim": 8,
        "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.42.3", "use_cache": True, "vocab_size": 64,
    }
    (tmp_path / "config.json").write_text(json.dumps(hf_config))
    _write_bf16_safetensors(tmp_path / "model.safetensors", weights)
    config, loaded = load_checkpoint(tmp_path)
    assert config.context_length == 8192 and config.rope_theta == 100000.0 and config.tie_word_embeddings
    assert "lm_head.weight" not in loaded
    for name, t in loaded.items():
        bf16 = (weights[name].view(np.uint32) & 0xFFFF0000).view(np.float32)  # truncation
        np.testing.assert_array_equal(t, bf16, err_msg=name)
    assert ModelConfig.from_hf(config.to_hf()).context_length == 8192
    (tmp_path / "config.json").write_text(json.dumps({**hf_config, "head_dim": 16}))
    with pytest.raises(ValueError, match="head_dim"):
        load_checkpoint(tmp_path)
