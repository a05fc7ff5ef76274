"""OpenTelemetry for every service (DESIGN §7): traces over OTLP, metrics for Prometheus, JSON logs.

A package of one module per concern; this file re-exports the public names so callers keep
writing ``telemetry.<name>``. Cheap when off: without ``OTEL_EXPORTER_OTLP_ENDPOINT`` no tracer
provider is built, the interceptor lists are empty and spans are non-recording; without a metrics
port the instruments are the API's no-ops. Call ``setup()`` once per process before building
servers and channels. Not traced: health checks, reflection and the routers' polls.
"""

from .genai import GenAISpan, generation_span, response_span, tool_span, turn_span
from .interceptors import (
    INFERENCE_SERVICE,
    UNTRACED_METHODS,
    UNTRACED_PREFIXES,
    TracingServerInterceptor,
    client_interceptors,
    is_traced,
    iterate_in_span,
    server_interceptors,
)
from .lifecycle import Telemetry, add_arguments, setup, shutdown
from .logs import LOG_FORMATS, TEXT_LOG_FORMAT, JsonLogFormatter, bind_log_ids, configure_logging, log_ids
from .meters import (
    ACCEPTANCE_BUCKETS,
    BYTE_BUCKETS,
    HISTOGRAM_BUCKETS,
    LONG_BUCKETS_S,
    RATIO_BUCKETS,
    SPEED_BUCKETS,
    TOKEN_BUCKETS,
    TTFT_BUCKETS_S,
    Metrics,
    histogram_views,
    meter,
    metrics,
)
from .tracing import (
    ENDPOINT_ENV,
    INSTRUMENTATION_NAME,
    MODEL_ATTRIBUTE,
    extract,
    inject,
    served_model,
    set_model,
    tracer,
    tracing_enabled,
)

__all__ = [
    "ACCEPTANCE_BUCKETS", "BYTE_BUCKETS", "ENDPOINT_ENV", "HISTOGRAM_BUCKETS", "INFERENCE_SERVICE",
    "INSTRUMENTATION_NAME", "LOG_FORMATS", "LONG_BUCKETS_S", "MODEL_ATTRIBUTE", "RATIO_BUCKETS",
    "SPEED_BUCKETS", "TEXT_LOG_FORMAT", "TOKEN_BUCKETS", "TTFT_BUCKETS_S", "UNTRACED_METHODS",
    "UNTRACED_PREFIXES", "GenAISpan", "JsonLogFormatter", "Metrics", "Telemetry", "TracingServerInterceptor",
    "add_arguments", "bind_log_ids", "client_interceptors", "configure_logging", "extract", "generation_span",
    "histogram_views", "inject", "is_traced", "iterate_in_span", "log_ids", "meter", "metrics",
    "response_span", "served_model", "server_interceptors", "set_model", "setup", "shutdown", "tool_span",
    "tracer", "tracing_enabled", "turn_span",
]
