"""GatewayService: one Converse stream per agent session (DESIGN §2, §5).

Per request the gateway validates, tokenizes only what is new, forwards only new token
ids to the session's replica, detokenizes the answer into text and tool-call events,
and runs safety checks beside inference. A request's failure is an in-stream event;
the stream keeps serving. Requests of one stream run in order (a delta names the
response before it); a CancelResponse acts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import grpc

from loopwire.common import grpc_server, telemetry
from loopwire.common.auth import Authenticator, AuthError, Tenant
from loopwire.common.chat_template import ChatTemplateError
from loopwire.common.errors import RequestError, invalid
from loopwire.common.model_def import ModelDefinition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway import validation
from loopwire.gateway.conversation import Conversation, Difference
from loopwire.gateway.generate_link import GenerateLink, LinkDown
from loopwire.gateway.metrics import GatewayMetrics, Stopwatch
from loopwire.gateway.output_parser import (
    CallArgumentsOut,
    CallDoneOut,
    CallStartedOut,
    OutputEvent,
    OutputParser,
    TextOut,
)
from loopwire.gateway.rate_limit import TenantLimiter
from loopwire.gateway.response_store import ResponseStore
from loopwire.gateway.router import Replica, Router
from loopwire.gateway.safety import INPUT, OUTPUT, OutputChecker, SafetyClassifier, Verdict, input_text
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, inference_pb2

log = logging.getLogger("loopwire.gateway")

Code = common_pb2.ErrorCode


# Requests larger than this are tokenized off the event loop.
OFFLOAD_TOKENIZE_BYTES = 64 * 1024


@dataclass
class GatewayConfig:
    max_request_bytes: int = 16 * 1024 * 1024
    max_sessions: int = 10_000
    max_session_tokens: int = 1_000_000
    max_total_tokens: int = 200_000_000
    safety_mode: int = gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT
    # The naive way, for benchmarks: finish the input check before inference starts.
    safety_serial: bool = False
    safety_chunk_chars: int = 256
    safety_overlap_chars: int = 64
    # The naive way, for benchmarks: every request re-tokenized and forwarded in full.
    stateless: bool = False
    default_max_output_tokens: int = 1024
    max_failovers: int = 2


@dataclass
class _InputVerdict:
    verdict: Verdict
    us: int


class _SafetyProgress:
    """The output checker advanced or found a violation."""


class _Cancel:
    """The client cancelled the response."""


_PROGRESS = _SafetyProgress()
_CANCEL = _Cancel()


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(
        self,
        model: ModelDefinition,
        router: Router,
        authenticator: Authenticator,
        classifier: SafetyClassifier,
        config: GatewayConfig | None = None,
    ) -> None:
        self.model = model
        self.prompt = ChatPrompt(model)
        self.router = router
        router.model_digest = model.digest
        self.auth = authenticator
        self.classifier = classifier
        self.config = config or GatewayConfig()
        self.store = ResponseStore(self.config.max_sessions, self.config.max_total_tokens)
        self.metrics = GatewayMetrics()
        self._limiters: dict[str, TenantLimiter] = {}
        self.sessions: dict[str, ConverseSession] = {}  # open Converse streams, by stream id

    def limiter(self, tenant: Tenant) -> TenantLimiter:
        limiter = self._limiters.get(tenant.name)
        if limiter is None:
            limiter = self._limiters[tenant.name] = TenantLimiter(tenant.limits)
        return limiter

    async def Converse(
        self, request_iterator: AsyncIterator[gateway_pb2.ConverseRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        try:
            tenant = self.auth.authenticate(context.invocation_metadata())
        except AuthError as e:
            await grpc_server.refuse_stream(context, request_iterator, e.status_code, f"authorization: {e}")
            return
        limiter = self.limiter(tenant)
        wait_ms = limiter.open_stream()
        if wait_ms:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"tenant {tenant.name!r} already has {limiter.limits.concurrent_streams} open streams",
                trailing_metadata=(("retry-after-ms", str(wait_ms)),),
            )
        session = ConverseSession(self, tenant, limiter)
        self.sessions[session.stream_id] = session
        try:
            async for event in session.run(request_iterator):
                yield event
        finally:
            del self.sessions[session.stream_id]
            limiter.close_stream()
            await session.close()


class ConverseSession:
    """The state of one Converse stream: its conversation, its replica link."""

    def __init__(self, gateway: GatewayServicer, tenant: Tenant, limiter: TenantLimiter) -> None:
        self.gw = gateway
        self.tenant = tenant
        self.limiter = limiter
        self.stream_id = "conv_" + secrets.token_hex(8)
        self.conversation: Conversation | None = None
        self.link: GenerateLink | None = None
        self._in_flight: tuple[str, asyncio.Queue[object]] | None = None

    async def run(
        self, requests: AsyncIterator[gateway_pb2.ConverseRequest]
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        creates: asyncio.Queue[gateway_pb2.CreateResponse | None] = asyncio.Queue()
        out: asyncio.Queue[gateway_pb2.ConverseResponse | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for request in requests:
                    kind = request.WhichOneof("request")
                    if kind == "create_response":
                        creates.put_nowait(request.create_response)
                    elif kind == "cancel_response":
                        self._cancel(request.cancel_response.response_id, out)
                    else:
                        out.put_nowait(_failed("", invalid("request", "request is empty")))
            finally:
                creates.put_nowait(None)

        async def work() -> None:
            try:
                while (create := await creates.get()) is not None:
                    try:
                        async for event in self.respond(create):
                            out.put_nowait(event)
                    except Exception as e:  # a bug fails one response, never the session's stream
                        log.exception("response failed")
                        out.put_nowait(_failed("", RequestError(Code.ERROR_CODE_INTERNAL, f"internal error: {e}",
                                                                retryable=True)))
            finally:
                out.put_nowait(None)

        reader = asyncio.create_task(read())
        worker = asyncio.create_task(work())
        try:
            while (event := await out.get()) is not None:
                yield event
            await worker
        finally:
            for task in (reader, worker):
                task.cancel()
            for task in (reader, worker):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.gw.store.drop_stream(self.stream_id)

    def _cancel(self, response_id: str, out: asyncio.Queue[gateway_pb2.ConverseResponse | None]) -> None:
        if self._in_flight and self._in_flight[0] == response_id:
            self._in_flight[1].put_nowait(_CANCEL)
        else:
            out.put_nowait(_failed(response_id, invalid("cancel_response.response_id", "no response in flight with this id")))

    async def close(self) -> None:
        if self.link is not None:
            await self.link.close()
            self.link = None

    # -- one response -----------------------------------------------------------------

    async def respond(self, create: gateway_pb2.CreateResponse) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        """One response's events, inside a GenAI span; its timings feed the metrics."""
        response_id = "resp_" + secrets.token_hex(8)
        with telemetry.response_span(create.model, response_id, conversation_id=self.stream_id,
                                     trace_context=create.trace_context) as span:
            async for event in self._respond(create, response_id):
                kind = event.WhichOneof("event")
                if kind in ("text_delta", "tool_call_started"):
                    span.first_chunk()
                elif kind == "completed":
                    span.set_usage(event.completed.usage)
                    span.finish(event.completed.finish_reason)
                    telemetry.metrics().record_response(event.completed.timings, create.model)
                elif kind == "failed":
                    span.span.set_attribute("error.type", common_pb2.ErrorCode.Name(event.failed.error.code))
                yield event

    async def _respond(
        self, create: gateway_pb2.CreateResponse, response_id: str
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        started = time.perf_counter()
        watch = Stopwatch()
        try:
            with watch:
                prepared = await self._prepare(create)
        except RequestError as e:
            if e.code == Code.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND:
                self.gw.metrics.previous_response_not_found += 1
            self.gw.metrics.failed_responses += 1
            yield _failed(response_id, e)
            return
        if prepared.difference is not None:
            self.gw.metrics.cache_breaks += 1
            yield gateway_pb2.ConverseResponse(
                response_id=response_id,
                cache_break=gateway_pb2.CacheBreak(
                    first_differing_item=prepared.difference.first_differing_item,
                    reason=prepared.difference.reason,
                    reused_tokens=prepared.reused_tokens,
                ),
            )
        run = _ResponseRun(self, create, response_id, prepared, watch, started)
        self._in_flight = (response_id, run.queue)
        try:
            async for event in run.events():
                yield event
        finally:
            self._in_flight = None
            run.stop_safety()

    async def _prepare(self, create: gateway_pb2.CreateResponse) -> _Prepared:
        """Validate, find the conversation, tokenize what is new, admit under the rate limits."""
        try:
            return await self._prepare_checked(create)
        except ChatTemplateError as e:  # the model's own template refused this conversation
            raise RequestError(Code.ERROR_CODE_INVALID_ARGUMENT, str(e)[:500], "create_response.input") from None

    async def _prepare_checked(self, create: gateway_pb2.CreateResponse) -> _Prepared:
        gw = self.gw
        cfg = gw.config
        received = validation.check_size(create, cfg.max_request_bytes)
        validation.check_header(create)
        difference: Difference | None = None
        reused = 0
        held: Conversation | None = None
        if create.previous_response_id:
            held = gw.store.resolve(create.previous_response_id, self.tenant.name, self.stream_id)
            _check_delta_header(create, held)
            validation.check_items(create.input, held.call_ids)
        else:
            validation.check_items(create.input, ())
            previous = None if (cfg.stateless or create.no_store) else self.conversation
            if previous is not None:
                shared, difference = previous.difference(create.model, create.instructions, create.tools, create.input)
                if not (difference and difference.first_differing_item == -1):
                    held = previous.fork(shared)  # copies ids, re-tokenizes nothing
                    reused = len(held.ids)

        def tokenize() -> tuple[Conversation, list[common_pb2.Item], int, bool, int]:
            t0 = time.thread_time_ns()
            conversation, tokenized = held, 0
            if conversation is None:
                conversation = Conversation(gw.prompt, create.model, create.instructions, create.tools,
                                            cache_salt=self.tenant.name)
                tokenized = conversation.initial_tokens
            new = list(create.input) if create.previous_response_id else list(create.input[conversation.item_count :])
            breaks_before = conversation.template_breaks
            tokenized += conversation.append(new)
            return (conversation, new, tokenized, conversation.template_breaks != breaks_before,
                    time.thread_time_ns() - t0)

        # A large request is tokenized in a worker thread (the tokenizers release the GIL), so one
        # huge prompt never stalls the other streams on this event loop.
        work = await asyncio.to_thread(tokenize) if received > OFFLOAD_TOKENIZE_BYTES else tokenize()
        conversation, new_items, tokenized, broke, tokenize_ns = work
        if broke and difference is None:
            difference = Difference(-1, "the chat template's rendering does not extend the previous prompt")
        if len(conversation) > cfg.max_session_tokens:
            raise RequestError(
                Code.ERROR_CODE_RESOURCE_EXHAUSTED,
                f"conversation is {len(conversation)} tokens, over the gateway's {cfg.max_session_tokens}-token "
                "limit per session: compact it",
                "create_response.input",
            )
        wait_ms = self.limiter.admit(tokenized)
        if wait_ms:
            raise RequestError(
                Code.ERROR_CODE_RESOURCE_EXHAUSTED,
                f"tenant {self.tenant.name!r} is over its rate limit",
                "create_response",
                retryable=True,
                retry_after_ms=wait_ms,
            )
        gw.metrics.tokens_tokenized += tokenized
        naive = cfg.stateless or (create.no_store and not create.previous_response_id)
        return _Prepared(conversation, new_items, received, tokenized, tokenize_ns // 1000, difference, reused, naive)


@dataclass
class _Prepared:
    conversation: Conversation
    new_items: list[common_pb2.Item]
    bytes_received: int
    tokens_tokenized: int
    tokenize_us: int
    difference: Difference | None
    reused_tokens: int
    # The naive way for this request: forward the full prompt (stateless gateway or client).
    naive: bool


class _ResponseRun:
    """Drives one response: generation, failover, safety, release of events."""

    def __init__(
        self,
        session: ConverseSession,
        create: gateway_pb2.CreateResponse,
        response_id: str,
        prepared: _Prepared,
        watch: Stopwatch,
        started: float,
    ) -> None:
        self.s = session
        self.gw = session.gw
        self.create = create
        self.id = response_id
        self.p = prepared
        self.watch = watch
        self.started = started
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        replay_ids = [c.call_id for c in create.replay.function_calls] if create.HasField("replay") else []
        self.parser = OutputParser(
            self.gw.model,
            stops=list(create.sampling.stop),
            call_id_for=lambda n: replay_ids[n] if n < len(replay_ids) and replay_ids[n] else f"call_{response_id}_{n}",
        )
        self.oracle = (
            self.gw.prompt.output_ids(create.replay.text, create.replay.function_calls)
            if create.HasField("replay")
            else []
        )
        mode = create.safety_mode or self.gw.config.safety_mode
        self.safety_on = mode != gateway_pb2.SAFETY_MODE_OFF
        self.buffered = mode == gateway_pb2.SAFETY_MODE_BUFFER_UNTIL_PASS
        self.input_verdict: _InputVerdict | None = None
        self.input_task: asyncio.Task[None] | None = None
        self.checker: OutputChecker | None = None
        self.pending: deque[tuple[int, gateway_pb2.ConverseResponse]] = deque()
        self.generated: list[int] = []
        self.tokens_forwarded = 0
        self.request_id = response_id
        self.attempt = 0
        self.tried: list[Replica] = []
        self.placed: Replica | None = None  # the replica counting this generation as its load
        self.pending_prefill = 0  # prompt tokens it still has to prefill for us

    def stop_safety(self) -> None:
        if self.input_task is not None:
            self.input_task.cancel()
        if self.checker is not None:
            self.checker.cancel()

    async def events(self) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        try:
            async for event in self._events():
                yield event
        finally:
            self._vacate()

    async def _events(self) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        cfg = self.gw.config
        try:
            link = await self._link()
        except RequestError as e:
            yield self._fail(e)
            return
        yield self._event(created=gateway_pb2.ResponseCreated(response_id=self.id, replica_id=link.replica.name))
        if self.safety_on:
            text = input_text(self.p.new_items)
            self.checker = OutputChecker(
                self.gw.classifier, cfg.safety_chunk_chars, cfg.safety_overlap_chars, lambda: self.queue.put_nowait(_PROGRESS)
            )
            if cfg.safety_serial:
                await self._check_input(text)
            else:
                self.input_task = asyncio.create_task(self._check_input(text))
        if self.input_verdict is not None and not self.input_verdict.verdict.allowed:
            yield self._safety_event(INPUT, self.input_verdict.verdict, self.input_verdict.us, 0)
            yield self._fail(RequestError(Code.ERROR_CODE_SAFETY_VIOLATION, "input failed the safety check"))
            return
        await self._start(link, resend_full=False)
        finished: inference_pb2.GenerationFinished | None = None
        input_reported = False
        while True:
            message = await self.queue.get()
            if isinstance(message, inference_pb2.GenerateResponse):
                kind = message.WhichOneof("event")
                if kind == "tokens" and finished is None:
                    if await self._on_tokens(message.tokens.token_ids):
                        finished = inference_pb2.GenerationFinished(
                            finish_reason=common_pb2.FINISH_REASON_STOP,
                            usage=common_pb2.Usage(output_tokens=len(self.generated)),
                        )
                        self._end_output()
                elif kind == "finished" and finished is None:
                    finished = message.finished
                    self._end_output()
                elif kind == "error":
                    error = message.error
                    if error.code == Code.ERROR_CODE_STATE_LOST and self.attempt == 0 and not self.generated:
                        self.gw.metrics.state_lost_resends += 1
                        assert self.s.link is not None
                        self.s.link.forget_held()
                        await self._start(self.s.link, resend_full=True)
                        continue
                    self._detach()
                    yield self._fail(RequestError(error.code, error.message, error.field,
                                                  retryable=error.retryable, retry_after_ms=error.retry_after_ms))
                    return
            elif isinstance(message, LinkDown):
                if finished is None:
                    try:
                        await self._failover(message)
                    except RequestError as e:
                        yield self._fail(e)
                        return
            elif message is _CANCEL:
                await self._abandon()
                yield self._fail(RequestError(Code.ERROR_CODE_CANCELLED, "cancelled by the client", "cancel_response"))
                return
            # Safety verdicts and progress arrive here too; everything below re-evaluates.
            violation = self._violation()
            if violation is not None:
                stage, verdict, us = violation
                self.gw.metrics.safety_cuts += 1
                await self._abandon()
                checked = self.checker.checked_chars if self.checker else 0
                yield self._safety_event(stage, verdict, us, checked)
                yield self._fail(RequestError(Code.ERROR_CODE_SAFETY_VIOLATION, f"{verdict.category}: {verdict.detail}"))
                return
            if self.input_verdict is not None and not input_reported:
                input_reported = True
                yield self._safety_event(INPUT, self.input_verdict.verdict, self.input_verdict.us, 0)
            for event in self._releasable():
                yield event
            if finished is not None and self._safety_done():
                break
        for event in self._releasable():
            yield event
        if self.checker is not None:
            yield self._safety_event(OUTPUT, Verdict(True), self.checker.classifier_us, self.checker.checked_chars)
        yield self._complete(finished)

    # -- generation -------------------------------------------------------------------

    async def _link(self) -> GenerateLink:
        """The session's Generate stream; routed anew on the first turn or when its replica failed."""
        session = self.s
        if session.link is not None and session.link.alive:  # a live stream is proof enough of a live replica
            return session.link
        if session.link is not None:
            old, session.link = session.link, None
            await old.close()
        with self.watch:
            conversation = self.p.conversation
            replica = self.gw.router.choose(len(conversation), conversation.block_hashes, exclude=self.tried)
            # Count the load at once, so requests routed before this one starts see it.
            cached = replica.cached_prefix_blocks(conversation.block_hashes(replica.block_size)) * replica.block_size
            self._occupy(replica, max(0, len(conversation) - cached))
            session.link = GenerateLink(replica, session.stream_id)
        return session.link

    async def _start(self, link: GenerateLink, resend_full: bool) -> None:
        with self.watch:
            conversation = self.p.conversation
            params = self._params()
            start = inference_pb2.GenerationStart(
                request_id=self.request_id,
                session_id=self.s.stream_id,
                params=params,
                oracle_token_ids=self.oracle[len(self.generated) :],
                retention_seconds=self.create.retention_seconds,
                priority=self.create.priority,
                cache_salt=self.s.tenant.name,
            )
            telemetry.inject(start.trace_context)  # the generation joins this response's (turn's) trace
            held = link.held_length
            base_hash = conversation.hash_at(held) if held and not resend_full and not self.p.naive else None
            if base_hash is not None and base_hash == link.held_hash and not self.generated:
                ids = conversation.prompt_ids(held)
                start.append.CopyFrom(inference_pb2.AppendPrompt(base_length=held, base_hash=base_hash, token_ids=ids))
                self.gw.metrics.append_sends += 1
            else:
                ids = conversation.prompt_ids() + self.generated
                start.full.CopyFrom(inference_pb2.FullPrompt(token_ids=ids))
                self.gw.metrics.full_sends += 1
            self.tokens_forwarded += len(ids)
            link.forget_held()
            if start.WhichOneof("prompt") == "full":
                cached = link.replica.cached_prefix_blocks(conversation.block_hashes(link.replica.block_size))
                uncached = max(0, len(ids) - cached * link.replica.block_size)
            else:
                uncached = len(ids)
            self._occupy(link.replica, uncached)
        self.gw.metrics.tokens_forwarded += len(ids)
        await link.start(start, self.queue)

    def _occupy(self, replica: Replica, uncached: int) -> None:
        """Count this generation in the replica's load until it ends (the router reads it)."""
        self._vacate()
        self.placed, self.pending_prefill = replica, uncached
        replica.in_flight += 1
        replica.pending_prefill_tokens += uncached

    def _prefilled(self) -> None:
        if self.placed is not None:
            self.placed.pending_prefill_tokens -= self.pending_prefill
            self.pending_prefill = 0

    def _vacate(self) -> None:
        if self.placed is not None:
            self._prefilled()
            self.placed.in_flight -= 1
            self.placed = None

    def _params(self) -> inference_pb2.GenerationParams:
        s = self.create.sampling
        limit = self.s.link.replica.status.max_output_tokens if self.s.link else 0
        if s.max_output_tokens:
            max_tokens = s.max_output_tokens
        elif self.oracle:
            max_tokens = min(len(self.oracle), limit or len(self.oracle))
        else:
            max_tokens = min(self.gw.config.default_max_output_tokens, limit or self.gw.config.default_max_output_tokens)
        params = inference_pb2.GenerationParams(
            temperature=s.temperature,
            top_p=s.top_p,
            seed=s.seed,
            max_tokens=max(1, max_tokens - len(self.generated)),
            stop_token_ids=self.gw.model.stop_token_ids,
        )
        if s.HasField("speculative_decoding"):
            params.speculative_decoding = s.speculative_decoding
        return params

    async def _failover(self, down: LinkDown) -> None:
        """The replica died mid-stream: continue on another one from where the output is."""
        link = self.s.link
        assert link is not None
        self._vacate()
        self.gw.router.mark_down(link.replica)
        self.tried.append(link.replica)
        if self.attempt >= self.gw.config.max_failovers:
            raise RequestError(Code.ERROR_CODE_UNAVAILABLE, down.message, "", retryable=True, retry_after_ms=500)
        self.attempt += 1
        self.gw.metrics.failovers += 1
        self.request_id = f"{self.id}.{self.attempt}"
        log.warning("response %s: %s; failing over", self.id, down.message)
        await self._start(await self._link(), resend_full=True)

    async def _abandon(self) -> None:
        """Stop the generation on the replica (cancel, cut, stop string)."""
        if self.s.link is not None:
            await self.s.link.cancel(self.request_id)
        self._detach()

    def _detach(self) -> None:
        """This response no longer listens to the replica, whose held sequence is now unknown."""
        link = self.s.link
        if link is not None:
            link.done(self.request_id)
            link.forget_held()
        self._vacate()

    async def _on_tokens(self, token_ids: Sequence[int]) -> bool:
        """Parse new tokens; True when a stop string ended the output (generation is cancelled)."""
        self._prefilled()
        if self.parser.done:
            return False
        with self.watch:
            self.generated.extend(token_ids)
            safety_from = len(self.parser.safety_text)
            outs = self.parser.feed(token_ids)
            self._queue_events(outs, safety_from)
        if self.parser.stopped_by_string:
            await self._abandon()
            return True
        return False

    def _end_output(self) -> None:
        with self.watch:
            safety_from = len(self.parser.safety_text)
            self._queue_events(self.parser.finish(), safety_from)
        if self.checker is not None:
            self.checker.close()

    def _queue_events(self, outs: list[OutputEvent], safety_from: int) -> None:
        for out in outs:
            self.pending.append((out.safety_offset, self._to_proto(out)))
        if self.checker is not None:
            self.checker.add("".join(self.parser.safety_text[safety_from:]))

    def _to_proto(self, out: OutputEvent) -> gateway_pb2.ConverseResponse:
        if isinstance(out, TextOut):
            return self._event(text_delta=gateway_pb2.TextDelta(text=out.text))
        if isinstance(out, CallStartedOut):
            return self._event(tool_call_started=gateway_pb2.ToolCallStarted(
                call_id=out.call_id, name=out.name, index=out.index))
        if isinstance(out, CallArgumentsOut):
            return self._event(tool_call_arguments_delta=gateway_pb2.ToolCallArgumentsDelta(
                call_id=out.call_id, delta=out.delta))
        assert isinstance(out, CallDoneOut)
        return self._event(tool_call_done=gateway_pb2.ToolCallDone(call=out.call, index=out.index))

    # -- safety -----------------------------------------------------------------------

    async def _check_input(self, text: str) -> None:
        t0 = time.perf_counter_ns()
        verdict = await self.gw.classifier.classify(text, INPUT) if text else Verdict(True)
        self.input_verdict = _InputVerdict(verdict, (time.perf_counter_ns() - t0) // 1000)
        self.queue.put_nowait(_PROGRESS)

    def _violation(self) -> tuple[int, Verdict, int] | None:
        if self.input_verdict is not None and not self.input_verdict.verdict.allowed:
            return INPUT, self.input_verdict.verdict, self.input_verdict.us
        if self.checker is not None and self.checker.violation is not None:
            return OUTPUT, self.checker.violation, self.checker.classifier_us
        return None

    def _safety_done(self) -> bool:
        if not self.safety_on:
            return True
        assert self.checker is not None
        return self.input_verdict is not None and self.checker.finished

    def _releasable(self) -> list[gateway_pb2.ConverseResponse]:
        if self.safety_on and self.input_verdict is None:
            return []  # nothing leaves before the input check passed (it races prefill)
        limit = self.checker.checked_chars if (self.buffered and self.checker is not None) else None
        out = []
        while self.pending and (limit is None or self.pending[0][0] <= limit):
            out.append(self.pending.popleft()[1])
        return out

    # -- results ----------------------------------------------------------------------

    def _complete(self, finished: inference_pb2.GenerationFinished | None) -> gateway_pb2.ConverseResponse:
        assert finished is not None
        gw, session = self.gw, self.s
        link = session.link
        with self.watch:
            conversation = self.p.conversation
            output = self.parser.output_items()
            t0 = time.thread_time_ns()
            if self.parser.stopped_by_string:  # the turn is what the client got: cut before the stop string
                tokenized = conversation.append(output)
            else:
                tokenized = conversation.complete(output, self.generated, self.parser.raw_text)
            tokenize_us = self.p.tokenize_us + (time.thread_time_ns() - t0) // 1000
            if link is not None and not self.parser.stopped_by_string:
                link.done(self.request_id)
                link.replica.observe(finished.usage, finished.timings)
                link.held_length, link.held_hash = finished.sequence_length, finished.sequence_hash
            self._vacate()
            if not gw.config.stateless:
                gw.store.put(self.id, conversation, session.tenant.name, session.stream_id, self.create.no_store)
                session.conversation = conversation
            if self.parser.stopped_by_string:
                reason = common_pb2.FINISH_REASON_STOP
            elif self.parser.calls:
                reason = common_pb2.FINISH_REASON_TOOL_CALLS
            else:
                reason = finished.finish_reason or common_pb2.FINISH_REASON_STOP
            session.limiter.tokens.charge(finished.usage.output_tokens)
            gw.metrics.responses += 1
            gw.metrics.tokens_tokenized += tokenized
        t = finished.timings
        timings = common_pb2.Timings(
            gateway_overhead_us=self.watch.us,
            tokenize_us=tokenize_us,
            queue_us=t.queue_us,
            prefill_us=t.prefill_us,
            ttft_us=t.ttft_us,
            decode_us=t.decode_us,
            safety_us=(self.input_verdict.us if self.input_verdict else 0)
            + (self.checker.classifier_us if self.checker else 0),
            total_us=int((time.perf_counter() - self.started) * 1e6),
            tokens_tokenized=self.p.tokens_tokenized + tokenized,
            bytes_received=self.p.bytes_received,
            tokens_forwarded=self.tokens_forwarded,
        )
        return self._event(completed=gateway_pb2.ResponseCompleted(
            finish_reason=reason, usage=finished.usage, timings=timings, output=output))

    def _event(self, **kwargs: object) -> gateway_pb2.ConverseResponse:
        return gateway_pb2.ConverseResponse(response_id=self.id, **kwargs)  # type: ignore[arg-type]

    def _safety_event(self, stage: int, verdict: Verdict, us: int, checked: int) -> gateway_pb2.ConverseResponse:
        return self._event(safety=gateway_pb2.SafetyVerdict(
            stage=stage,  # type: ignore[arg-type]
            allowed=verdict.allowed,
            category=verdict.category,
            detail=verdict.detail,
            classifier_us=us,
            checked_chars=checked,
        ))

    def _fail(self, error: RequestError) -> gateway_pb2.ConverseResponse:
        self.gw.metrics.failed_responses += 1
        return _failed(self.id, error)


def _failed(response_id: str, error: RequestError) -> gateway_pb2.ConverseResponse:
    return gateway_pb2.ConverseResponse(response_id=response_id, failed=gateway_pb2.ResponseFailed(error=error.to_proto()))


def _check_delta_header(create: gateway_pb2.CreateResponse, conversation: Conversation) -> None:
    """A delta may leave model, instructions and tools empty (inherited) but not change them."""
    if create.model and create.model != conversation.model:
        raise invalid("create_response.model", "differs from the previous request's: send the full request")
    if create.instructions and create.instructions != conversation.instructions:
        raise invalid("create_response.instructions", "differs from the previous request's: send the full request")
    if create.tools and not conversation.same_header(conversation.model, conversation.instructions, create.tools):
        raise invalid("create_response.tools", "differ from the previous request's: send the full request")
