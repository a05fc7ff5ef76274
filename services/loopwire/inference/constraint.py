"""Constrained decoding: llguidance token masks over the model's own tokenizer.

A ``Constraint`` (Lark grammar, JSON Schema or regex) is compiled once per generation into an
``LLMatcher``; before each sampled position the engine asks it which tokens keep the output
inside the grammar and masks the rest (-inf), then tells it the token chosen. Speculative
drafts are verified against the masked logits, so a drafted token the grammar forbids is
rejected and the output equals non-speculative constrained decoding. The masks of all the
constrained sequences of a step are computed together, in parallel, by llguidance's executor.

The llguidance tokenizer is built once per model (about a second) from the same tokenizer
the engine serves (Hugging Face ``tokenizers`` JSON, or the tiktoken encoding).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from loopwire.common.grammar import ConstraintError
from loopwire.common.grammar import llguidance as _llguidance
from loopwire.common.tokenizer import HfTokenizer, TiktokenTokenizer, Tokenizer

_tokenizers: dict[int, Any] = {}
_tokenizers_lock = threading.Lock()


def ll_tokenizer(tokenizer: Tokenizer, eos_token_id: int) -> Any:
    """The llguidance tokenizer of a model's tokenizer, built once per tokenizer object."""
    key = id(tokenizer)
    with _tokenizers_lock:
        found = _tokenizers.get(key)
        if found is not None:
            return found[1]
        llg = _llguidance()
        if isinstance(tokenizer, HfTokenizer):
            built = llg.LLTokenizer(tokenizer.serialize(), eos_token=eos_token_id)
        elif isinstance(tokenizer, TiktokenTokenizer):
            import llguidance.tiktoken as llt

            built = llt.lltokenizer_from_encoding(tokenizer._enc, eos_token=eos_token_id)
        else:
            raise ConstraintError(f"constrained decoding does not support the {tokenizer.kind!r} tokenizer")
        _tokenizers[key] = (tokenizer, built)  # keeps the tokenizer alive, so its id stays unique
        return built


# Compiled grammars at their start, by (tokenizer, grammar text): a session's turns bring the same
# grammar each time, and a copy of a compiled matcher costs a fraction of compiling it (LRU).
_COMPILED: OrderedDict[tuple[int, str], Any] = OrderedDict()
_COMPILED_MAX = 64
_compiled_lock = threading.Lock()


def compiled(tokenizer: Any, text: str) -> Any:
    """A pristine llguidance matcher of ``text`` (never consumed from: callers deep_copy it), or
    ConstraintError naming why it does not compile against ``tokenizer``."""
    key = (id(tokenizer), text)
    with _compiled_lock:
        found = _COMPILED.get(key)
        if found is not None:
            _COMPILED.move_to_end(key)
            return found
    m = _llguidance().LLMatcher(tokenizer, text, log_level=0)
    if m.is_error():
        raise ConstraintError(m.get_error())
    with _compiled_lock:
        _COMPILED[key] = m
        if len(_COMPILED) > _COMPILED_MAX:
            _COMPILED.popitem(last=False)
    return m


@dataclass(frozen=True)
class Grammar:
    """A compiled-on-demand constraint of one request: the grammar and the tokenizer it masks."""

    text: str
    tokenizer: Any  # llguidance.LLTokenizer
    kind: str = "lark"  # the Constraint's form and text, for engines with their own backend (trtllm)
    source: str = ""
    generated: tuple[int, ...] = ()  # output of this grammar already at the end of the prompt

    def matcher(self) -> TokenMatcher:
        m = compiled(self.tokenizer, self.text).deep_copy()
        if self.generated:
            m.consume_tokens(list(self.generated))
        if m.is_error():
            raise ConstraintError(m.get_error())
        return TokenMatcher(m, int(self.tokenizer.vocab_size))


class TokenMatcher:
    """One sequence's position in its grammar."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        self.m = matcher
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32

    def mask_from_bits(self, bits: np.ndarray, n_logits: int) -> np.ndarray:
        """A boolean allow-mask of ``n_logits`` entries from llguidance's packed int32 bitmask."""
        allowed = np.unpackbits(bits.view(np.uint8), bitorder="little")[:n_logits].astype(bool)
        if allowed.size < n_logits:  # logits past the tokenizer's vocabulary (padding rows): never
            allowed = np.concatenate([allowed, np.zeros(n_logits - allowed.size, dtype=bool)])
        return allowed

    def mask(self, n_logits: int) -> np.ndarray:
        bits = np.frombuffer(self.m.compute_bitmask(), dtype=np.int32)
        return self.mask_from_bits(bits, n_logits)

    def consume(self, token: int) -> bool:
        return bool(self.m.consume_token(int(token)))

    @property
    def error(self) -> str:
        return str(self.m.get_error()) if self.m.is_error() else ""

    @property
    def stopped(self) -> bool:
        """The grammar is complete and allows nothing more (only the end of the output)."""
        return bool(self.m.is_stopped())


@functools.lru_cache(maxsize=1)
def _executor() -> Any:
    return _llguidance().LLExecutor()


def batch_masks(matchers: list[TokenMatcher], n_logits: int) -> list[np.ndarray]:
    """The next-token masks of several sequences, computed in parallel (llguidance's executor)."""
    if not matchers:
        return []
    words = matchers[0].words
    bits = np.full((len(matchers), words), -1, dtype=np.int32)
    import llguidance.numpy as lln

    lln.fill_next_token_bitmask_par(_executor(), [(t.m, i) for i, t in enumerate(matchers)], bits)
    return [t.mask_from_bits(bits[i], n_logits) for i, t in enumerate(matchers)]
