"""What a step costs on this machine, measured: the draft-length policy's price for an engine the
roofline does not describe (the CPU reference engine).

On a GPU a decode step is bound by reading the weights, so verifying eight more tokens is nearly
free; on a CPU each verified row costs a sizeable share of a decode step (SmolLM2-135M, one
thread: about 36 ms a step plus 13 ms a row). A fixed draft length is then too long when drafts
are rarely accepted and too short when they are. This model fits a step's seconds to

    a + b * tokens + c * attention + d * logit_rows

(``attention``: the key positions each new token attends to, summed) by least squares over the
steps run so far, older steps forgotten exponentially, and prices a planned step with it, as
``CostModel.step_seconds`` does from the roofline.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FEATURES = 4


def features(chunks: Sequence[tuple[float, float]], logit_rows: float) -> np.ndarray:
    """The fitted terms of a step running ``(context_before, new_tokens)`` per sequence."""
    tokens = sum(n for _, n in chunks)
    attention = sum(n * ctx + n * (n + 1) / 2 for ctx, n in chunks)
    return np.array([1.0, tokens, attention, logit_rows])


class MeasuredStepCost:
    """Least-squares step time from observed steps; until enough are seen, a step's extra rows are
    priced free (the whole draft is verified, as with a fixed length)."""

    def __init__(self, decay: float = 0.995, ridge: float = 1e-9, min_steps: int = 8) -> None:
        if not 0.0 < decay <= 1.0:
            raise ValueError("need 0 < decay <= 1")
        self.decay = decay
        self.ridge = ridge
        self.min_steps = min_steps
        self.steps = 0
        self._xtx = np.zeros((FEATURES, FEATURES))
        self._xty = np.zeros(FEATURES)
        self._scale = np.ones(FEATURES)  # terms differ by orders of magnitude: fit in units of each
        self._coef: np.ndarray | None = None

    def observe(self, chunks: Sequence[tuple[float, float]], logit_rows: float, seconds: float) -> None:
        """A step that ran ``chunks`` with ``logit_rows`` output rows took ``seconds``."""
        x = features(chunks, logit_rows)
        self._scale = np.maximum(self._scale, np.abs(x))
        self._xtx *= self.decay
        self._xty *= self.decay
        self._xtx += np.outer(x, x)
        self._xty += x * seconds
        self.steps += 1
        self._coef = None

    def coefficients(self) -> np.ndarray | None:
        """``(a, b, c, d)`` of the fit, or None before ``min_steps`` steps."""
        if self.steps < self.min_steps:
            return None
        if self._coef is None:
            s = self._scale
            a = self._xtx / np.outer(s, s) + self.ridge * np.eye(FEATURES)
            self._coef = np.linalg.solve(a, self._xty / s) / s
        return self._coef

    def step_seconds(self, chunks: Sequence[tuple[float, float]]) -> float:
        """Seconds of a decode step over ``chunks`` (every new token gives a logits row)."""
        tokens = sum(n for _, n in chunks)
        if tokens == 0:
            return 0.0
        coef = self.coefficients()
        if coef is None:
            return 1.0  # no news yet: rows are free, the whole draft is verified
        # Never below a step of single-token decodes: a fit on few steps may slope down.
        floor = float(features([(c, 1.0) for c, _ in chunks], len(chunks)) @ coef)
        return max(float(features(chunks, tokens) @ coef), floor, 1e-9)
