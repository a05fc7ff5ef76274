"""Spans of agent work with GenAI semantic-convention attributes: turns, tools, responses, generations.

One helper per layer so the span names and attributes each layer emits live in one place.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from loopwire.v1 import common_pb2

from .tracing import STATE, extract


class GenAISpan:
    """A span of agent work carrying GenAI semantic-convention attributes."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self._started = time.perf_counter()
        self._first_chunk_seen = False

    def first_chunk(self) -> None:
        """Mark the first streamed chunk (only the first call counts)."""
        if not self._first_chunk_seen:
            self._first_chunk_seen = True
            self.span.set_attribute(
                "gen_ai.response.time_to_first_chunk", time.perf_counter() - self._started
            )

    def set_usage(self, usage: common_pb2.Usage) -> None:
        self.span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        self.span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        self.span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_input_tokens)

    def finish(self, reason: common_pb2.FinishReason.ValueType) -> None:
        name = common_pb2.FinishReason.Name(reason).removeprefix("FINISH_REASON_").lower()
        self.span.set_attribute("gen_ai.response.finish_reasons", [name])

    def set_attribute(self, key: str, value: Any) -> None:
        self.span.set_attribute(key, value)


@contextmanager
def _genai_span(
    name: str,
    kind: trace.SpanKind,
    attributes: dict[str, Any],
    parent: otel_context.Context | None = None,
    links: list[trace.Link] | None = None,
) -> Iterator[GenAISpan]:
    with STATE.tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=attributes, links=links
    ) as span:
        yield GenAISpan(span)


def turn_span(session_id: str, turn: int, model: str) -> Any:
    """Harness: one agent turn (model call + its tools), the root of its own trace.

    The session's stream outlives every turn, so each turn starts a fresh trace (linked to
    the session's span) and carries it down in ``trace_context`` fields.
    """
    session = trace.get_current_span().get_span_context()
    return _genai_span(
        f"invoke_agent {model}".strip(),
        trace.SpanKind.INTERNAL,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.request.model": model,
            "gen_ai.conversation.id": session_id,
            "loopwire.turn": turn,
        },
        parent=otel_context.Context(),
        links=[trace.Link(session)] if session.is_valid else None,
    )


def tool_span(name: str, call_id: str) -> Any:
    """Harness: one tool call."""
    return _genai_span(
        f"execute_tool {name}",
        trace.SpanKind.INTERNAL,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id},
    )


def response_span(
    model: str, response_id: str, *, conversation_id: str = "", trace_context: Mapping[str, str] | None = None
) -> Any:
    """Gateway: one CreateResponse, in the trace of the turn that asked for it."""
    return _genai_span(
        f"chat {model}".strip(),
        trace.SpanKind.SERVER,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.response.id": response_id,
            "gen_ai.conversation.id": conversation_id,
        },
        parent=extract(trace_context) if trace_context else None,
    )


def generation_span(
    model: str, request_id: str, *, session_id: str = "", trace_context: Mapping[str, str] | None = None
) -> Any:
    """Inference: one generation, in the trace of the response it serves."""
    return _genai_span(
        f"text_completion {model}".strip(),
        trace.SpanKind.SERVER,
        {
            "gen_ai.operation.name": "text_completion",
            "gen_ai.request.model": model,
            "gen_ai.response.id": request_id,
            "gen_ai.conversation.id": session_id,
        },
        parent=extract(trace_context) if trace_context else None,
    )
