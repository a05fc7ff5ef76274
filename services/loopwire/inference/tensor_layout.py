"""The tensors a Llama-family checkpoint holds for a config, by Hugging Face name, and their
shapes: what both weight readers (safetensors in ``weights.py``, GGUF in ``gguf_weights.py``)
check a file against."""

from __future__ import annotations

from loopwire.inference.config import ModelConfig


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
        if config.attention_bias:
            names += [p + f"self_attn.{n}_proj.bias" for n in "qkv"]
        if config.qk_norm:
            names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
    return names


def tensor_shape(config: ModelConfig, name: str) -> tuple[int, ...]:
    h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
    q = config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        return (config.head_dim,)
    if name.endswith("norm.weight"):
        return (h,)
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return (v, h)
    shapes = {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
              "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
    shape = shapes[name.split(".")[-2]]
    return shape[:1] if name.endswith(".bias") else shape
