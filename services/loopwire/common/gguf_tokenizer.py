"""The BPE tokenizer embedded in a GGUF file, converted once to a ``tokenizer.json``.

A GGUF stores tokens, merges, token types and the name of a pre-tokenizer
(``tokenizer.ggml.pre``); llama.cpp maps that name to a split pattern. The same mapping
is written here as Hugging Face ``tokenizers`` components, so the gateway and the
inference service tokenize a GGUF model with the library every other model uses.
"""

from __future__ import annotations

from typing import Any

from loopwire.common.tokenizer import HfTokenizer, TokenizerError

# llama.cpp's split patterns per pre-tokenizer name (llama-vocab.cpp), as HF components.
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
_QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)

_TOKEN_CONTROL = 3
_TOKEN_USER_DEFINED = 4


def _pre_tokenizer(pre: str) -> tuple[Any, bool]:
    """HF pre-tokenizer for a GGUF ``tokenizer.ggml.pre`` name, and whether merges are ignored."""
    from tokenizers import Regex, pre_tokenizers

    byte_level_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    byte_level_plain = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("default", "gpt-2"):
        return byte_level_regex, False
    if pre == "smollm":  # digits one by one, then the GPT-2 pattern
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level_regex]), False
    if pre in ("llama-bpe", "llama3"):
        split = pre_tokenizers.Split(Regex(_LLAMA3_PATTERN), behavior="isolated")
        return pre_tokenizers.Sequence([split, byte_level_plain]), True
    if pre == "qwen2":
        split = pre_tokenizers.Split(Regex(_QWEN2_PATTERN), behavior="isolated")
        return pre_tokenizers.Sequence([split, byte_level_plain]), False
    raise TokenizerError(
        f"GGUF pre-tokenizer {pre!r} is not supported (supported: default, gpt-2, smollm, llama-bpe, qwen2)"
    )


def tokenizer_from_gguf(fields: dict[str, Any], name: str) -> HfTokenizer:
    """Build the tokenizer from a GGUF's ``tokenizer.ggml.*`` metadata (already read as values)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    model = fields.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise TokenizerError(f"{name}: GGUF tokenizer model {model!r} is not supported (only byte-level BPE, 'gpt2')")
    tokens: list[str] = fields.get("tokenizer.ggml.tokens") or []
    merges: list[str] = fields.get("tokenizer.ggml.merges") or []
    if not tokens or not merges:
        raise TokenizerError(f"{name}: the GGUF has no embedded tokenizer (tokens and merges)")
    types: list[int] = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    pre, ignore_merges = _pre_tokenizer(str(fields.get("tokenizer.ggml.pre", "default")))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))  # type: ignore[arg-type]
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    added = [
        AddedToken(tokens[i], special=types[i] == _TOKEN_CONTROL, normalized=False)
        for i in range(len(tokens))
        if types[i] in (_TOKEN_CONTROL, _TOKEN_USER_DEFINED)
    ]
    tok.add_tokens(added)
    return HfTokenizer(tok.to_str(), name=name)
