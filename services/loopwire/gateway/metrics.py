"""Counters of the gateway's work and of the events worth alerting on."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields


@dataclass
class GatewayMetrics:
    responses: int = 0
    failed_responses: int = 0
    cache_breaks: int = 0
    previous_response_not_found: int = 0
    append_sends: int = 0
    full_sends: int = 0
    state_lost_resends: int = 0
    failovers: int = 0
    safety_cuts: int = 0
    tokens_tokenized: int = 0
    tokens_forwarded: int = 0

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Stopwatch:
    """Sums the CPU time of this thread in synchronous sections: the gateway's own work
    for one response, excluding waits on inference or the network (and other threads)."""

    __slots__ = ("ns", "_t0")

    def __init__(self) -> None:
        self.ns = 0
        self._t0 = 0

    def __enter__(self) -> Stopwatch:
        self._t0 = time.thread_time_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.ns += time.thread_time_ns() - self._t0

    @property
    def us(self) -> int:
        return self.ns // 1000
