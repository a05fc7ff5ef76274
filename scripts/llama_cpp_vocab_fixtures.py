#!/usr/bin/env python3
"""Tokenizer fixtures from llama.cpp's own vocab test files, for GGUF tokenizers loopwire
converts (SentencePiece, and the qwen35 / deepseek pre-tokenizers).

The llama-cpp-python sdist ships vendor/llama.cpp/models/ggml-vocab-NAME.gguf (vocab-only
GGUFs) with NAME.gguf.inp / .out: test strings and llama.cpp's expected token ids (no BOS,
special tokens not parsed: tests/test-tokenizer-0.cpp). This script does not import loopwire;
it writes into tests/fixtures/llama_cpp_vocab/:

* the small vocabs (llama-spm, phi-3: SentencePiece; deepseek-coder) xz-compressed;
* the large ones (deepseek-llm 4 MB, qwen35 6 MB) trimmed to the tokens that occur inside the
  test strings: every token whose byte-level text is a substring of a string's, every
  single-character token, and the merges among them, renumbered in order. Any merge BPE can
  apply to those strings, under any pre-tokenizer, joins pieces of them, so the trimmed vocab
  tokenizes them as the full one does; checked here: llama.cpp's ids on the trimmed file,
  mapped back, equal its ids on the full file for every string. xz-compressed;
* every vocab's shipped .inp/.out, and NAME-cases.json: llama.cpp's ids on the committed
  (possibly trimmed) file for the shipped strings plus EXTRA, and for how many of them llama.cpp
  gives other ids under a rival pre-tokenizer name (``differs_from``: how much they test);
* deepseek-v3-cases.json: the same with the deepseek-llm vocab renamed to the deepseek-v3
  pre-tokenizer (no vocab of that name ships);
* the sdist's LICENSE (MIT).

It also checks that llama.cpp reproduces every shipped .out, so that the way it is called
here is the way the .out files were made. Never run in CI; needs llama-cpp-python (built from
the sdist, 10-30 minutes on two cores):

    python3 -m venv /tmp/lw/llvenv
    /tmp/lw/llvenv/bin/pip install numpy gguf /tmp/lw/sdist/llama_cpp_python-0.3.36.tar.gz
    /tmp/lw/llvenv/bin/python scripts/llama_cpp_vocab_fixtures.py /tmp/lw/llama_cpp_python-0.3.36
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = ROOT / "tests" / "fixtures" / "llama_cpp_vocab"
SMALL = ("llama-spm", "phi-3", "deepseek-coder")
LARGE = ("deepseek-llm", "qwen35")
SEP = "\n__ggml_vocab_test__\n"
# The pre-tokenizers each one's strings must tell apart from it (counted and stored).
RIVALS = {"qwen35": ("qwen2",), "deepseek-llm": ("deepseek-coder", "deepseek-v3"),
          "deepseek-coder": ("deepseek-llm", "deepseek-v3"), "deepseek-v3": ("deepseek-llm", "deepseek-coder")}

# More strings for the trimmed vocabs: combining marks (qwen35 keeps them with letters),
# CJK and kana runs (deepseek), punctuation glued to letters (deepseek-v3), digit runs.
EXTRA = [
    "e\u0301te\u0301 cafe\u0301", "n\u0303o\u0308", "\u0915\u094d\u0937\u093f", "a\u0300\u0301\u0302b", "\u0301start",
    "日本語のテキストです。カタカナ", "机器学习是人工智能的一个分支。", "한국어 문장입니다", "ひらがな漢字カナ",
    "x.Method(arg) a-b /path/to/file ~home $VAR #tag @user", "'s 've 'LL 'D", "1234567890 12 3.14159",
    "Hello,world!How are you?", "  \n\n   \t\t\n x", "\r\n\r\n", "naïve café Zürich", "😀👍🏽🇫🇷",
    "def f(x):\n    return x ** 2  # square\n", "fooBar_baz-QUX", "ΑΒΓ αβγ ﬁ ﬂ", "\u00a0nbsp\u3000ideo",
    "नमस्ते दुनिया, यह एक परीक्षण है।", "हिन्दी में लिखा गया वाक्य", "สวัสดีครับ ภาษาไทย", "مَرْحَبًا بِكُمْ",
    "Tiếng Việt có dấu", "Ελληνικά: καλημέρα", "ру́сский язы́к", "self.assertEqual(x.shape, (3, 4))",
    "import numpy as np\nnp.array([1, 2, 3]).reshape(-1)", "year 2024, 10000 users, 3.14159, 1,000,000",
    "x=[1,2,3];y={'a':1}", "__init__(self) -> None:", "https://example.com/a/b?c=1&d=2", "user@example.com",
    "東京は日本の首都です。ひらがなとカタカナ", "中文和English混合text123", "ＡＢＣ全角ｱｲｳ", "  leading and trailing  ",
    "!!!???...;;;", "“quoted” ‘single’ —dash– …", "tab\tseparated\tvalues\n", "$HOME/.config #!/bin/sh",
]


def read_pre(path: Path) -> str:
    import gguf

    return str(gguf.GGUFReader(str(path)).fields["tokenizer.ggml.pre"].contents())


def read_cases(inp: Path) -> list[str]:
    raw = inp.read_text(encoding="utf-8")
    cases = raw.split(SEP)
    return cases[:-1] if cases and cases[-1] == "" else cases


def read_ids(out: Path, n: int) -> list[list[int]]:
    return [[int(t) for t in line.split()] for line in out.read_text(encoding="utf-8").split("\n")[:n]]


def tokenize(llama_cpp, path: Path, texts: list[str]) -> list[list[int]]:  # type: ignore[no-untyped-def]
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    ids = [[int(i) for i in llm.tokenize(t.encode("utf-8"), add_bos=False, special=False)] if t else []
           for t in texts]
    del llm
    return ids


def byte_level(text: str) -> str:
    """GPT-2's byte-to-character map applied to the UTF-8 of ``text`` (how BPE vocabs spell it)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return "".join(chars[b] for b in text.encode("utf-8"))


def trimmed(source: Path, target: Path, texts: list[str] | None, pre: str | None = None) -> list[int]:
    """A vocab-only GGUF of the tokens inside ``texts`` (None: all) and the merges among them,
    with the pre-tokenizer ``pre`` (None: the same); returns each kept token's id in ``source``."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    arch = reader.fields["general.architecture"].contents()
    all_tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    kept = list(range(len(all_tokens)))
    if texts is not None:
        spelled = [byte_level(t) for t in texts]
        kept = [i for i, tok in enumerate(all_tokens) if len(tok) == 1 or any(tok in s for s in spelled)]
    tokens = [all_tokens[i] for i in kept]
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    known = set(tokens)
    merges = [m for m in reader.fields["tokenizer.ggml.merges"].contents()
              if m.replace(" ", "", 1) in known and all(p in known for p in m.split(" ", 1))]
    writer = gguf.GGUFWriter(str(target), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key.endswith(".vocab_size"):
            continue
        if key.endswith("_token_id") and texts is not None:  # special tokens do not occur in the strings
            continue
        value = field.contents()
        if key == "tokenizer.ggml.tokens":
            value = tokens
        elif key == "tokenizer.ggml.token_type":
            value = [types[i] for i in kept]
        elif key == "tokenizer.ggml.merges":
            value = merges
        elif key == "tokenizer.ggml.pre" and pre:
            value = pre
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return kept


def xz(source: Path, target: Path) -> None:
    target.write_bytes(lzma.compress(source.read_bytes(), preset=9 | lzma.PRESET_EXTREME))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sdist", help="the unpacked llama-cpp-python sdist")
    parser.add_argument("--out", default=str(OUT_DIR), help="fixture directory (default: %(default)s)")
    args = parser.parse_args()

    import llama_cpp

    models = Path(args.sdist) / "vendor" / "llama.cpp" / "models"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(args.sdist) / "vendor" / "llama.cpp" / "LICENSE", out / "LICENSE")
    meta = {"llama_cpp_python": llama_cpp.__version__, "generated_by": "scripts/llama_cpp_vocab_fixtures.py",
            "tokenize": "Llama(vocab_only=True).tokenize(text.encode(), add_bos=False, special=False)"}
    for name in SMALL + LARGE:
        gguf_path = models / f"ggml-vocab-{name}.gguf"
        texts = read_cases(gguf_path.with_name(gguf_path.name + ".inp"))
        expected = read_ids(gguf_path.with_name(gguf_path.name + ".out"), len(texts))
        got = tokenize(llama_cpp, gguf_path, texts)
        same = sum(a == b for a, b in zip(got, expected, strict=True))
        print(f"{name}: llama.cpp reproduces {same}/{len(texts)} shipped ids", file=sys.stderr)
        if same != len(texts):
            sys.exit(f"{name}: llama.cpp disagrees with its own .out file; not writing fixtures")
        for suffix in (".inp", ".out"):
            shutil.copy(gguf_path.with_name(gguf_path.name + suffix), out / (gguf_path.name + suffix))
        cases = texts + [t for t in EXTRA if t not in texts]
        variants = [(name, None)] + ([("deepseek-v3", "deepseek-v3")] if name == "deepseek-llm" else [])
        for label, pre in variants:
            with tempfile.TemporaryDirectory() as tmp:
                full = gguf_path
                if pre is not None:  # the whole vocab under another pre-tokenizer name
                    full = Path(tmp) / f"{label}.gguf"
                    trimmed(gguf_path, full, None, pre)
                full_ids = tokenize(llama_cpp, full, cases)
                differs = {}
                for rival in RIVALS.get(label, ()):
                    rival_path = Path(tmp) / f"{rival}.gguf"
                    trimmed(gguf_path, rival_path, None, rival)
                    differs[rival] = sum(a != b for a, b in zip(full_ids, tokenize(llama_cpp, rival_path, cases),
                                                                 strict=True))
                kept = None
                if name in SMALL:
                    vocab, ids = gguf_path.name + ".xz", full_ids
                    xz(gguf_path, out / vocab)
                else:
                    vocab = f"{name}-trimmed.gguf.xz"
                    small = Path(tmp) / "trimmed.gguf"
                    kept = trimmed(gguf_path, small, cases, pre)
                    ids = tokenize(llama_cpp, small, cases)
                    if [[kept[i] for i in row] for row in ids] != full_ids:
                        sys.exit(f"{label}: the trimmed vocab tokenizes differently from the full one")
                    if pre is None:
                        xz(small, out / vocab)
            print(f"{label}: {len(cases)} strings" + (f", trimmed to {len(kept)} tokens (same ids as the full "
                  "vocab)" if kept else "") + (f"; strings whose ids differ under {differs}" if differs else ""),
                  file=sys.stderr)
            data = {**meta, "vocab": vocab, "source": gguf_path.name, "kept_tokens": len(kept) if kept else None,
                    "pre": pre or read_pre(gguf_path), "differs_from": differs,
                    "cases": [{"text": t, "ids": i} for t, i in zip(cases, ids, strict=True)]}
            (out / f"{label}-cases.json").write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n",
                                                     encoding="utf-8")
    for p in sorted(out.iterdir()):
        print(f"{p}: {p.stat().st_size} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
