"""GGUF tokenizers converted to Hugging Face ``tokenizers`` against llama.cpp's own ids:
SentencePiece (``tokenizer.ggml.model == "llama"``: Llama 2, Phi-3) and the qwen35,
deepseek-llm, deepseek-coder and deepseek-v3 pre-tokenizers.

References (tests/fixtures/llama_cpp_vocab, scripts/llama_cpp_vocab_fixtures.py; MIT, see
LICENSE there): the vocab-only GGUFs of the llama-cpp-python 0.3.36 sdist with their .inp/.out
test files (llama.cpp's expected ids for 46-50 strings each), and NAME-cases.json: llama.cpp's
ids for those strings plus 43 more. The vocabs too large to commit (deepseek-llm 4 MB,
qwen35 6 MB) are trimmed to the 1,190 / 1,468 tokens that occur inside those strings (the
script checks that llama.cpp's ids on the trimmed file are the full vocab's, renumbered).
How much the strings tell pre-tokenizers apart is recorded (``differs_from``): qwen35 vs
qwen2 on 2 strings, deepseek-llm vs deepseek-coder on 5; deepseek-v3 vs deepseek-llm on
none (this vocab has no merges across the places where their patterns differ). The shipped .out of the full large
vocabs is checked too, from the directory LOOPWIRE_LLAMA_CPP_VOCABS names, else
.state/llama-cpp-vocabs (`make tools` extracts them there from the sdist).
"""

from __future__ import annotations

import functools
import json
import lzma
import os
import tempfile
from pathlib import Path

import pytest
from required import missing

from loopwire.common.gguf_tokenizer import tokenizer_from_gguf
from loopwire.common.model_def import read_gguf_fields
from loopwire.common.tokenizer import HfTokenizer

FIXTURES = Path(__file__).parents[2] / "fixtures" / "llama_cpp_vocab"
SEP = "\n__ggml_vocab_test__\n"
FULL_VOCABS = Path(os.environ.get("LOOPWIRE_LLAMA_CPP_VOCABS") or Path(__file__).parents[3] / ".state" / "llama-cpp-vocabs")


@functools.lru_cache(maxsize=4)
def _fields(xz_name: str) -> dict:
    """The metadata of a committed, xz-compressed vocab GGUF."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / xz_name.removesuffix(".xz")
        path.write_bytes(lzma.decompress((FIXTURES / xz_name).read_bytes()))
        return read_gguf_fields(path)


def _shipped_cases(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's test strings and expected ids (its tests/test-tokenizer-0.cpp format)."""
    texts = (FIXTURES / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split(SEP)
    texts = texts[:-1] if texts[-1] == "" else texts
    lines = (FIXTURES / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(i) for i in line.split()]) for t, line in zip(texts, lines, strict=False)]


def _mismatches(tok: HfTokenizer, cases: list[tuple[str, list[int]]]) -> list[tuple[str, list[int], list[int]]]:
    return [(text, ids, tok.encode(text)) for text, ids in cases if tok.encode(text) != ids]


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "deepseek-coder"])
def test_shipped_vocab_matches_llama_cpp(name: str) -> None:
    fields = _fields(f"ggml-vocab-{name}.gguf.xz")
    tok = tokenizer_from_gguf(fields, name)
    cases = _shipped_cases(name)
    assert len(cases) == 46
    bad = _mismatches(tok, cases)
    print(f"\n{name} ({fields['tokenizer.ggml.model']}/{fields['tokenizer.ggml.pre']}): "
          f"{len(cases) - len(bad)}/{len(cases)} equal to llama.cpp")
    assert bad == []


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "deepseek-coder", "deepseek-llm", "deepseek-v3", "qwen35"])
def test_more_strings_match_llama_cpp(name: str) -> None:
    """The shipped strings and 43 more (scripts, marks, code, digits), llama.cpp's ids on the
    committed vocab (deepseek-v3: llama.cpp ran the deepseek-llm vocab under that name)."""
    data = json.loads((FIXTURES / f"{name}-cases.json").read_text(encoding="utf-8"))
    fields = {**_fields(data["vocab"]), "tokenizer.ggml.pre": data["pre"]}
    tok = tokenizer_from_gguf(fields, name)
    cases = [(c["text"], c["ids"]) for c in data["cases"]]
    assert len(cases) >= 89
    bad = _mismatches(tok, cases)
    print(f"\n{name} ({data['pre']}): {len(cases) - len(bad)}/{len(cases)} equal to llama.cpp; "
          f"strings llama.cpp tokenizes differently under another pre-tokenizer: {data['differs_from']}")
    assert bad == []


@pytest.mark.parametrize("name", ["deepseek-llm", "qwen35"])
def test_full_vocab_matches_llama_cpp(name: str) -> None:
    path = FULL_VOCABS / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        missing(f"{path} is missing (too large to commit, 4-6 MB): `make tools` extracts it from the "
                "llama-cpp-python sdist, or set LOOPWIRE_LLAMA_CPP_VOCABS to a directory holding it")
    tok = tokenizer_from_gguf(read_gguf_fields(path), name)
    cases = _shipped_cases(name)
    assert _mismatches(tok, cases) == []


def test_sentencepiece_token_bytes_spell_the_text() -> None:
    """Pieces map back to bytes: ``▁`` is a space, ``<0xNN>`` a byte, and llama.cpp's
    leading space (``add_space_prefix``) comes first."""
    tok = tokenizer_from_gguf(_fields("ggml-vocab-llama-spm.gguf.xz"), "llama-spm")
    for text, _ in _shipped_cases("llama-spm"):
        if text:
            assert b"".join(tok.token_bytes(i) for i in tok.encode(text)) == (" " + text).encode(), text


def test_sentencepiece_prefixes_a_space_after_each_special_token() -> None:
    """As llama.cpp does (``is_prev_special``): the text after ``</s>`` starts a new word.
    The ids are llama.cpp's (0.3.36, ``tokenize(b"Hello</s>Hello", add_bos=False, special=True)``)."""
    tok = tokenizer_from_gguf(_fields("ggml-vocab-llama-spm.gguf.xz"), "llama-spm")
    assert tok.encode("Hello</s>Hello") == [15043, 2, 15043]
