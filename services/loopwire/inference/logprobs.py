"""Log-probabilities of output tokens, as OpenAI's ``logprobs`` report them.

They are of the model's own next-token distribution: ``log_softmax`` of the raw logits, before
temperature, top_p and a grammar's mask (what OpenAI returns, and vLLM's default
``raw_logprobs``), so they do not depend on how the token was picked. A token accepted from a
draft gets exactly the row it would get without speculation: the verification pass computes the
same logits at that position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The most alternatives a request may ask for (OpenAI's limit).
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True, slots=True)
class TokenLogprobs:
    """One output token's log-probability and the ``k`` most likely (token, log-probability)."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: np.ndarray, token: int, k: int) -> TokenLogprobs:
    """``token``'s entry from one row of raw logits, with its ``k`` most likely tokens (most likely
    first; equal values by lower id)."""
    z = np.asarray(logits, dtype=np.float64)
    top = z.max()
    lp = z - (top + np.log(np.exp(z - top).sum()))
    np.minimum(lp, 0.0, out=lp)  # rounding never makes a probability exceed 1
    if k <= 0:
        return TokenLogprobs(float(lp[token]))
    k = min(k, lp.shape[-1])
    idx = np.argpartition(-lp, k - 1)[:k]
    idx = idx[np.lexsort((idx, -lp[idx]))]
    return TokenLogprobs(float(lp[token]), tuple((int(i), float(lp[i])) for i in idx))


def certain(token: int, k: int) -> TokenLogprobs:
    """An engine without logits (the simulated one) emits its synthetic token with probability 1."""
    return TokenLogprobs(0.0, ((token, 0.0),) if k > 0 else ())
