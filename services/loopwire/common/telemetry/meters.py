"""Meters, the mesh's instruments and their bucket boundaries, and the Prometheus endpoint."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics as otel_metrics

from loopwire.v1 import common_pb2

from .tracing import INSTRUMENTATION_NAME, MODEL_ATTRIBUTE, served_model

log = logging.getLogger("loopwire.telemetry")

# Bucket boundaries per metric: OTel's defaults (0, 5, 10, 25, ... 10000) put every TTFT in
# seconds, every ratio and every acceptance length into one or two buckets.
TTFT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Tools and whole turns may run past a minute (the shell's default limit is 120 s).
LONG_BUCKETS_S = (*TTFT_BUCKETS_S, 120, 300, 600)
SPEED_BUCKETS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 50_000)
RATIO_BUCKETS = tuple(i / 10 for i in range(11))
TOKEN_BUCKETS = (10, 50, 100, 500, 1000, 5000, 10_000, 50_000, 100_000, 500_000, 1_000_000)
BYTE_BUCKETS = (100, 1000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000)
ACCEPTANCE_BUCKETS = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9, 17, 33, 65)  # 1 .. k+1 for k up to 64

# Every histogram of the mesh by instrument name, with its boundaries. The names are part of the
# interface (dashboards, alerts): Prometheus shows them with dots as underscores and the unit as
# a suffix (gen_ai.server.time_to_first_token -> gen_ai_server_time_to_first_token_seconds).
# A histogram not listed here gets OTel's default buckets.
HISTOGRAM_BUCKETS: dict[str, tuple[float, ...]] = {
    # inference, per generation
    "gen_ai.server.time_to_first_token": TTFT_BUCKETS_S,
    "loopwire.generation.tokens_per_second": SPEED_BUCKETS,
    "loopwire.prefix_cache.hit_ratio": RATIO_BUCKETS,
    "loopwire.speculative.acceptance_length": ACCEPTANCE_BUCKETS,
    # gateway, per response
    "loopwire.turn.tokens_tokenized": TOKEN_BUCKETS,
    "loopwire.turn.bytes": BYTE_BUCKETS,
    # harness, per turn and per tool call (loopwire.harness.metrics)
    "loopwire.harness.turn.duration": LONG_BUCKETS_S,
    "loopwire.harness.turn.time_to_first_token": TTFT_BUCKETS_S,
    "loopwire.harness.turn.input_tokens": TOKEN_BUCKETS,
    "loopwire.harness.tool.duration": LONG_BUCKETS_S,
}


def histogram_views() -> list[Any]:
    """One SDK View per histogram above: the boundaries hold whichever meter makes the instrument."""
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

    return [View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(boundaries))
            for name, boundaries in HISTOGRAM_BUCKETS.items()]


class Metrics:
    """The instruments of DESIGN §7, plus one-call recorders from the protos each layer has."""

    def __init__(self, meter: otel_metrics.Meter) -> None:
        self.ttft = meter.create_histogram(
            "gen_ai.server.time_to_first_token", unit="s", description="Time to first output token",
            explicit_bucket_boundaries_advisory=HISTOGRAM_BUCKETS["gen_ai.server.time_to_first_token"],
        )
        self.tokens_per_second = meter.create_histogram(
            "loopwire.generation.tokens_per_second",
            unit="{token}/s",
            description="Decode speed per generation",
            explicit_bucket_boundaries_advisory=HISTOGRAM_BUCKETS["loopwire.generation.tokens_per_second"],
        )
        self.output_tokens = meter.create_counter(
            "loopwire.generation.output_tokens", unit="{token}", description="Tokens generated"
        )
        self.generations = meter.create_counter(
            "loopwire.generation.finished", unit="{generation}",
            description="Generations finished, by finish reason (gen_ai.response.finish_reasons)",
        )
        self.prefix_cache_queried = meter.create_counter(
            "loopwire.prefix_cache.queried_tokens", unit="{token}", description="Prompt tokens looked up"
        )
        self.prefix_cache_hits = meter.create_counter(
            "loopwire.prefix_cache.hit_tokens", unit="{token}", description="Prompt tokens served from cache"
        )
        self.prefix_cache_hit_ratio = meter.create_histogram(
            "loopwire.prefix_cache.hit_ratio", unit="1", description="Cached share of each prompt",
            explicit_bucket_boundaries_advisory=HISTOGRAM_BUCKETS["loopwire.prefix_cache.hit_ratio"],
        )
        self.tokens_tokenized = meter.create_histogram(
            "loopwire.turn.tokens_tokenized",
            unit="{token}",
            description="Tokens the gateway tokenized per turn",
            explicit_bucket_boundaries_advisory=HISTOGRAM_BUCKETS["loopwire.turn.tokens_tokenized"],
        )
        self.bytes_per_turn = meter.create_histogram(
            "loopwire.turn.bytes", unit="By", description="Request bytes sent per turn",
            explicit_bucket_boundaries_advisory=HISTOGRAM_BUCKETS["loopwire.turn.bytes"],
        )
        self.acceptance_length = meter.create_histogram(
            "loopwire.speculative.acceptance_length",
            unit="{token}",
            description="Output tokens per verification step",
            explicit_bucket_boundaries_advisory=HISTOGRAM_BUCKETS["loopwire.speculative.acceptance_length"],
        )
        self.queue_depth = meter.create_gauge(
            "loopwire.inference.queue_depth", unit="{request}", description="Generations waiting to run"
        )

    def record_generation(
        self, usage: common_pb2.Usage, timings: common_pb2.Timings, model: str = "",
        finish_reason: common_pb2.FinishReason.ValueType = common_pb2.FINISH_REASON_UNSPECIFIED,
    ) -> None:
        """Inference, at GenerationFinished: TTFT, tokens/s, cache hits, acceptance length."""
        attrs = {MODEL_ATTRIBUTE: model or served_model()}
        reason = common_pb2.FinishReason.Name(finish_reason).removeprefix("FINISH_REASON_").lower()
        self.generations.add(1, {**attrs, "gen_ai.response.finish_reasons": reason})
        if timings.ttft_us:
            self.ttft.record(timings.ttft_us / 1e6, attrs)
        if timings.decode_us and usage.output_tokens:
            self.tokens_per_second.record(usage.output_tokens / (timings.decode_us / 1e6), attrs)
        self.output_tokens.add(usage.output_tokens, attrs)
        self.prefix_cache_queried.add(usage.input_tokens, attrs)
        self.prefix_cache_hits.add(usage.cached_input_tokens, attrs)
        if usage.input_tokens:
            self.prefix_cache_hit_ratio.record(usage.cached_input_tokens / usage.input_tokens, attrs)
        if usage.verification_steps:
            self.acceptance_length.record(usage.output_tokens / usage.verification_steps, attrs)

    def record_response(self, timings: common_pb2.Timings, model: str = "") -> None:
        """Gateway, at ResponseCompleted: tokens tokenized and bytes received for this turn."""
        attrs = {MODEL_ATTRIBUTE: model or served_model()}
        self.tokens_tokenized.record(timings.tokens_tokenized, attrs)
        self.bytes_per_turn.record(timings.bytes_received, attrs)

    def set_queue_depth(self, waiting: int, replica_id: str = "") -> None:
        self.queue_depth.set(waiting, {"loopwire.replica_id": replica_id, MODEL_ATTRIBUTE: served_model()})


@dataclass
class MeterState:
    """This process's meter and instruments (no-ops until ``start`` gets a port) and its endpoint."""

    provider: Any = None
    server: Any = None
    metrics: Metrics | None = None
    meter: otel_metrics.Meter | None = None

    def start(self, service_name: str, resource: Any, metrics_port: int | None,
              metrics_host: str) -> int | None:
        """Serve Prometheus on ``metrics_port`` (0 = any free one); returns the bound port, None when off."""
        port: int | None = None
        meter: otel_metrics.Meter = otel_metrics.NoOpMeter(INSTRUMENTATION_NAME)
        if metrics_port is not None:
            import prometheus_client
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from opentelemetry.sdk.metrics import MeterProvider

            registry = prometheus_client.CollectorRegistry()
            reader = PrometheusMetricReader(registry=registry)
            self.provider = MeterProvider(resource=resource, metric_readers=[reader], views=histogram_views())
            server, _thread = prometheus_client.start_http_server(
                metrics_port, addr=metrics_host, registry=registry
            )
            self.server = server
            port = int(server.server_port)
            meter = self.provider.get_meter(INSTRUMENTATION_NAME)
            log.info("Prometheus metrics of %s on port %d", service_name, port)
        self.meter = meter
        self.metrics = Metrics(meter)
        return port

    def flush(self) -> None:
        """Shut the provider down and stop the endpoint."""
        if self.provider is not None:
            self.provider.shutdown()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def reset(self) -> None:
        self.provider = self.server = None
        self.metrics = None
        self.meter = None


STATE = MeterState()


def metrics() -> Metrics:
    """The instruments of this process (no-ops until ``setup`` is given a metrics port)."""
    if STATE.metrics is None:
        STATE.metrics = Metrics(otel_metrics.NoOpMeter(INSTRUMENTATION_NAME))
    return STATE.metrics


def meter() -> otel_metrics.Meter:
    """The meter of this process's setup, for a service's own instruments (a no-op one when metrics are off).

    A new ``setup`` makes a new meter: keep instruments per meter (see ``loopwire.harness.metrics``).
    """
    if STATE.meter is None:
        STATE.meter = otel_metrics.NoOpMeter(INSTRUMENTATION_NAME)
    return STATE.meter
