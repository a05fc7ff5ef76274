"""Turning logits into tokens, and verifying drafts losslessly.

Greedy verification accepts a draft token iff it equals the target's argmax, so the output
equals plain greedy decoding. With temperature > 0 it is speculative rejection sampling
(Leviathan et al. 2023; Chen et al. 2023): accept draft ``d`` with probability
``min(1, p(d) / q(d))``, else sample from ``normalize(max(p - q, 0))``; the output is
distributed exactly as sampling from the target ``p``. A replay oracle replaces the target:
a draft is accepted iff it equals the recorded next token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from loopwire.inference.drafter import Draft


class TokenGrammar(Protocol):
    """A sequence's place in its grammar (``constraint.TokenMatcher``)."""

    def mask(self, n_logits: int) -> np.ndarray: ...

    def consume(self, token: int) -> bool: ...


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0


def target_probs(logits: np.ndarray, settings: SamplingSettings) -> np.ndarray:
    """Softmax at the temperature, truncated to the top-p nucleus (rows of ``logits``)."""
    z = logits.astype(np.float64) / max(settings.temperature, 1e-6)
    z -= z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    if 0.0 < settings.top_p < 1.0:
        for row in p:
            order = np.argsort(-row)
            keep = np.cumsum(row[order]) - row[order] < settings.top_p
            cut = np.zeros_like(row, dtype=bool)
            cut[order[~keep]] = True
            row[cut] = 0.0
            row /= row.sum()
    return p


def verify(
    logits: np.ndarray,
    draft: Draft,
    settings: SamplingSettings,
    rng: np.random.Generator,
) -> list[int]:
    """Tokens produced by one verification step: the accepted drafts and one more.

    ``logits`` has ``len(draft.token_ids) + 1`` rows: row i predicts the token after draft i-1.
    """
    drafts = draft.token_ids
    if settings.temperature <= 0.0:
        targets = np.argmax(logits, axis=-1)
        out: list[int] = []
        for i, d in enumerate(drafts):
            if int(targets[i]) != d:
                break
            out.append(d)
        out.append(int(targets[len(out)]))
        return out
    p = target_probs(logits, settings)
    out = []
    for i, d in enumerate(drafts):
        q_d = 1.0 if draft.probs is None else float(draft.probs[i, d])
        if rng.random() < min(1.0, p[i, d] / max(q_d, 1e-30)):
            out.append(d)
            continue
        residual = p[i].copy()
        if draft.probs is None:
            residual[d] = 0.0
        else:
            residual = np.maximum(residual - draft.probs[i], 0.0)
        total = residual.sum()
        out.append(int(rng.choice(len(residual), p=residual / total)) if total > 0 else int(np.argmax(p[i])))
        return out
    out.append(int(rng.choice(p.shape[-1], p=p[len(drafts)])))
    return out


def verify_oracle(drafts: Sequence[int], oracle_next: Sequence[int]) -> list[int]:
    """Replay: drafts are accepted while they match the recording, then the recorded token."""
    out: list[int] = []
    for d, o in zip(drafts, oracle_next, strict=False):
        if d != o:
            break
        out.append(d)
    if len(out) < len(oracle_next):
        out.append(int(oracle_next[len(out)]))
    return out


class NoAllowedToken(Exception):
    """The grammar allows no token at this position: the constraint cannot be satisfied."""


def verify_masked(
    logits: np.ndarray,
    draft: Draft,
    settings: SamplingSettings,
    rng: np.random.Generator,
    first_mask: np.ndarray,
    matcher: TokenGrammar,
) -> list[int]:
    """``verify`` under a grammar: row i is masked by what the grammar allows after the tokens
    accepted before it, so a draft the grammar forbids has probability 0 and is rejected, and
    the output is what non-speculative constrained decoding gives (greedy: exactly; sampled: in
    distribution). Every chosen token is consumed by ``matcher``."""
    drafts = draft.token_ids
    out: list[int] = []
    mask = first_mask
    for i in range(len(drafts) + 1):
        if not mask.any():
            raise NoAllowedToken(f"no token is allowed at output position {len(out)}")
        row = np.where(mask, logits[i], -np.inf)
        d = drafts[i] if i < len(drafts) else None
        if settings.temperature <= 0.0:
            token = int(np.argmax(row))
            accepted = token == d
        else:
            p = target_probs(row[None, :], settings)[0]
            if d is None:
                token, accepted = int(rng.choice(p.shape[-1], p=p)), False
            else:
                q = None if draft.probs is None else draft.probs[i]
                q_d = 1.0 if q is None else float(q[d])
                accepted = bool(rng.random() < min(1.0, p[d] / max(q_d, 1e-30)))
                token = d
                if not accepted:
                    residual = p.copy()
                    if q is None:
                        residual[d] = 0.0
                    else:
                        residual = np.maximum(residual - np.where(mask, q, 0.0), 0.0)
                    total = residual.sum()
                    token = int(rng.choice(len(residual), p=residual / total)) if total > 0 else int(np.argmax(p))
        matcher.consume(token)
        out.append(token)
        if not accepted:
            break
        if i < len(drafts):
            mask = matcher.mask(logits.shape[-1])
    return out
