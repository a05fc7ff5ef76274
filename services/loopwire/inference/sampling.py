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


def verify_branches(
    logits: Sequence[np.ndarray],
    drafts: Sequence[Sequence[int]],
    settings: SamplingSettings,
    rng: np.random.Generator,
) -> tuple[list[int], int]:
    """``verify`` over several deterministic branches, each starting with a token of its own;
    the tokens produced and the branch they follow.

    ``logits[j]`` are branch j's rows; every branch's first row is the same position's. Greedy:
    the branch whose first token is the target's argmax (else the first one, whose verification
    then yields the argmax). Sampled: the first tokens are tried in order, each accepted with its
    probability under what the earlier rejections left (multi-draft rejection sampling with
    deterministic drafts: a first token is then distributed exactly as the target's), and the
    chosen branch is verified on from there; when all are rejected, a token from the rest.
    """
    if len(drafts) == 1:
        return verify(logits[0], Draft(list(drafts[0])), settings, rng), 0
    if settings.temperature <= 0.0:
        first = int(np.argmax(logits[0][0]))
        j = next((j for j, d in enumerate(drafts) if d and d[0] == first), 0)
        return verify(logits[j], Draft(list(drafts[j])), settings, rng), j
    residual = target_probs(logits[0][:1], settings)[0]
    for j, d in enumerate(drafts):
        total = residual.sum()
        if total <= 0:
            break
        if rng.random() < residual[d[0]] / total:
            rest = verify(logits[j][1:], Draft(list(d[1:])), settings, rng)
            return [d[0], *rest], j
        residual[d[0]] = 0.0
    total = residual.sum()
    token = int(rng.choice(len(residual), p=residual / total)) if total > 0 else int(np.argmax(logits[0][0]))
    return [token], 0


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
