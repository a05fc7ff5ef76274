"""Per-process setup and shutdown: the one place that turns tracing, metrics and log formats on or off."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from . import meters, tracing
from .logs import LOG_FORMATS, configure_logging


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` (serve Prometheus metrics there; 0 = any free port; unset = off) and ``--log-format``."""
    env = os.environ.get("LOOPWIRE_METRICS_PORT", "")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(env) if env else None,
        help="serve Prometheus metrics on this port (0 = any free port; default: off; env LOOPWIRE_METRICS_PORT)",
    )
    log_format = os.environ.get("LOOPWIRE_LOG_FORMAT", "text")
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=log_format if log_format in LOG_FORMATS else "text",
        help="text lines, or one JSON object per line with timestamp, level, logger, message and the "
             f"request/session/response ids when known (default: {log_format}; env LOOPWIRE_LOG_FORMAT)",
    )


@dataclass(frozen=True)
class Telemetry:
    """What ``setup`` turned on."""

    service_name: str
    tracing: bool
    # The port Prometheus scrapes, or None when metrics are off.
    metrics_port: int | None


def setup(
    service_name: str,
    *,
    metrics_port: int | None = None,
    metrics_host: str = "0.0.0.0",
    span_exporter: Any = None,
    log_format: str | None = None,
) -> Telemetry:
    """Configure tracing and metrics for this process; calling it again replaces the previous setup.

    Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (OTLP over gRPC, batched) or when a
    ``span_exporter`` is given (exported synchronously, e.g. an in-memory one). ``log_format``
    ("text" or "json") sets the formatter of the root logger's handlers; None leaves them alone.
    """
    shutdown()
    if log_format is not None:
        configure_logging(log_format)
    enabled = bool(os.environ.get(tracing.ENDPOINT_ENV)) or span_exporter is not None
    resource: Any = None
    if enabled or metrics_port is not None:
        from opentelemetry.sdk.resources import Resource

        resource = Resource.create({"service.name": service_name})
    if enabled:
        tracing.STATE.start(service_name, resource, span_exporter)
    port = meters.STATE.start(service_name, resource, metrics_port, metrics_host)
    return Telemetry(service_name=service_name, tracing=enabled, metrics_port=port)


def shutdown() -> None:
    """Flush pending spans and stop the metrics endpoint (also called by the next ``setup``)."""
    tracing.STATE.flush()
    meters.STATE.flush()
    tracing.STATE.reset()
    meters.STATE.reset()
