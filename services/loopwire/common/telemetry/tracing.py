"""Tracer provider, exporters and W3C context propagation: the part every other concern reads."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("loopwire.telemetry")

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
INSTRUMENTATION_NAME = "loopwire"
MODEL_ATTRIBUTE = "gen_ai.request.model"

_PROPAGATOR = TraceContextTextMapPropagator()
TRACE_KEYS = frozenset(_PROPAGATOR.fields)


@dataclass
class TracingState:
    """This process's tracer (a no-op one until ``start``) and the model it serves, if any."""

    tracer: trace.Tracer = field(default_factory=lambda: trace.NoOpTracer())
    provider: Any = None
    # The model this process serves, when it serves one (inference): on its spans and metrics.
    model: str = ""

    def start(self, service_name: str, resource: Any, span_exporter: Any = None) -> None:
        """OTLP over gRPC, batched; or ``span_exporter`` synchronously (e.g. an in-memory one)."""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        provider = TracerProvider(resource=resource)
        if span_exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.provider = provider
        self.tracer = provider.get_tracer(INSTRUMENTATION_NAME)
        log.info("tracing %s to %s", service_name, os.environ.get(ENDPOINT_ENV) or "a custom exporter")

    def flush(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()

    def reset(self) -> None:
        self.provider = None
        self.tracer = trace.NoOpTracer()
        self.model = ""


STATE = TracingState()


def set_model(name: str) -> None:
    """Name the model this process serves: its server spans and metrics carry it from now on."""
    STATE.model = name


def served_model() -> str:
    return STATE.model


def tracing_enabled() -> bool:
    return STATE.provider is not None


def tracer() -> trace.Tracer:
    return STATE.tracer


def inject(carrier: MutableMapping[str, str], context: otel_context.Context | None = None) -> None:
    """Write the W3C ``traceparent`` of ``context`` (default: the current one) into ``carrier``."""
    _PROPAGATOR.inject(carrier, context=context)


def extract(carrier: Mapping[str, str]) -> otel_context.Context:
    """The context a W3C ``traceparent`` in ``carrier`` names (empty context when absent)."""
    return _PROPAGATOR.extract(carrier)
