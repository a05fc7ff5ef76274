#!/usr/bin/env python3
"""llama.cpp's logits for the tiny Qwen2 / Qwen3 GGUF fixtures (scripts/tiny_gguf_fixtures.py).

llama.cpp is the independent reference for loopwire's numpy model on these architectures:
this script does not import loopwire. For each tests/fixtures/tiny_gguf/NAME.gguf it writes
NAME.llama_cpp.npz: for a few ChatML prompts, llama.cpp's prompt token ids (its own
tokenizer, no BOS, special tokens parsed), its first 16 greedy tokens (argmax) and its logits
over the whole vocabulary at every position of prompt + greedy tokens (float32 weights, F32
KV cache: plain float arithmetic). The outputs are committed;
tests/unit/inference/test_qwen_architectures.py compares against them. Never run in CI: it
needs llama-cpp-python, which compiles llama.cpp (10-30 minutes on two cores):

    python3 -m venv /tmp/lw/llvenv
    /tmp/lw/llvenv/bin/pip install numpy llama-cpp-python     # builds llama.cpp
    /tmp/lw/llvenv/bin/python scripts/llama_cpp_golden_archs.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "tiny_gguf"
MODELS = ("qwen2-tiny", "qwen3-tiny")
GREEDY_TOKENS = 16
N_CTX = 512
N_THREADS = 2


def chatml(*turns: tuple[str, str]) -> str:
    return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in turns) + "<|im_start|>assistant\n"


PROMPTS = {
    "hello": chatml(("user", "Hello world, 123!")),
    "code": chatml(("system", "You are a coding agent."),
                   ("user", "def f(x):\n    return x * 2  # double it\n\nWhat does f(21) return?")),
}


def golden(llama_cpp, np, path: Path) -> dict:  # type: ignore[no-untyped-def]
    f32 = llama_cpp.GGML_TYPE_F32
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=True, verbose=False, type_k=f32, type_v=f32)
    out: dict = {}
    for name, text in PROMPTS.items():
        prompt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt)
        generated = []
        for _ in range(GREEDY_TOKENS):
            tok = int(np.argmax(np.asarray(llm.scores[llm.n_tokens - 1])))
            generated.append(tok)
            llm.eval([tok])
        # Row i predicts token i+1; one batch for the prompt, then one row per generated token.
        scores = np.array(llm.scores[: llm.n_tokens], dtype=np.float32)  # a copy: eval reuses the buffer
        out[f"{name}/prompt"] = np.asarray(prompt, np.int32)
        out[f"{name}/greedy"] = np.asarray(generated, np.int32)
        out[f"{name}/logits"] = scores
        print(f"  {path.name} {name}: {len(prompt)} prompt tokens, greedy {generated}", file=sys.stderr)
    del llm
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=str(FIXTURES), help="fixture directory (default: %(default)s)")
    args = parser.parse_args()

    import llama_cpp  # imported late so that --help works anywhere
    import numpy as np

    # No weight repacking ("extra buffer types"): the standard CPU kernels, as in llama_cpp_golden.py.
    default_params = llama_cpp.llama_cpp.llama_model_default_params

    def model_params():  # type: ignore[no-untyped-def]
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_cpp.llama_model_default_params = model_params
    for model in MODELS:
        path = Path(args.dir) / f"{model}.gguf"
        arrays = golden(llama_cpp, np, path)
        meta = {"llama_cpp_python": llama_cpp.__version__, "gguf": path.name,
                "gguf_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "prompts": PROMPTS,
                "settings": {"n_ctx": N_CTX, "n_batch": N_CTX, "n_threads": N_THREADS, "type_k": "f32",
                             "type_v": "f32", "use_extra_bufts": False, "greedy_tokens": GREEDY_TOKENS},
                "tokenize": "llm.tokenize(text.encode(), add_bos=False, special=True)",
                "generated_by": "scripts/llama_cpp_golden_archs.py"}
        arrays["meta"] = np.asarray(json.dumps(meta))
        target = Path(args.dir) / f"{model}.llama_cpp.npz"
        np.savez_compressed(target, **arrays)
        print(f"{target}: {target.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
