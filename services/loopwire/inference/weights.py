"""Model weights: ``dummy:<seed>`` (random, reproducible) or a Hugging Face Llama checkpoint
directory (``config.json`` + ``*.safetensors`` with the usual tensor names)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loopwire.inference.config import ModelConfig, load_model_config

# Scale of the dummy output head: logits with a standard deviation of a few units give a
# peaked next-token distribution, so greedy decoding is stable and drafts can be accepted.
_DUMMY_LOGIT_STD = 4.0


def tensor_names(config: ModelConfig) -> list[str]:
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config.tie_word_embeddings:
        names.append("lm_head.weight")
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        names += [
            p + "input_layernorm.weight",
            p + "post_attention_layernorm.weight",
            *(p + f"self_attn.{n}_proj.weight" for n in "qkvo"),
            *(p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")),
        ]
    return names


def tensor_shape(config: ModelConfig, name: str) -> tuple[int, ...]:
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    kv = config.num_key_value_heads * config.head_dim
    if name.endswith("norm.weight"):
        return (h,)
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return (v, h)
    shapes = {"q_proj": (h, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, h),
              "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
    return shapes[name.split(".")[-2]]


def dummy_weights(config: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """Random weights with unit-variance activations (fan-in scaled projections)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in tensor_names(config):
        shape = tensor_shape(config, name)
        if name.endswith("norm.weight"):
            out[name] = np.ones(shape, np.float32)
            continue
        std = 1.0 if name == "model.embed_tokens.weight" else 1.0 / np.sqrt(shape[1])
        if name == "lm_head.weight":
            std = _DUMMY_LOGIT_STD / np.sqrt(shape[1])
        out[name] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)
    return out


def load_checkpoint(directory: str | Path) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """Read ``config.json`` and every ``*.safetensors`` file of a checkpoint, as float32."""
    from safetensors.numpy import load_file

    directory = Path(directory)
    config = load_model_config(directory)
    config.validate()
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory}: no .safetensors files")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    weights = {}
    for name in tensor_names(config):
        if name not in tensors:
            raise ValueError(f"{directory}: checkpoint lacks tensor {name}")
        t = tensors[name]
        if tuple(t.shape) != tensor_shape(config, name):
            raise ValueError(f"{directory}: {name} has shape {tuple(t.shape)}, config implies {tensor_shape(config, name)}")
        weights[name] = t.astype(np.float32)
    return config, weights


def load_weights(spec: str, config: ModelConfig) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """``dummy:<seed>`` with ``config``'s shape, or a checkpoint directory (its own shape)."""
    if spec.startswith("dummy"):
        _, _, seed = spec.partition(":")
        try:
            return config, dummy_weights(config, int(seed or 0))
        except ValueError as e:
            raise ValueError(f"weights {spec!r}: expected dummy:<integer seed>") from e
    return load_checkpoint(spec)
