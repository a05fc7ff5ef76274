"""gRPC server and client interceptors that open one span per traced RPC and carry ``traceparent``.

Why our own instead of opentelemetry-instrumentation-grpc: its aio server side is known to break
on streaming handlers that use ``context.write`` (DESIGN §7), and we need exactly one behaviour:
the server span wraps the handler's async generator, so it lives as long as the stream and every
task the handler starts inherits it as parent. grpc.aio files a client interceptor under one call
kind only, hence one client interceptor per kind.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace

from .tracing import MODEL_ATTRIBUTE, STATE, TRACE_KEYS, extract, inject, tracing_enabled

# Services whose calls are plumbing, not agent work: never traced.
UNTRACED_PREFIXES = ("/grpc.health.", "/grpc.reflection.")
# Written out so common/ needs no service's proto; tests/unit/common/test_telemetry_buckets_logs.py
# calls these through the real InferenceService stubs and fails if the name drifts.
INFERENCE_SERVICE = "loopwire.v1.InferenceService"
# The routers' periodic polls of every replica: traced, they were most of the gateway's traces.
UNTRACED_METHODS = frozenset(f"/{INFERENCE_SERVICE}/{m}" for m in ("GetStatus", "GetModelInfo"))


def is_traced(method: str) -> bool:
    """Whether calls of this gRPC method (``/package.Service/Method``) get spans."""
    return not method.startswith(UNTRACED_PREFIXES) and method not in UNTRACED_METHODS


def _metadata_carrier(metadata: Any) -> dict[str, str]:
    carrier: dict[str, str] = {}
    for key, value in metadata or ():
        if isinstance(value, str):
            carrier[key.lower()] = value
    return carrier


def _rpc_attributes(method: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {"rpc.system": "grpc", "rpc.method": method}
    if STATE.model:
        attributes[MODEL_ATTRIBUTE] = STATE.model
    return attributes


# --------------------------------------------------------------------------- server side


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """Pass to ``grpc.aio.server(interceptors=...)``; empty when tracing is off."""
    return [TracingServerInterceptor()] if tracing_enabled() else []


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
            span = STATE.tracer.start_span(method.lstrip("/"), context=parent, kind=trace.SpanKind.SERVER,
                                           attributes=_rpc_attributes(method))
            async for response in iterate_in_span(span, behavior(request, context), parent):
                yield response

        return streaming

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with STATE.tracer.start_as_current_span(method.lstrip("/"), context=extract(_metadata_carrier(metadata)),
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
    span = STATE.tracer.start_span(
        method.lstrip("/"),
        kind=trace.SpanKind.CLIENT,
        attributes=_rpc_attributes(method),
    )
    carrier: dict[str, str] = {}
    inject(carrier, trace.set_span_in_context(span))
    # Our span's context replaces any the caller put in the metadata itself.
    metadata = grpc.aio.Metadata(*((k, v) for k, v in (details.metadata or ()) if k not in TRACE_KEYS))
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
