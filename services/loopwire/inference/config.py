"""Model shapes and engine settings, one place for every engine.

The architectures are Llama and its two close relatives, Qwen2 (biases on the q/k/v
projections) and Qwen3 (per-head RMSNorm of q and k before RoPE, a head size of its own);
the presets are Llama shapes. ``tiny`` is the default of the reference
engine: small enough that a 48-turn replayed session (~14k-token context, ~7k output
tokens) runs in seconds on two CPU cores; the named sizes (``1b``, ``3b``, ``8b``, ``70b``)
are the real Llama 3 shapes the simulated engine prices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from loopwire.common.model_def import dummy_definition

# The architectures the numpy model runs, with what sets them apart from Llama by default:
# (q/k/v projection biases, q/k RMSNorm). Names as GGUF's general.architecture and HF's model_type.
ARCHITECTURES: dict[str, tuple[bool, bool]] = {"llama": (False, False), "qwen2": (True, False), "qwen3": (False, True)}


@dataclass(frozen=True)
class ModelConfig:
    """A model's shape (the fields of a Hugging Face ``config.json``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False
    name: str = "custom"
    # Positions the model was trained for (``max_position_embeddings``; 0 = unknown).
    context_length: int = 0
    architecture: str = "llama"
    # Biases on the q, k and v projections (Qwen2).
    attention_bias: bool = False
    # RMSNorm of each head's query and key before RoPE (Qwen3).
    qk_norm: bool = False
    # The head size when it is not hidden_size / num_attention_heads (Qwen3); 0 = that quotient.
    head_dim_override: int = 0

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden_size // self.num_attention_heads

    @property
    def num_params(self) -> int:
        h, i, layers = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        per_layer = h * q * 2 + h * kv * 2 + 3 * h * i + 2 * h
        per_layer += (q + 2 * kv) * self.attention_bias + 2 * self.head_dim * self.qk_norm
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return layers * per_layer + embeddings + h

    def validate(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture {self.architecture!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
        if not self.head_dim_override and self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (RoPE rotates pairs)")

    @classmethod
    def from_hf(cls, data: dict, name: str = "checkpoint") -> ModelConfig:
        heads = int(data["num_attention_heads"])
        # Qwen2 and Qwen3 by model_type; anything else is read as Llama, as before.
        arch = str(data.get("model_type"))
        arch = arch if arch in ("qwen2", "qwen3") else "llama"
        head_dim = data.get("head_dim")
        override = 0
        if head_dim is not None and int(head_dim) != int(data["hidden_size"]) // heads:
            if arch != "qwen3":
                raise ValueError(f"head_dim {head_dim} != hidden_size / num_attention_heads: not supported for {arch}")
            override = int(head_dim)
        default_bias, qk_norm = ARCHITECTURES[arch]
        bias = bool(data.get("attention_bias", default_bias))
        if bias and arch != "qwen2":  # Llama and Qwen3 then bias o_proj too
            raise ValueError(f"attention_bias is not supported for {arch}")
        if data.get("use_sliding_window"):
            raise ValueError("sliding-window attention (use_sliding_window) is not supported")
        return cls(
            vocab_size=int(data["vocab_size"]),
            hidden_size=int(data["hidden_size"]),
            intermediate_size=int(data["intermediate_size"]),
            num_hidden_layers=int(data["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(data.get("num_key_value_heads", heads)),
            rms_norm_eps=float(data.get("rms_norm_eps", 1e-5)),
            rope_theta=float(data.get("rope_theta", 10000.0)),
            tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
            name=name,
            context_length=int(data.get("max_position_embeddings") or 0),
            architecture=arch,
            attention_bias=bias,
            qk_norm=qk_norm,
            head_dim_override=override,
        )

    def to_hf(self) -> dict:
        cls_name = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
        return {
            "architectures": [cls_name[self.architecture]],
            "model_type": self.architecture,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": self.tie_word_embeddings,
            **({"max_position_embeddings": self.context_length} if self.context_length else {}),
            **({"head_dim": self.head_dim_override} if self.head_dim_override else {}),
            **({"attention_bias": self.attention_bias} if self.architecture != "llama" else {}),
        }


def model_preset(size: str) -> ModelConfig:
    """A named shape with the dummy model's vocabulary (cl100k and two ChatML tokens)."""
    try:
        layers, hidden, inter, heads, kv_heads, theta = _PRESETS[size]
    except KeyError:
        raise ValueError(f"unknown model size {size!r}; choose one of {', '.join(_PRESETS)}") from None
    return ModelConfig(
        vocab_size=dummy_definition().vocab_size,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        rope_theta=theta,
        name=size,
    )


# layers, hidden, intermediate, heads, kv heads, rope theta. The named Llama 3 sizes come from
# the published config.json of Llama-3.2-1B/3B and Llama-3.1-8B/70B.
_PRESETS: dict[str, tuple[int, int, int, int, int, float]] = {
    "tiny": (2, 64, 128, 4, 2, 10000.0),
    "small": (4, 128, 256, 4, 2, 10000.0),
    "medium": (8, 256, 512, 8, 4, 10000.0),
    "1b": (16, 2048, 8192, 32, 8, 500000.0),
    "3b": (28, 3072, 8192, 24, 8, 500000.0),
    "8b": (32, 4096, 14336, 32, 8, 500000.0),
    "70b": (80, 8192, 28672, 64, 8, 500000.0),
}
MODEL_SIZES = tuple(_PRESETS)


def load_model_config(directory: str | Path) -> ModelConfig:
    path = Path(directory) / "config.json"
    with open(path, encoding="utf-8") as f:
        return ModelConfig.from_hf(json.load(f), name=Path(directory).name)


@dataclass(frozen=True)
class EngineConfig:
    """Settings of the scheduler and KV cache, shared by the reference and simulated engines."""

    model: ModelConfig = field(default_factory=lambda: model_preset("tiny"))
    replica_id: str = "replica-0"
    block_size: int = 16
    num_kv_blocks: int = 4096
    max_batch_tokens: int = 1024
    max_running: int = 64
    max_output_tokens: int = 4096
    num_draft_tokens: int = 8
    prefix_cache: bool = True
    # Draft n-gram sizes the prompt-lookup drafter tries, longest first. Unigram matches are
    # too weak to pay for a verification pass (measured on the recorded sessions).
    max_ngram: int = 3
    min_ngram: int = 2
    # prompt_lookup | suffix (suffix decoding over the session and the replica's recent outputs;
    # 2.5+ tokens per verification step on the recorded sessions vs 2.2: bench/bench_speculation.py).
    drafter: str = "suffix"
    # fixed (always up to num_draft_tokens) | cost (as many as pay off at the step's batch size: by
    # the roofline on the simulated engine, by its own measured steps on the reference one; see
    # draft_length.py and step_cost.py)
    draft_length: str = "cost"
    # Branches a step verifies per sequence: the favourite draft and up to this many minus one
    # alternatives starting with the next-likeliest tokens, each verified as a fork of the sequence
    # (suffix drafter, unconstrained sequences). Under the cost policy all branches together get
    # the rows it says pay off. More tokens per step (4 branches: >= 3 on the recorded sessions), but
    # a fork attends the whole context again, so at agent context lengths 1 is faster
    # (bench/results/speculation.md).
    draft_branches: int = 1
    # Host-memory KV tier: bytes of evicted device blocks kept in host memory (0 = none).
    host_kv_bytes: int = 0
    # priority (retention priorities, then LRU) | lru
    eviction_policy: str = "priority"
    # How a step's token budget is shared: "fair" (decodes first, then the prefills with the fewest
    # tokens left, each at most prefill_chunk_tokens) or "fcfs" (the old way: arrival order, one long
    # prefill may take the whole budget).
    prefill_policy: str = "fair"
    prefill_chunk_tokens: int = 128

    def with_(self, **changes: object) -> EngineConfig:
        return replace(self, **changes)  # type: ignore[arg-type]
