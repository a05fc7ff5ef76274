"""Speculative-decoding drafters: cheap guesses of the next tokens that one forward pass
verifies.

A ``Drafter`` opens a ``DraftContext`` per sequence; the engine feeds it every token the
sequence gains and asks it for up to ``k`` proposals before each decode step. Proposals may
carry the drafter's probabilities (a draft model would); without them the proposal is
deterministic, which rejection sampling treats as probability one. A deterministic drafter may
add alternatives: other branches, each starting with a token of its own, verified in the same
step as forks of the sequence (the engine keeps the branch the target follows). Prompt lookup lives
here; suffix decoding (shared across sessions) in ``suffix_tree.py``; a small draft model
fits the same two protocols. ``finish`` tells a context its request ended (a drafter that
learns from outputs keeps them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass
class Draft:
    token_ids: list[int]
    # [len(token_ids), vocab] drafter probabilities, or None for a deterministic proposal.
    probs: np.ndarray | None = None
    # Other branches (deterministic drafts only): each starts with a token no other branch starts
    # with, most likely first.
    alternatives: list[list[int]] = field(default_factory=list)


class DraftContext(Protocol):
    def extend(self, token_ids: Sequence[int]) -> None: ...

    def propose(self, k: int, branches: int = 1) -> Draft:
        """Up to ``k`` tokens, and up to ``branches - 1`` alternatives of up to ``k`` each."""
        ...

    def finish(self) -> None: ...


class Drafter(Protocol):
    name: str

    def open(self, token_ids: Sequence[int], session_id: str = "", namespace: str = "",
             base: Callable[[], object] | None = None) -> DraftContext:
        """A context over ``token_ids``; ``base``, when given, is a weak reference to the context
        of the request whose finished sequence ``token_ids`` starts with (a stream's append)."""
        ...


class PromptLookupDrafter:
    """N-gram prompt lookup: find the latest earlier occurrence of the context's last n
    tokens (longest n first) and propose what followed it. Agent sessions repeat file
    contents, paths and commands, so this predicts well and costs O(1) per token."""

    name = "prompt_lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def open(self, token_ids: Sequence[int], session_id: str = "", namespace: str = "",
             base: Callable[[], object] | None = None) -> PromptLookupContext:
        ctx = PromptLookupContext(self.max_ngram, self.min_ngram)
        ctx.extend(token_ids)
        return ctx


class PromptLookupContext:
    """The session's tokens plus, per n-gram, the position right after its latest occurrence
    whose continuation is known."""

    def __init__(self, max_ngram: int, min_ngram: int) -> None:
        self.ngrams = range(max_ngram, min_ngram - 1, -1)
        self.tokens: list[int] = []
        self.next_pos: dict[tuple[int, ...], int] = {}

    def extend(self, token_ids: Sequence[int]) -> None:
        tokens, index = self.tokens, self.next_pos
        for t in token_ids:
            p = len(tokens)  # position of the token being added: the continuation of grams ending at p-1
            for n in self.ngrams:
                if p >= n:
                    index[tuple(tokens[p - n : p])] = p
            tokens.append(int(t))

    def propose(self, k: int, branches: int = 1) -> Draft:
        """One branch: the latest occurrence is the only evidence an n-gram index keeps."""
        tokens = self.tokens
        if k <= 0:
            return Draft([])
        for n in self.ngrams:
            if len(tokens) < n:
                continue
            start = self.next_pos.get(tuple(tokens[-n:]))
            if start is not None:
                return Draft(tokens[start : start + k])
        return Draft([])

    def finish(self) -> None:
        """Nothing to keep: the index is the session's own context."""
