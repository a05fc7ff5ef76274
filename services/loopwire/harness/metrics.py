"""The harness's Prometheus metrics: sessions running, turns, tool time, approvals waiting, failed runs.

Most are fed from the events a run emits (``observe``), so they count exactly what a client sees;
tool time comes from the tool executions themselves (``tool_finished``), so recorded outputs of a
replay are not counted as tools run. The two gauges are read at scrape time: running sessions
from the service, approvals waiting from the store (they outlive the process that asked).

Names (Prometheus shows dots as underscores, units as suffixes; buckets in
``telemetry.HISTOGRAM_BUCKETS``): loopwire.harness.sessions.active, loopwire.harness.approvals.waiting,
loopwire.harness.turns, loopwire.harness.turn.duration, loopwire.harness.turn.time_to_first_token,
loopwire.harness.turn.input_tokens, loopwire.harness.tool.calls, loopwire.harness.tool.duration,
loopwire.harness.runs.completed, loopwire.harness.runs.failed (by error.type),
loopwire.harness.approvals.requested.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry import metrics as otel_metrics

from loopwire.common import telemetry
from loopwire.common.errors import Code
from loopwire.harness.store import Decision, SessionStore
from loopwire.v1 import harness_pb2

MODEL = telemetry.MODEL_ATTRIBUTE
TOOL = "gen_ai.tool.name"
# What a session asked for when it named no model: the gateway's default.
DEFAULT_MODEL = "default"


class HarnessMetrics:
    """The instruments on one meter (a new telemetry setup gets new ones, see ``metrics()``)."""

    def __init__(self, meter: otel_metrics.Meter) -> None:
        self.meter = meter
        self.turns = meter.create_counter("loopwire.harness.turns", unit="{turn}", description="Model turns completed")
        self.turn_duration = meter.create_histogram(
            "loopwire.harness.turn.duration", unit="s", description="Wall time of a turn: model call and its tools",
            explicit_bucket_boundaries_advisory=telemetry.HISTOGRAM_BUCKETS["loopwire.harness.turn.duration"])
        self.turn_ttft = meter.create_histogram(
            "loopwire.harness.turn.time_to_first_token", unit="s",
            description="Time from sending a turn's request to its first output event, as the harness sees it",
            explicit_bucket_boundaries_advisory=telemetry.HISTOGRAM_BUCKETS["loopwire.harness.turn.time_to_first_token"])
        self.turn_input_tokens = meter.create_histogram(
            "loopwire.harness.turn.input_tokens", unit="{token}", description="Prompt tokens of a turn",
            explicit_bucket_boundaries_advisory=telemetry.HISTOGRAM_BUCKETS["loopwire.harness.turn.input_tokens"])
        self.tool_calls = meter.create_counter(
            "loopwire.harness.tool.calls", unit="{call}", description="Tool calls executed, by tool and outcome")
        self.tool_duration = meter.create_histogram(
            "loopwire.harness.tool.duration", unit="s", description="Execution time of one tool call, by tool",
            explicit_bucket_boundaries_advisory=telemetry.HISTOGRAM_BUCKETS["loopwire.harness.tool.duration"])
        self.runs_completed = meter.create_counter(
            "loopwire.harness.runs.completed", unit="{run}", description="Runs that completed their task")
        self.runs_failed = meter.create_counter(
            "loopwire.harness.runs.failed", unit="{run}", description="Runs that ended failed, by error.type")
        self.approvals_requested = meter.create_counter(
            "loopwire.harness.approvals.requested", unit="{call}", description="Tool calls that asked for approval")

    def observe(self, event: harness_pb2.RunResponse, model: str) -> None:
        """Count one event a run emitted to its client."""
        kind = event.WhichOneof("event")
        attrs = {MODEL: model or DEFAULT_MODEL}
        if kind == "turn_completed":
            p = event.turn_completed.profile
            self.turns.add(1, attrs)
            self.turn_duration.record(p.wall_us / 1e6, attrs)
            if p.harness_ttft_us:
                self.turn_ttft.record(p.harness_ttft_us / 1e6, attrs)
            self.turn_input_tokens.record(p.usage.input_tokens, attrs)
        elif kind == "completed":
            self.runs_completed.add(1, attrs)
        elif kind == "failed":
            self.runs_failed.add(1, {**attrs, "error.type": Code.Name(event.failed.error.code)})
        elif kind == "approval_requested":
            self.approvals_requested.add(1, attrs)

    def tool_finished(self, name: str, seconds: float, is_error: bool) -> None:
        attrs: dict[str, str | bool] = {TOOL: name, "loopwire.tool.error": is_error}
        self.tool_calls.add(1, attrs)
        self.tool_duration.record(seconds, {TOOL: name})


_current: HarnessMetrics | None = None


def metrics() -> HarnessMetrics:
    """The instruments of this process's current telemetry setup (no-ops when metrics are off)."""
    global _current
    meter = telemetry.meter()
    if _current is None or _current.meter is not meter:
        _current = HarnessMetrics(meter)
    return _current


def count_waiting_approvals(store: SessionStore) -> int:
    """Tool calls waiting for a decision, across sessions and restarts (the store is thread-safe: the
    scrape runs on the metrics server's thread). ``_query`` is the engines' shared SQL entry point."""
    rows = store._query("SELECT COUNT(*) FROM pending_calls WHERE decision = ?", (Decision.PENDING,))
    return int(rows[0][0]) if rows else 0


def watch(active_sessions: Callable[[], int], waiting_approvals: Callable[[], int]) -> None:
    """Register the scrape-time gauges: sessions running in this process, approvals waiting in the store."""

    def sessions(_options: otel_metrics.CallbackOptions) -> Iterable[otel_metrics.Observation]:
        yield otel_metrics.Observation(active_sessions())

    def approvals(_options: otel_metrics.CallbackOptions) -> Iterable[otel_metrics.Observation]:
        yield otel_metrics.Observation(waiting_approvals())

    meter = metrics().meter
    meter.create_observable_gauge("loopwire.harness.sessions.active", [sessions], unit="{session}",
                                  description="Session runs in progress in this harness")
    meter.create_observable_gauge("loopwire.harness.approvals.waiting", [approvals], unit="{call}",
                                  description="Tool calls waiting for an approval decision (all sessions)")
