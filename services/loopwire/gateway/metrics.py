"""Counters of the gateway's work and of the events worth alerting on, exported live.

Each count is kept as a plain integer (tests and the shutdown log line read them) and
added at the same moment to an OpenTelemetry counter of the process's meter, so a
Prometheus scrape of ``--metrics-port`` sees it while the gateway runs. Every point
carries the served model's name (``gen_ai.request.model``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

from opentelemetry import metrics as otel_metrics

from loopwire.common import telemetry

MODEL_ATTRIBUTE = "gen_ai.request.model"

# Field -> (OpenTelemetry instrument name, unit, description). Prometheus shows each as
# ``<name with dots as underscores>_total``.
COUNTERS: dict[str, tuple[str, str, str]] = {
    "responses": ("loopwire.gateway.responses", "{response}", "Responses completed"),
    "failed_responses": ("loopwire.gateway.failed_responses", "{response}", "Responses that ended in an error"),
    "cache_breaks": ("loopwire.gateway.cache_breaks", "{response}",
                     "Full requests that did not extend the conversation held (prefix cache lost past that point)"),
    "previous_response_not_found": ("loopwire.gateway.previous_response_not_found", "{response}",
                                    "Deltas naming a response the gateway does not hold (PREVIOUS_RESPONSE_NOT_FOUND)"),
    "rate_limited": ("loopwire.gateway.rate_limited", "{request}",
                     "Streams and requests refused by a tenant's rate limits"),
    "append_sends": ("loopwire.gateway.append_sends", "{generation}", "Generations sent as an append of new ids"),
    "full_sends": ("loopwire.gateway.full_sends", "{generation}", "Generations sent with the full prompt"),
    "state_lost_resends": ("loopwire.gateway.state_lost_resends", "{generation}",
                           "Appends a replica answered STATE_LOST, resent in full"),
    "failovers": ("loopwire.gateway.failovers", "{generation}", "Generations continued on another replica"),
    "relinks": ("loopwire.gateway.relinks", "{session}",
                "Sessions whose replica stream ended between generations, routed anew"),
    "safety_cuts": ("loopwire.gateway.safety_cuts", "{response}", "Responses stopped by a safety verdict"),
    "tokens_tokenized": ("loopwire.gateway.tokens_tokenized", "{token}", "Tokens the gateway tokenized"),
    "tokens_forwarded": ("loopwire.gateway.tokens_forwarded", "{token}", "Prompt tokens sent to replicas"),
}


@dataclass
class GatewayMetrics:
    responses: int = 0
    failed_responses: int = 0
    cache_breaks: int = 0
    previous_response_not_found: int = 0
    rate_limited: int = 0
    append_sends: int = 0
    full_sends: int = 0
    state_lost_resends: int = 0
    failovers: int = 0
    relinks: int = 0
    safety_cuts: int = 0
    tokens_tokenized: int = 0
    tokens_forwarded: int = 0
    _meter: otel_metrics.Meter | None = field(default=None, repr=False, compare=False)
    _counters: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def add(self, name: str, model: str, n: int = 1) -> None:
        """Count ``n`` events of ``name`` (a field of this class) for ``model``."""
        setattr(self, name, getattr(self, name) + n)
        meter = telemetry.meter()  # a new telemetry setup makes a new meter: the instruments follow it
        if meter is not self._meter:
            self._meter = meter
            self._counters = {key: meter.create_counter(otel, unit=unit, description=desc)
                              for key, (otel, unit, desc) in COUNTERS.items()}
        self._counters[name].add(n, {MODEL_ATTRIBUTE: model})

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


class Stopwatch:
    """Sums the CPU time of this thread in synchronous sections: the gateway's own work
    for one response, excluding waits on inference or the network (and other threads).

    Only a part of what a turn costs the gateway process: gRPC's own threads, the event
    loop between sections and the relay of every output token are outside it (the
    benchmark measures the process CPU per turn)."""

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
