"""The tokenizer embedded in a GGUF file, converted once to a ``tokenizer.json``.

Two kinds, as llama.cpp names them in ``tokenizer.ggml.model``:

* ``gpt2``, byte-level BPE (Llama 3, Qwen, SmolLM, DeepSeek): tokens, merges, token types and
  the name of a pre-tokenizer (``tokenizer.ggml.pre``), which llama.cpp maps to split
  patterns (llama-vocab.cpp). The same mapping is written here as HF components;
* ``llama``, SentencePiece (Llama 2, TinyLlama, Mistral, Phi-3): tokens with scores and no
  merges. llama.cpp merges the adjacent pair whose result has the highest score, falls back
  to ``<0xXX>`` byte tokens, writes spaces as ``▁`` and prefixes a space to the text and
  after every special token. That is HF's BPE with merges ordered by the merged token's
  score, byte fallback, and the legacy Llama normalizer (prepend ``▁`` to each text
  segment, replace spaces), as transformers converts a SentencePiece model.

So the gateway and the inference service tokenize a GGUF model with the library every other
model uses.
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

# Qwen3.5's: Qwen2's with combining marks (\p{M}) kept with the letters they follow.
_QWEN35_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# DeepSeek's are sequences of patterns, each splitting the pieces the previous one left;
# non-ASCII written as escapes, since an editor's Unicode normalization would change them.
_DEEPSEEK_LLM_PATTERNS = (
    '[\r\n]',
    '\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373'
    '\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481'
    '\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf'
    '\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d'
    '\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-'
    '\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113'
    '\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149'
    '\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b'
    '\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a'
    '\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-'
    '\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+',
    '\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+',
    '\\s+$',
    '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
    '\\p{N}+',
)
_DEEPSEEK_CODER_PATTERNS = (
    '[\r\n]',
    '\\s?\\p{L}+',
    '\\s?\\p{P}+',
    '[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+',
    '\\p{N}',
)
_DEEPSEEK_V3_PATTERNS = (
    '\\p{N}{1,3}',
    '[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+',
    '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|'
    ' ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
)

_TOKEN_CONTROL = 3
_TOKEN_USER_DEFINED = 4


def _splits(*patterns: str) -> list[Any]:
    from tokenizers import Regex, pre_tokenizers

    return [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in patterns]


def _pre_tokenizer(pre: str) -> tuple[Any, bool]:
    """HF pre-tokenizer for a GGUF ``tokenizer.ggml.pre`` name, and whether merges are ignored."""
    from tokenizers import pre_tokenizers

    byte_level_regex = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    byte_level_plain = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("default", "gpt-2"):
        return byte_level_regex, False
    if pre == "smollm":  # digits one by one, then the GPT-2 pattern
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level_regex]), False
    if pre in ("llama-bpe", "llama3"):
        return pre_tokenizers.Sequence([*_splits(_LLAMA3_PATTERN), byte_level_plain]), True
    patterns = {
        "qwen2": (_QWEN2_PATTERN,), "deepseek-r1-qwen": (_QWEN2_PATTERN,), "qwen35": (_QWEN35_PATTERN,),
        "deepseek-llm": _DEEPSEEK_LLM_PATTERNS, "deepseek-coder": _DEEPSEEK_CODER_PATTERNS,
        "deepseek-v3": _DEEPSEEK_V3_PATTERNS,
    }
    if pre in patterns:
        return pre_tokenizers.Sequence([*_splits(*patterns[pre]), byte_level_plain]), False
    raise TokenizerError(f"GGUF pre-tokenizer {pre!r} is not supported (supported: default, gpt-2, smollm, "
                         f"llama-bpe, {', '.join(patterns)})")


def _added_tokens(tokens: list[str], types: list[int]) -> list[Any]:
    """Control tokens (special) and user-defined ones, matched in the raw text before anything else."""
    from tokenizers import AddedToken

    return [AddedToken(tokens[i], special=types[i] == _TOKEN_CONTROL, normalized=False)
            for i in range(len(tokens)) if types[i] in (_TOKEN_CONTROL, _TOKEN_USER_DEFINED)]


def _bpe(fields: dict[str, Any], name: str, tokens: list[str], types: list[int]) -> Any:
    from tokenizers import Tokenizer, decoders, models

    merges: list[str] = fields.get("tokenizer.ggml.merges") or []
    if not merges:
        raise TokenizerError(f"{name}: the GGUF has no embedded tokenizer (tokens and merges)")
    pre, ignore_merges = _pre_tokenizer(str(fields.get("tokenizer.ggml.pre", "default")))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, ignore_merges=ignore_merges))  # type: ignore[arg-type]
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    return tok


def _spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """Every split of a token into two tokens, best merged score first (llama.cpp merges the
    adjacent pair whose concatenation scores highest; equal scores: the earlier pair)."""
    ids = {tok: i for i, tok in enumerate(tokens)}
    merges = []
    for i, tok in enumerate(tokens):
        for k in range(1, len(tok)):
            left, right = tok[:k], tok[k:]
            if left in ids and right in ids:
                merges.append((-scores[i], ids[left], ids[right], left, right))
    merges.sort()
    return [(m[3], m[4]) for m in merges]


def _spm(fields: dict[str, Any], name: str, tokens: list[str], types: list[int]) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers

    scores: list[float] = fields.get("tokenizer.ggml.scores") or []
    if len(scores) != len(tokens):
        raise TokenizerError(f"{name}: the GGUF's SentencePiece tokenizer has no scores for its tokens")
    unk = int(fields.get("tokenizer.ggml.unknown_token_id", 0))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    model = models.BPE(vocab=vocab, merges=_spm_merges(tokens, scores), unk_token=tokens[unk],  # type: ignore[arg-type]
                       byte_fallback=True, fuse_unk=True)
    tok = Tokenizer(model)
    space_prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", True))
    replace = normalizers.Replace(" ", "\u2581")
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), replace]) if space_prefix else replace
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if space_prefix else []))
    return tok


def tokenizer_from_gguf(fields: dict[str, Any], name: str) -> HfTokenizer:
    """Build the tokenizer from a GGUF's ``tokenizer.ggml.*`` metadata (already read as values)."""
    model = fields.get("tokenizer.ggml.model")
    builders = {"gpt2": _bpe, "llama": _spm}
    if model not in builders:
        raise TokenizerError(f"{name}: GGUF tokenizer model {model!r} is not supported "
                             "(byte-level BPE 'gpt2' and SentencePiece 'llama' are)")
    tokens: list[str] = fields.get("tokenizer.ggml.tokens") or []
    if not tokens:
        raise TokenizerError(f"{name}: the GGUF has no embedded tokenizer (tokens)")
    types: list[int] = fields.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    tok = builders[model](fields, name, tokens, types)
    tok.add_tokens(_added_tokens(tokens, types))
    return HfTokenizer(tok.to_str(), name=name)
