"""OpenTelemetry for every service (DESIGN §7): traces over OTLP, metrics for Prometheus.

Why our own small interceptors instead of opentelemetry-instrumentation-grpc: its aio server
side is known to break on streaming handlers that use ``context.write`` (DESIGN §7), and we need
exactly one behaviour: the server span wraps the handler's async generator, so it lives as long
as the stream and every task the handler starts inherits it as parent. grpc.aio files a client
interceptor under one call kind only, hence one client interceptor per kind.

Cheap when off: without ``OTEL_EXPORTER_OTLP_ENDPOINT`` no tracer provider is built,
``server_interceptors()`` / ``client_interceptors()`` return nothing and the span helpers hand
out non-recording spans; without a metrics port the instruments are the API's no-ops.

Call ``setup()`` once per process before building servers and channels.

Not traced: health checks, reflection and the routers' polls (``GetStatus``, ``GetModelInfo``), which
would otherwise be most of the traces. Logs: ``--log-format json`` writes one JSON object per line
with the request, session and response ids bound by ``bind_log_ids`` (contextvars, so per task).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import inspect
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from loopwire.v1 import common_pb2, inference_pb2

log = logging.getLogger("loopwire.telemetry")

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
INSTRUMENTATION_NAME = "loopwire"
# Services whose calls are plumbing, not agent work: never traced.
UNTRACED_PREFIXES = ("/grpc.health.", "/grpc.reflection.")
_INFERENCE = inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name
# The routers' periodic polls of every replica: traced, they were most of the gateway's traces.
UNTRACED_METHODS = frozenset(f"/{_INFERENCE}/{m}" for m in ("GetStatus", "GetModelInfo"))
MODEL_ATTRIBUTE = "gen_ai.request.model"


def is_traced(method: str) -> bool:
    """Whether calls of this gRPC method (``/package.Service/Method``) get spans."""
    return not method.startswith(UNTRACED_PREFIXES) and method not in UNTRACED_METHODS

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_KEYS = frozenset(_PROPAGATOR.fields)


@dataclass
class _State:
    tracer: trace.Tracer = field(default_factory=lambda: trace.NoOpTracer())
    tracer_provider: Any = None
    meter_provider: Any = None
    metrics_server: Any = None
    metrics: Metrics | None = None
    meter: otel_metrics.Meter | None = None
    # The model this process serves, when it serves one (inference): on its spans and metrics.
    model: str = ""


_state = _State()


# --------------------------------------------------------------------------- setup


LOG_FORMATS = ("text", "json")


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
    tracing = bool(os.environ.get(ENDPOINT_ENV)) or span_exporter is not None
    if tracing or metrics_port is not None:
        from opentelemetry.sdk.resources import Resource

        resource = Resource.create({"service.name": service_name})
    if tracing:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        provider = TracerProvider(resource=resource)
        if span_exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        _state.tracer_provider = provider
        _state.tracer = provider.get_tracer(INSTRUMENTATION_NAME)
        log.info("tracing %s to %s", service_name, os.environ.get(ENDPOINT_ENV) or "a custom exporter")

    port: int | None = None
    meter: otel_metrics.Meter = otel_metrics.NoOpMeter(INSTRUMENTATION_NAME)
    if metrics_port is not None:
        import prometheus_client
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider

        registry = prometheus_client.CollectorRegistry()
        reader = PrometheusMetricReader(registry=registry)
        _state.meter_provider = MeterProvider(resource=resource, metric_readers=[reader], views=histogram_views())
        server, _thread = prometheus_client.start_http_server(
            metrics_port, addr=metrics_host, registry=registry
        )
        _state.metrics_server = server
        port = int(server.server_port)
        meter = _state.meter_provider.get_meter(INSTRUMENTATION_NAME)
        log.info("Prometheus metrics of %s on port %d", service_name, port)
    _state.meter = meter
    _state.metrics = Metrics(meter)
    return Telemetry(service_name=service_name, tracing=tracing, metrics_port=port)


def shutdown() -> None:
    """Flush pending spans and stop the metrics endpoint (also called by the next ``setup``)."""
    if _state.tracer_provider is not None:
        _state.tracer_provider.shutdown()
    if _state.meter_provider is not None:
        _state.meter_provider.shutdown()
    if _state.metrics_server is not None:
        _state.metrics_server.shutdown()
        _state.metrics_server.server_close()
    _state.tracer_provider = _state.meter_provider = _state.metrics_server = None
    _state.tracer = trace.NoOpTracer()
    _state.metrics = None
    _state.meter = None
    _state.model = ""


def set_model(name: str) -> None:
    """Name the model this process serves: its server spans and metrics carry it from now on."""
    _state.model = name


def served_model() -> str:
    return _state.model


def tracing_enabled() -> bool:
    return _state.tracer_provider is not None


def tracer() -> trace.Tracer:
    return _state.tracer


# --------------------------------------------------------------------------- propagation


def inject(carrier: MutableMapping[str, str], context: otel_context.Context | None = None) -> None:
    """Write the W3C ``traceparent`` of ``context`` (default: the current one) into ``carrier``."""
    _PROPAGATOR.inject(carrier, context=context)


def extract(carrier: Mapping[str, str]) -> otel_context.Context:
    """The context a W3C ``traceparent`` in ``carrier`` names (empty context when absent)."""
    return _PROPAGATOR.extract(carrier)


def _metadata_carrier(metadata: Any) -> dict[str, str]:
    carrier: dict[str, str] = {}
    for key, value in metadata or ():
        if isinstance(value, str):
            carrier[key.lower()] = value
    return carrier


# --------------------------------------------------------------------------- server side


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """Pass to ``grpc.aio.server(interceptors=...)``; empty when tracing is off."""
    return [TracingServerInterceptor()] if tracing_enabled() else []


def _rpc_attributes(method: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {"rpc.system": "grpc", "rpc.method": method}
    if _state.model:
        attributes[MODEL_ATTRIBUTE] = _state.model
    return attributes


class _InContext:
    """Awaits ``awaitable`` with each of its steps run inside ``ctx`` (one Context object for
    the stream's whole life, whichever task drives a step)."""

    __slots__ = ("_ctx", "_awaitable")

    def __init__(self, ctx: contextvars.Context, awaitable: Any) -> None:
        self._ctx, self._awaitable = ctx, awaitable

    def __await__(self) -> Any:
        it = self._awaitable.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = self._ctx.run(it.throw, error) if error is not None else self._ctx.run(it.send, value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = yield yielded
            except GeneratorExit:
                self._ctx.run(it.close)
                raise
            except BaseException as e:  # noqa: BLE001 - cancellation and the rest go to the awaited step
                error = e


async def iterate_in_span(span: trace.Span, stream: AsyncIterator[Any],
                          parent: otel_context.Context | None = None) -> AsyncIterator[Any]:
    """Yield ``stream``'s items, ``stream`` running in a Context of its own where ``span`` is current; end it after.

    Why not ``with start_as_current_span(): ... yield``: that attaches a context token in the task
    that iterates, and when gRPC drops a stream between two items (writing a response when the
    client goes away) the generator is closed later by the event loop's finalizer in another task,
    where the token cannot be detached ("Failed to detach context"). Here the stream, and every
    span it holds across its own yields, lives in one Context object whichever task closes it.
    """
    ctx = contextvars.copy_context()
    ctx.run(otel_context.attach, trace.set_span_in_context(span, parent))  # never detached: ctx dies with the stream
    try:
        while True:
            try:
                item = await _InContext(ctx, anext(stream))
            except StopAsyncIteration:
                return
            yield item
    except (GeneratorExit, asyncio.CancelledError):
        raise
    except Exception as e:
        span.record_exception(e)
        span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(e).__name__}: {e}"))
        raise
    finally:
        aclose = getattr(stream, "aclose", None)
        try:
            if aclose is not None:  # the stream's own cleanup runs now, in its Context
                await _InContext(ctx, aclose())
        finally:
            span.end()


def _wrap_behavior(method: str, behavior: Callable[..., Any], metadata: Any) -> Callable[..., Any]:
    """Run ``behavior`` inside a SERVER span whose parent is the caller's ``traceparent``."""

    if inspect.isasyncgenfunction(behavior):

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            parent = extract(_metadata_carrier(metadata))
            span = _state.tracer.start_span(method.lstrip("/"), context=parent, kind=trace.SpanKind.SERVER,
                                            attributes=_rpc_attributes(method))
            async for response in iterate_in_span(span, behavior(request, context), parent):
                yield response

        return streaming

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with _state.tracer.start_as_current_span(method.lstrip("/"), context=extract(_metadata_carrier(metadata)),
                                                 kind=trace.SpanKind.SERVER, attributes=_rpc_attributes(method)):
            return await behavior(request, context)

    return unary


class TracingServerInterceptor(grpc.aio.ServerInterceptor):
    """Opens a SERVER span per RPC (the whole stream for streaming RPCs)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not is_traced(method):
            return handler
        metadata = handler_call_details.invocation_metadata
        serializers = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_behavior(method, handler.unary_unary, metadata), **serializers
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_behavior(method, handler.unary_stream, metadata), **serializers
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                _wrap_behavior(method, handler.stream_unary, metadata), **serializers
            )
        return grpc.stream_stream_rpc_method_handler(
            _wrap_behavior(method, handler.stream_stream, metadata), **serializers
        )


# --------------------------------------------------------------------------- client side


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """Pass to ``grpc.aio.insecure_channel(interceptors=...)``; empty when tracing is off."""
    if not tracing_enabled():
        return []
    return [
        _UnaryUnaryTracing(),
        _UnaryStreamTracing(),
        _StreamUnaryTracing(),
        _StreamStreamTracing(),
    ]


async def _traced_call(continuation: Callable[..., Any], details: Any, request: Any) -> Any:
    """Open a CLIENT span (ended when the call ends) and send its ``traceparent``."""
    method = details.method.decode() if isinstance(details.method, bytes) else details.method
    if not is_traced(method):
        return await continuation(details, request)
    span = _state.tracer.start_span(
        method.lstrip("/"),
        kind=trace.SpanKind.CLIENT,
        attributes=_rpc_attributes(method),
    )
    carrier: dict[str, str] = {}
    inject(carrier, trace.set_span_in_context(span))
    # Our span's context replaces any the caller put in the metadata itself.
    metadata = grpc.aio.Metadata(*((k, v) for k, v in (details.metadata or ()) if k not in _TRACE_KEYS))
    for key, value in carrier.items():
        metadata.add(key, value)
    traced = grpc.aio.ClientCallDetails(
        method=details.method,
        timeout=details.timeout,
        metadata=metadata,
        credentials=details.credentials,
        wait_for_ready=details.wait_for_ready,
    )
    try:
        call = await continuation(traced, request)
    except BaseException:
        span.end()
        raise
    call.add_done_callback(lambda _call: span.end())
    return call


class _UnaryUnaryTracing(grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await _traced_call(continuation, client_call_details, request)


class _UnaryStreamTracing(grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await _traced_call(continuation, client_call_details, request)


class _StreamUnaryTracing(grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await _traced_call(continuation, client_call_details, request_iterator)


class _StreamStreamTracing(grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        return await _traced_call(continuation, client_call_details, request_iterator)


# --------------------------------------------------------------------------- GenAI spans


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
    with _state.tracer.start_as_current_span(
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


# --------------------------------------------------------------------------- metrics


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
        attrs = {MODEL_ATTRIBUTE: model or _state.model}
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
        attrs = {MODEL_ATTRIBUTE: model or _state.model}
        self.tokens_tokenized.record(timings.tokens_tokenized, attrs)
        self.bytes_per_turn.record(timings.bytes_received, attrs)

    def set_queue_depth(self, waiting: int, replica_id: str = "") -> None:
        self.queue_depth.set(waiting, {"loopwire.replica_id": replica_id, MODEL_ATTRIBUTE: _state.model})


def metrics() -> Metrics:
    """The instruments of this process (no-ops until ``setup`` is given a metrics port)."""
    if _state.metrics is None:
        _state.metrics = Metrics(otel_metrics.NoOpMeter(INSTRUMENTATION_NAME))
    return _state.metrics


def meter() -> otel_metrics.Meter:
    """The meter of this process's setup, for a service's own instruments (a no-op one when metrics are off).

    A new ``setup`` makes a new meter: keep instruments per meter (see ``loopwire.harness.metrics``).
    """
    if _state.meter is None:
        _state.meter = otel_metrics.NoOpMeter(INSTRUMENTATION_NAME)
    return _state.meter


# --------------------------------------------------------------------------- logs


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


TEXT_LOG_FORMAT = "%(asctime)s %(levelname).1s %(name)s: %(message)s"


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
