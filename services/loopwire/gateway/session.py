"""One Converse stream: its requests read, run in order, their events written back.

Requests of one stream run in order (a delta names the response before it, and so does a
HoldKv); a CancelResponse acts at once on the response in flight. A request's failure is an
in-stream event; the stream keeps serving. Each response runs inside a GenAI span.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

from loopwire.common import telemetry
from loopwire.common.auth import Tenant
from loopwire.common.errors import RequestError, invalid
from loopwire.common.response_ids import new_response_id
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.events import CANCEL, EventOutbox, failed
from loopwire.gateway.generate_link import GenerateLink
from loopwire.gateway.kv_hold import hold_kv
from loopwire.gateway.metrics import Stopwatch
from loopwire.gateway.ports import Caller, ResponsePorts
from loopwire.gateway.prepare import prepare
from loopwire.gateway.rate_limit import TenantLimiter
from loopwire.gateway.relay import ResponseRun
from loopwire.v1 import common_pb2, gateway_pb2

if TYPE_CHECKING:
    from loopwire.gateway.parts import Gateway

log = logging.getLogger("loopwire.gateway")

Code = common_pb2.ErrorCode


class ConverseSession:
    """The state of one Converse stream: its conversation, its replica link."""

    def __init__(self, gateway: Gateway, ports: ResponsePorts, tenant: Tenant, limiter: TenantLimiter) -> None:
        """``ports``: what a response on this stream may ask of the gateway (built once per gateway)."""
        self.gw = gateway  # handed on as this stream's view (parts.Stream) to prepare and kv_hold
        self.ports = ports
        self.tenant = tenant
        self.limiter = limiter
        self.stream_id = "conv_" + secrets.token_hex(8)
        self.caller = Caller(tenant, self.stream_id, limiter.tokens.charge)
        # Only this object changes these two: a response's run hands back the conversation it kept
        # and the replica link it ended on, which the stream adopts (``_respond``).
        self.conversation: Conversation | None = None
        self.link: GenerateLink | None = None
        self._in_flight: tuple[str, asyncio.Queue[object]] | None = None

    async def run(
        self, requests: AsyncIterator[gateway_pb2.ConverseRequest]
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        # Creates and holds run in order: a hold names a response an earlier create made.
        creates: asyncio.Queue[gateway_pb2.CreateResponse | gateway_pb2.HoldKv | None] = asyncio.Queue()
        out = EventOutbox()  # deltas merge while the writer is busy

        async def read() -> None:
            try:
                async for request in requests:
                    kind = request.WhichOneof("request")
                    if kind == "create_response":
                        creates.put_nowait(request.create_response)
                    elif kind == "cancel_response":
                        self._cancel(request.cancel_response.response_id, out)
                    elif kind == "hold_kv":
                        creates.put_nowait(request.hold_kv)
                    else:
                        out.put(failed("", invalid("request", "request is empty")))
            finally:
                creates.put_nowait(None)

        async def work() -> None:
            try:
                while (create := await creates.get()) is not None:
                    try:
                        if isinstance(create, gateway_pb2.HoldKv):
                            out.put(await hold_kv(self, create))
                            continue
                        async for event in self.respond(create, out.put):
                            out.put(event)
                    except Exception as e:  # a bug fails one response, never the session's stream
                        log.exception("response failed")
                        out.put(failed("", RequestError(Code.ERROR_CODE_INTERNAL, f"internal error: {e}",
                                                               retryable=True)))
            finally:
                out.put(None)

        reader = asyncio.create_task(read())
        worker = asyncio.create_task(work())
        try:
            while (event := await out.take()) is not None:
                yield event
            await worker
        finally:
            for task in (reader, worker):
                task.cancel()
            for task in (reader, worker):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.ports.forget_stream(self.stream_id)

    def _cancel(self, response_id: str, out: EventOutbox) -> None:
        if self._in_flight and self._in_flight[0] == response_id:
            self._in_flight[1].put_nowait(CANCEL)
        else:
            out.put(failed(response_id, invalid("cancel_response.response_id", "no response in flight with this id")))

    async def close(self) -> None:
        if self.link is not None:
            await self.link.close()
            self.link = None

    # -- one response -----------------------------------------------------------------

    async def respond(
        self, create: gateway_pb2.CreateResponse, sink: Callable[[gateway_pb2.ConverseResponse], None] | None = None
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        """One response's events, inside a GenAI span; its timings feed the metrics. ``sink``: where the
        output events parsed as the replica's batches are read go, instead of being yielded here (the
        stream's outbox, which the yielded events join in order)."""
        response_id = new_response_id(self.ports.settings.gateway_id)
        model = self.ports.model.name  # metrics are labelled with the model served (as inference labels them)
        with telemetry.response_span(create.model or model, response_id, conversation_id=self.stream_id,
                                     trace_context=create.trace_context) as span:
            emit = None if sink is None else functools.partial(_emit_output, span, sink)
            async for event in self._respond(create, response_id, model, emit):
                kind = event.WhichOneof("event")
                if kind in _FIRST_CHUNK_KINDS:
                    span.first_chunk()
                elif kind == "completed":
                    span.set_usage(event.completed.usage)
                    span.finish(event.completed.finish_reason)
                    telemetry.metrics().record_response(event.completed.timings, model)
                elif kind == "failed":
                    span.span.set_attribute("error.type", common_pb2.ErrorCode.Name(event.failed.error.code))
                yield event

    async def _respond(
        self, create: gateway_pb2.CreateResponse, response_id: str, model: str,
        emit: Callable[[gateway_pb2.ConverseResponse], None] | None,
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        started = time.perf_counter()
        watch = Stopwatch()
        metrics = self.ports.counters
        try:
            with watch:
                prepared = await prepare(self, create, model)
        except RequestError as e:
            if e.code == Code.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND:
                metrics.add("previous_response_not_found", model)
            metrics.add("failed_responses", model)
            yield failed(response_id, e)
            return
        if prepared.difference is not None:
            metrics.add("cache_breaks", model)
            yield gateway_pb2.ConverseResponse(
                response_id=response_id,
                cache_break=gateway_pb2.CacheBreak(
                    first_differing_item=prepared.difference.first_differing_item,
                    reason=prepared.difference.reason,
                    reused_tokens=prepared.reused_tokens,
                ),
            )
        run = ResponseRun(self.ports, self.caller, self.link, create, response_id, prepared, watch, started, emit)
        self._in_flight = (response_id, run.inbox.queue)
        try:
            async for event in run.events():
                yield event
        finally:
            self._in_flight = None
            run.stop_safety()
            self.link = run.link
            if run.kept is not None:
                self.conversation = run.kept


# The events whose first one times the response's first chunk (yielded or emitted as parsed).
_FIRST_CHUNK_KINDS = ("text_delta", "tool_call_started")


def _emit_output(span: telemetry.GenAISpan, sink: Callable[[gateway_pb2.ConverseResponse], None],
                 event: gateway_pb2.ConverseResponse) -> None:
    """An output event parsed as its tokens were read: to the stream's outbox, its first chunk timed."""
    if event.WhichOneof("event") in _FIRST_CHUNK_KINDS:
        span.first_chunk()
    sink(event)
