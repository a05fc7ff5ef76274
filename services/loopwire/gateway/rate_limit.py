"""Per-tenant token buckets: requests/min, tokens/min, concurrent streams."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loopwire.common.auth import Limits


@dataclass
class TokenBucket:
    """Holds up to ``capacity``; refills ``capacity`` per minute. May go into debt."""

    capacity: float
    clock: Callable[[], float] = time.monotonic
    level: float = field(init=False)
    _at: float = field(init=False)

    def __post_init__(self) -> None:
        self.level = self.capacity
        self._at = self.clock()

    def _refill(self) -> None:
        now = self.clock()
        self.level = min(self.capacity, self.level + (now - self._at) * self.capacity / 60.0)
        self._at = now

    def try_take(self, amount: float) -> int:
        """Take ``amount`` and return 0, or take nothing and return the wait in ms."""
        if self.capacity <= 0:
            return 0
        self._refill()
        needed = min(amount, self.capacity)  # a request larger than the bucket waits for a full one
        if self.level >= needed:
            self.level -= amount
            return 0
        return max(1, int((needed - self.level) * 60_000 / self.capacity) + 1)

    def charge(self, amount: float) -> None:
        """Take ``amount`` after the fact (output tokens); the debt delays the next request."""
        if self.capacity > 0:
            self._refill()
            self.level -= amount


class TenantLimiter:
    """The buckets of one tenant."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.requests = TokenBucket(limits.requests_per_minute, clock)
        self.tokens = TokenBucket(limits.tokens_per_minute, clock)
        self.open_streams = 0

    def open_stream(self) -> int:
        """0 when a stream may open (and counts it), else a retry delay in ms."""
        if self.limits.concurrent_streams and self.open_streams >= self.limits.concurrent_streams:
            return 1000
        self.open_streams += 1
        return 0

    def close_stream(self) -> None:
        self.open_streams = max(0, self.open_streams - 1)

    def admit(self, input_tokens: int) -> int:
        """0 when a request may run (and charges it), else a retry delay in ms."""
        wait = self.requests.try_take(1)
        if wait:
            return wait
        wait = self.tokens.try_take(input_tokens)
        if wait:
            self.requests.charge(-1)  # refund: the request did not run
        return wait
