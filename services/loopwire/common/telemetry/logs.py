"""Log lines that name their work: ids bound per task (contextvars) and a one-JSON-object-per-line formatter."""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

LOG_FORMATS = ("text", "json")
TEXT_LOG_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"

# Fixed at import; the values live in each task's context, so this holds no process-wide state.
_LOG_IDS: dict[str, contextvars.ContextVar[str]] = {
    name: contextvars.ContextVar(f"loopwire_{name}", default="") for name in ("request_id", "session_id", "response_id")
}


def bind_log_ids(*, request_id: str | None = None, session_id: str | None = None,
                 response_id: str | None = None) -> None:
    """Name what the current task works on; its JSON log lines (and those of tasks it starts) carry the ids.

    Context variables are per task, so call it at the top of the task doing the work.
    """
    for name, value in (("request_id", request_id), ("session_id", session_id), ("response_id", response_id)):
        if value is not None:
            _LOG_IDS[name].set(value)


def log_ids() -> dict[str, str]:
    """The ids bound in this context (only those that are set)."""
    return {name: value for name, var in _LOG_IDS.items() if (value := var.get())}


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: timestamp (UTC, ISO 8601), level, logger, message, the bound ids,
    the trace and span ids when a span is current, and the exception text if any."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **log_ids(),
        }
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            line["trace_id"] = format(span.trace_id, "032x")
            line["span_id"] = format(span.span_id, "016x")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def configure_logging(log_format: str) -> None:
    """Give every handler of the root logger the text or the JSON formatter (one handler if none yet)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: choose one of {', '.join(LOG_FORMATS)}")
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler())
    formatter = JsonLogFormatter() if log_format == "json" else logging.Formatter(TEXT_LOG_FORMAT, "%H:%M:%S")
    for handler in root.handlers:
        handler.setFormatter(formatter)
