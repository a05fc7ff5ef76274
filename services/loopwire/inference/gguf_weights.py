"""Llama, Qwen2 and Qwen3 weights from a GGUF file (llama.cpp's format), dequantized to
float32 with the Hugging Face tensor names ``LlamaModel`` reads.

Two things differ from a Hugging Face checkpoint besides the names:

* shapes: GGUF lists dimensions fastest-first (``ne``), so a ``[576, 49152]`` GGUF tensor is
  a ``(49152, 576)`` numpy array; ``GGUFReader`` already gives the numpy order;
* Q and K rows: llama.cpp's converter (``convert_hf_to_gguf.py``, ``LlamaModel.permute``)
  reorders the rows of each head's query and key projection so llama.cpp's *interleaved*
  RoPE (rotating pairs ``(2j, 2j+1)``) computes what Hugging Face's ``rotate_half`` RoPE
  (rotating pairs ``(j, j + d/2)``) does. ``LlamaModel`` uses ``rotate_half``, so the rows
  are put back here (``unpermute_qk``). Qwen2 and Qwen3 are converted without the permutation:
  llama.cpp runs them with its NEOX RoPE, which is ``rotate_half``.

Qwen2 adds ``attn_{q,k,v}.bias``, Qwen3 ``attn_{q,k}_norm.weight`` and its own head size
(``attention.key_length``). Plain RoPE only; any other architecture is refused by name.
The default model (``loopwire.common.model_def.default_model_path``) is SmolLM2-135M-Instruct (Q4_1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from loopwire.common.model_def import open_gguf
from loopwire.inference.config import ModelConfig
from loopwire.inference.quantized import KINDS, QuantizedWeight
from loopwire.inference.tensor_layout import tensor_names, tensor_shape

Weight = np.ndarray | QuantizedWeight

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")
# Architectures whose GGUF Q/K rows llama.cpp's converter permuted (its "normal" RoPE).
_PERMUTED_QK = ("llama",)

# GGUF tensor name (per layer: without the ``blk.{i}.`` prefix) -> Hugging Face name.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's ``permute(w, n_head, n_head_kv)`` on a ``[n_head * hd, cols]``
    projection (``n_head`` is the number of kv heads for K).

    The converter maps, within each head, Hugging Face row ``s * hd/2 + j`` (``s`` in {0, 1}:
    first or second half) to GGUF row ``2 j + s``: ``reshape(n_head, 2, hd/2, cols)`` then
    ``swapaxes(1, 2)``. Undo it: read the GGUF rows as ``(n_head, hd/2, 2, cols)`` and swap back.
    """
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise ValueError(f"cannot un-permute {rows} rows over {n_head} heads")
    return np.ascontiguousarray(
        w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _field(reader: Any, key: str, default: Any = None, *, required: bool = True) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if required and default is None:
            raise ValueError(f"GGUF metadata lacks {key!r}")
        return default
    return field.contents()


def read_gguf_config(reader: Any, name: str = "gguf") -> ModelConfig:
    """The ``ModelConfig`` of an opened ``gguf.GGUFReader`` (a supported architecture)."""
    arch = _field(reader, "general.architecture", "")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"GGUF architecture {arch or '(none)'!r} is not supported; "
                         f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    scaling = _field(reader, f"{arch}.rope.scaling.type", "none", required=False)
    if scaling not in ("none", ""):
        raise ValueError(f"GGUF rope scaling {scaling!r} is not supported (plain RoPE only)")
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    head_dim = int(_field(reader, f"{arch}.attention.key_length", hidden // heads, required=False))
    value_dim = int(_field(reader, f"{arch}.attention.value_length", head_dim, required=False))
    if value_dim != head_dim:
        raise ValueError(f"GGUF key and value head sizes differ ({head_dim}, {value_dim}): not supported")
    rope_dim = _field(reader, f"{arch}.rope.dimension_count", 0, required=False)
    if rope_dim and int(rope_dim) != head_dim:
        raise ValueError(f"GGUF partial RoPE ({rope_dim} of {head_dim} dims) is not supported")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab = len(tokens.data) if tokens is not None else _field(reader, f"{arch}.vocab_size")
    names = {t.name for t in reader.tensors}
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, f"{arch}.feed_forward_length")),
        num_hidden_layers=int(_field(reader, f"{arch}.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(_field(reader, f"{arch}.attention.head_count_kv", heads, required=False)),
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5, required=False)),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0, required=False)),
        tie_word_embeddings="output.weight" not in names,
        name=name,
        context_length=int(_field(reader, f"{arch}.context_length", 0, required=False)),
        architecture=arch,
        # llama.cpp loads q/k/v biases wherever the file has them (Qwen2 always does).
        attention_bias="blk.0.attn_q.bias" in names,
        qk_norm=arch == "qwen3",
        head_dim_override=head_dim if head_dim != hidden // heads else 0,
    )


def _hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    if gguf_name.startswith("blk."):
        _, layer, rest = gguf_name.split(".", 2)
        if layer.isdigit() and rest in _LAYER_NAMES:
            return f"model.layers.{layer}.{_LAYER_NAMES[rest]}"
    return None


def load_gguf(path: str | Path, quantized: bool = False) -> tuple[ModelConfig, dict[str, Weight]]:
    """Read a GGUF file: its shape and every tensor under the HF name, as float32 or, with
    ``quantized``, its matrices of a type the kernels multiply (Q4_1, Q8_0) as their codes."""
    import gguf


    path = Path(path)
    reader = open_gguf(path)
    config = read_gguf_config(reader, name=path.stem)
    config.validate()
    weights: dict[str, Weight] = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        if name is None:
            raise ValueError(f"{path}: unexpected tensor {t.name!r} for a plain {config.architecture} model")
        kind = KINDS.get(t.tensor_type.name)
        if quantized and kind and len(t.shape) == 2:
            weights[name] = _quantized(t, kind, name, config, path)
            continue
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type)
        except Exception as e:
            raise ValueError(f"{path}: cannot read tensor {t.name!r} ({t.tensor_type.name}): {e}") from e
        w = np.asarray(w, dtype=np.float32)
        # GGUF stores ne (fastest dimension first); numpy order is its reverse.
        expected = tuple(int(n) for n in reversed(t.shape))
        if w.shape != expected:
            if w.size != int(np.prod(expected)):
                raise ValueError(f"{path}: tensor {t.name!r} is truncated ({w.size} values, "
                                 f"{int(np.prod(expected))} expected)")
            w = w.reshape(expected)
        if config.architecture in _PERMUTED_QK and name.endswith(("q_proj.weight", "q_proj.bias")):
            w = unpermute_qk(w, config.num_attention_heads)
        elif config.architecture in _PERMUTED_QK and name.endswith(("k_proj.weight", "k_proj.bias")):
            w = unpermute_qk(w, config.num_key_value_heads)
        weights[name] = np.ascontiguousarray(w)
    for name in tensor_names(config):
        if name not in weights:
            raise ValueError(f"{path}: GGUF file lacks the tensor of {name}")
        got = weights[name]
        shape = got.shape[::-1] if isinstance(got, QuantizedWeight) else got.shape
        if shape != tensor_shape(config, name):
            raise ValueError(f"{path}: {name} has shape {shape}, metadata implies {tensor_shape(config, name)}")
    return config, weights


def _quantized(t: Any, kind: str, name: str, config: ModelConfig, path: Path) -> QuantizedWeight:
    """A tensor's codes as ``[in, out]``, with llama.cpp's Q/K row permutation undone on the outputs."""
    n_in, n_out = (int(n) for n in t.shape)  # ne: the input (fastest) dimension first
    try:
        w = QuantizedWeight.from_blocks(kind, t.data, n_out, n_in)
    except ValueError as e:
        raise ValueError(f"{path}: cannot read tensor {t.name!r} ({t.tensor_type.name}): {e}") from e
    heads = {"q_proj.weight": config.num_attention_heads, "k_proj.weight": config.num_key_value_heads}
    for suffix, n_head in heads.items():
        if config.architecture in _PERMUTED_QK and name.endswith(suffix):
            return w.columns(unpermute_qk(np.arange(n_out)[:, None], n_head)[:, 0])
    return w
