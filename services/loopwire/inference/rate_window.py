"""Tokens per second over the last few seconds of engine steps, kept as running sums.

The engine reports its recent prefill and decode rates on every status (after every step):
summing a window that holds each step of the last ``window_s`` seconds would cost time in the
number of steps in it (hundreds after a long prompt's chunked prefill), so the sums move with
each step added and each step that leaves the window.
"""

from __future__ import annotations

from collections import deque


class RateWindow:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._steps: deque[tuple[float, int, int]] = deque()  # (time, prefill tokens, decode tokens)
        self._prefill = 0
        self._decode = 0

    def add(self, t: float, prefill_tokens: int, decode_tokens: int) -> None:
        self._steps.append((t, prefill_tokens, decode_tokens))
        self._prefill += prefill_tokens
        self._decode += decode_tokens

    def totals(self, now: float) -> tuple[float, int, int]:
        """(span in seconds, prefill tokens, decode tokens) of the steps since ``now - window_s``;
        span 0.0 with fewer than two steps (no rate yet), else at least 1 ms."""
        steps = self._steps
        while steps and steps[0][0] < now - self.window_s:
            _, prefill, decode = steps.popleft()
            self._prefill -= prefill
            self._decode -= decode
        span = max(now - steps[0][0], 1e-3) if len(steps) > 1 else 0.0
        return span, self._prefill, self._decode
