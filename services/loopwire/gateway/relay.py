"""One response's generation relayed to the client: start, tokens to events, completion.

The prompt goes to the replica as an append of only the new ids when the replica holds
the conversation's prefix (a full prompt otherwise); output ids are parsed into text and
tool-call events, which leave through the safety gate; a STATE_LOST append is resent in
full once; a dead replica hands over to another (failover.py). A long uncached prompt for a
decode-role replica is first prefilled on a prefill replica, whose KV the decode replica pulls
(disagg.py decides). The completed turn enters the conversation as the ids generated.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

from loopwire.common import telemetry
from loopwire.common.errors import RequestError
from loopwire.gateway import policy
from loopwire.gateway.events import CANCEL, PROGRESS, event, failed, output_event, safety_event
from loopwire.gateway.failover import Placement
from loopwire.gateway.generate_link import GenerateLink, LinkDown
from loopwire.gateway.logprobs import TextLogprobs, reasoning_tokens
from loopwire.gateway.metrics import Stopwatch
from loopwire.gateway.output_parser import OutputEvent, OutputParser, TextOut
from loopwire.gateway.safety import INPUT, OUTPUT, Verdict, input_text
from loopwire.gateway.safety_gate import SafetyGate
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

log = logging.getLogger("loopwire.gateway")

if TYPE_CHECKING:
    from loopwire.gateway.parts import Stream
    from loopwire.gateway.prepare import Prepared

Code = common_pb2.ErrorCode


class Phase(enum.Enum):
    """Where one response is (the relay's state machine)."""

    OPENING = "opening"  # routing, the input's safety check, the start
    GENERATING = "generating"  # the replica streams output
    DRAINING = "draining"  # the generation ended; output waits for its safety verdicts
    FAILED = "failed"  # ended with an error event (error, cancel, safety cut)


class _StoppedByString:
    """The queue's marker: a batch parsed in the reader's callback reached a stop string."""


STOPPED_BY_STRING = _StoppedByString()


class _Raised:
    """The queue's marker: parsing a batch in the reader's callback failed (the response fails with it)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class Inbox:
    """Where the link's reader puts this response's replica messages. A token batch that nothing waits
    before is parsed at once, in the reader's callback, and its events go straight to the stream's
    outbox: no hop to the response's task and up its generators per message. Anything else (an end, an
    error, a batch behind queued work) goes to the response's queue, in order."""

    __slots__ = ("run",)

    def __init__(self, run: ResponseRun) -> None:
        self.run = run

    def put_nowait(self, message: object) -> None:
        if not self.run.take_at_once(message):
            self.run.queue.put_nowait(message)


class ResponseRun:
    """Drives one response: generation, failover, safety, release of events."""

    def __init__(
        self,
        session: Stream,
        create: gateway_pb2.CreateResponse,
        response_id: str,
        prepared: Prepared,
        watch: Stopwatch,
        started: float,
        model: str,
        emit: Callable[[gateway_pb2.ConverseResponse], None] | None = None,
    ) -> None:
        """``emit``: hands an output event to the stream's writer, for the token batches parsed as they
        are read (None: every event leaves through ``events``)."""
        self.s = session
        self.gw = session.gw
        self.create = create
        self.id = response_id
        self.p = prepared
        self.watch = watch
        self.started = started
        self.model = model
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.inbox = Inbox(self)
        self.emit = emit
        self._parked = False  # the response's task waits for its next message, none queued
        replay_ids = [c.call_id for c in create.replay.function_calls] if create.HasField("replay") else []
        self.parser = OutputParser(
            self.gw.model,
            stops=list(create.sampling.stop),
            call_id_for=lambda n: replay_ids[n] if n < len(replay_ids) and replay_ids[n] else f"call_{response_id}_{n}",
            tools=prepared.conversation.tools,
        )
        self.oracle = (
            self.gw.prompt.output_ids(create.replay.text, create.replay.function_calls)
            if create.HasField("replay")
            else []
        )
        mode = policy.safety_mode(create, session.tenant, self.gw.config.safety_mode)
        self.safety = SafetyGate(self.gw.classifier, mode, self.queue,
                                 functools.partial(self.gw.offload, session.tenant.name))
        self.place = Placement(session, prepared.conversation, watch, model)
        self.generated: list[int] = []
        self.remote_prefill = False  # the generation in flight pulls its prompt's KV from a prefill replica
        self.tokens_forwarded = 0
        self.request_id = response_id
        self.phase = Phase.OPENING
        self.finished: inference_pb2.GenerationFinished | None = None
        self._held: object = None  # a message taken while joining token batches, handled next
        # Log-probabilities asked for: tokens are parsed one by one, so each goes with its text.
        self.text_logprobs = TextLogprobs(self.gw.model) if create.sampling.HasField("top_logprobs") else None
        self._lp_pending: list[dict[str, object]] = []  # entries of tokens whose text is not out yet
        self._stop_ids = frozenset(self.gw.model.stop_token_ids)
        self._input_reported = False

    def stop_safety(self) -> None:
        self.safety.stop()

    async def events(self) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        try:
            async for out in self._events():
                yield out
        finally:
            self.place.vacate()

    async def _events(self) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        """The response's events: opening, then one handler per message until it ends.

        Phases: GENERATING (the replica streams) -> DRAINING (the generation finished; output
        waits for its safety verdicts) -> completed. Any handler may end it as FAILED (an error,
        a cancel, a safety cut) after yielding its failure event.
        """
        for out in await self._open():
            yield out
        while self.phase in (Phase.GENERATING, Phase.DRAINING):
            message = await self._next_message()
            if isinstance(message, inference_pb2.GenerateResponse):
                handled = await self._on_replica(message)
            elif isinstance(message, LinkDown):
                handled = await self._on_link_down(message)
            elif message is CANCEL:
                handled = await self._on_cancel()
            elif message is STOPPED_BY_STRING:
                await self._stop_at_string()
                handled = []
            elif isinstance(message, _Raised):
                raise message.error
            else:  # a safety verdict or progress: only the re-evaluation below
                handled = []
            for out in handled:
                yield out
            if self.phase is Phase.FAILED:
                return
            for out in await self._after_message():
                yield out
            if self.phase is Phase.DRAINING and self.safety.done():
                break
        if self.phase is Phase.FAILED:
            return
        for out in self.safety.releasable():
            yield out
        checker = self.safety.checker
        if checker is not None:
            yield self._safety_event(OUTPUT, Verdict(True), checker.classifier_us, checker.checked_chars)
        yield self._complete(self.finished)

    async def _open(self) -> list[gateway_pb2.ConverseResponse]:
        """Route, announce the response, check the input, start the generation."""
        cfg, safety = self.gw.config, self.safety
        try:
            link = await self.place.link()
        except RequestError as e:
            return self._failure(e)
        out = [self._event(created=gateway_pb2.ResponseCreated(response_id=self.id, replica_id=link.replica.name))]
        if safety.on:
            await safety.start(input_text(self.p.new_items), cfg.safety_chunk_chars, cfg.safety_overlap_chars,
                               cfg.baseline.safety_serial, cfg.safety_input_window_chars)
        if safety.input_verdict is not None and not safety.input_verdict.verdict.allowed:
            out.append(self._safety_event(INPUT, safety.input_verdict.verdict, safety.input_verdict.us, 0))
            return out + self._failure(RequestError(Code.ERROR_CODE_SAFETY_VIOLATION, "input failed the safety check"))
        await self._start(link, resend_full=False)
        self.phase = Phase.GENERATING
        return out

    async def _next_message(self) -> object:
        """The next message; token batches queued behind one are joined into it (parsed and sent as one)."""
        queue = self.queue
        if self._held is not None:
            message, self._held = self._held, None
        elif queue.empty():
            self._parked = True
            try:
                message = await queue.get()
            finally:
                self._parked = False
        else:
            message = queue.get_nowait()
        if not (isinstance(message, inference_pb2.GenerateResponse) and message.HasField("tokens")) or queue.empty():
            return message
        joined = inference_pb2.GenerateResponse(request_id=message.request_id)
        joined.tokens.token_ids.extend(message.tokens.token_ids)
        joined.tokens.logprobs.extend(message.tokens.logprobs)
        while not queue.empty():
            nxt = queue.get_nowait()
            if not (isinstance(nxt, inference_pb2.GenerateResponse) and nxt.HasField("tokens")):
                self._held = nxt
                break
            joined.tokens.token_ids.extend(nxt.tokens.token_ids)
            joined.tokens.logprobs.extend(nxt.tokens.logprobs)
        return joined

    def take_at_once(self, message: object) -> bool:
        """Parse a token batch now, in the link reader's callback, when the response's task waits with
        nothing queued (so nothing can come out of order) and no safety cut is due; its releasable
        events go to ``emit``. False: the message is for the queue. What needs awaiting (the cancel
        after a stop string, a cut) is left to the task through a marker."""
        if (self.emit is None or not self._parked or not self.queue.empty() or self.phase is not Phase.GENERATING
                or type(message) is not inference_pb2.GenerateResponse or not message.HasField("tokens")):
            return False
        try:
            if self._feed(message.tokens.token_ids, message.tokens.logprobs):
                self.queue.put_nowait(STOPPED_BY_STRING)
            elif self.safety.violation() is not None:
                self.queue.put_nowait(PROGRESS)  # the task cuts the response
            else:
                for out in self._releasable():
                    self.emit(out)
        except Exception as e:  # noqa: BLE001 - a bug fails this response in its task, never the link's reader
            self.queue.put_nowait(_Raised(e))
        return True

    async def _on_replica(self, message: inference_pb2.GenerateResponse) -> list[gateway_pb2.ConverseResponse]:
        kind = message.WhichOneof("event")
        generating = self.phase is Phase.GENERATING
        if kind == "tokens" and generating:
            if self._feed(message.tokens.token_ids, message.tokens.logprobs):
                await self._stop_at_string()
        elif kind == "finished" and generating:
            self._finish(message.finished)
        elif kind == "prefill_progress" and generating and not self.generated:
            return [self._event(prefill_progress=message.prefill_progress)]
        elif kind == "error":
            return await self._on_replica_error(message.error)
        return []

    async def _on_replica_error(self, error: common_pb2.Error) -> list[gateway_pb2.ConverseResponse]:
        """A resend in full when the replica lost or could not import the state; a failure otherwise."""
        link = self.s.link
        if self.remote_prefill and error.reason == common_pb2.ERROR_REASON_KV_PULL_FAILED and not self.generated:
            # The decode replica refused the pull (say, the prefill replica is not among its
            # --peers): the same request, prefilled locally; the client never sees it.
            self.gw.router.disagg.failed += 1
            log.warning("remote prefill refused by %s (%s); prefilling locally",
                        link.replica.name if link else "?", error.message)
        elif error.code == Code.ERROR_CODE_STATE_LOST and self.place.attempt == 0 and not self.generated:
            self.gw.metrics.add("state_lost_resends", self.model)
        else:
            self.place.detach(self.request_id)
            return self._failure(RequestError(error.code, error.message, error.field, retryable=error.retryable,
                                              retry_after_ms=error.retry_after_ms, reason=error.reason))
        assert link is not None
        link.forget_held()
        await self._start(link, resend_full=True)
        return []

    async def _on_link_down(self, down: LinkDown) -> list[gateway_pb2.ConverseResponse]:
        """The replica died: continue on another (the output so far is kept), unless it already finished."""
        if self.phase is not Phase.GENERATING:
            return []
        try:
            link = await self.place.fail_over(down, self.id)
        except RequestError as e:
            return self._failure(e)
        self.request_id = f"{self.id}.{self.place.attempt}"
        await self._start(link, resend_full=True)
        return []

    async def _on_cancel(self) -> list[gateway_pb2.ConverseResponse]:
        await self.place.abandon(self.request_id)
        return self._failure(RequestError(Code.ERROR_CODE_CANCELLED, "cancelled by the client", "cancel_response"))

    async def _after_message(self) -> list[gateway_pb2.ConverseResponse]:
        """Re-evaluate safety after any message: cut on a violation, else release what passed."""
        safety = self.safety
        violation = safety.violation()
        if violation is not None:
            stage, verdict, us = violation
            self.gw.metrics.add("safety_cuts", self.model)
            await self.place.abandon(self.request_id)
            cut = [self._safety_event(stage, verdict, us, safety.checked_chars)]
            return cut + self._failure(RequestError(Code.ERROR_CODE_SAFETY_VIOLATION,
                                                    f"{verdict.category}: {verdict.detail}"))
        return self._releasable()

    def _releasable(self) -> list[gateway_pb2.ConverseResponse]:
        """The input check's verdict once it came, and the output events safety lets out now."""
        safety = self.safety
        out = []
        if safety.input_verdict is not None and not self._input_reported:
            self._input_reported = True
            out.append(self._safety_event(INPUT, safety.input_verdict.verdict, safety.input_verdict.us, 0))
        out.extend(safety.releasable())
        return out

    def _finish(self, finished: inference_pb2.GenerationFinished) -> None:
        self.finished = finished
        self.phase = Phase.DRAINING
        self._end_output()

    def _failure(self, error: RequestError) -> list[gateway_pb2.ConverseResponse]:
        self.phase = Phase.FAILED
        return [self._fail(error)]

    # -- generation -------------------------------------------------------------------

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
            if self.p.constraint is not None:
                start.constraint.CopyFrom(self.p.constraint)
                start.constraint.generated_token_ids.extend(self.generated)
            telemetry.inject(start.trace_context)  # the generation joins this response's (turn's) trace
            held = link.held_length
            base_hash = conversation.hash_at(held) if held and not resend_full and not self.p.naive else None
            if base_hash is not None and base_hash == link.held_hash and not self.generated:
                ids = conversation.prompt_ids(held)
                start.append.CopyFrom(inference_pb2.AppendPrompt(base_length=held, base_hash=base_hash, token_ids=ids))
                cached = held  # the replica holds the sequence appended to
                prompt_len = held + len(ids)
            else:
                ids = conversation.prompt_ids() + self.generated
                start.full.CopyFrom(inference_pb2.FullPrompt(token_ids=ids))
                blocks = link.replica.cached_prefix_blocks(conversation.block_hashes(link.replica.block_size))
                cached = min(len(ids), blocks * link.replica.block_size)
                prompt_len = len(ids)
            # A STATE_LOST resend (perhaps a failed KV pull) prefills locally; a failover may go remote.
            router = self.gw.router
            source = None
            if not resend_full or self.place.attempt > 0:
                source = router.disagg.pick(link.replica, router.prefill_replicas(), prompt_len, cached)
        self.remote_prefill = False
        if source is not None:
            full = conversation.prompt_ids() + self.generated
            handle = await router.disagg.prefill(source, self.request_id, full, params, start.cache_salt)
            if handle is not None:
                start.full.CopyFrom(inference_pb2.FullPrompt(token_ids=full))
                start.kv_handle, start.kv_source = handle, source.address
                self.remote_prefill = True
                ids, cached = full, len(full) - len(full) % link.replica.block_size
        with self.watch:
            self.gw.metrics.add("full_sends" if start.WhichOneof("prompt") == "full" else "append_sends", self.model)
            self.tokens_forwarded += len(ids)
            link.forget_held()
            uncached = max(0, len(ids) - cached) if start.WhichOneof("prompt") == "full" else len(ids)
            self.place.occupy(link.replica, uncached)
        self.gw.metrics.add("tokens_forwarded", self.model, len(ids))
        await link.start(start, self.inbox)

    def _params(self) -> inference_pb2.GenerationParams:
        s = self.create.sampling
        limit = self.s.link.replica.status.max_output_tokens if self.s.link else 0
        if s.max_output_tokens:
            max_tokens = s.max_output_tokens
        elif self.oracle:
            max_tokens = min(len(self.oracle), limit or len(self.oracle))
        else:
            max_tokens = min(self.gw.config.default_max_output_tokens, limit or self.gw.config.default_max_output_tokens)
        if limit:
            max_tokens = min(max_tokens, limit)  # the replica's cap, never an error about a field nobody sent
        window = self.gw.model.context_length
        if window:  # the reply fits the context window after the prompt (prepare refused a prompt that fills it)
            max_tokens = min(max_tokens, window - len(self.p.conversation))
        params = inference_pb2.GenerationParams(
            temperature=s.temperature,
            top_p=s.top_p,
            seed=s.seed,
            max_tokens=max(1, max_tokens - len(self.generated)),
            stop_token_ids=self.gw.model.stop_token_ids,
        )
        if s.HasField("speculative_decoding"):
            params.speculative_decoding = s.speculative_decoding
        if s.HasField("top_logprobs"):
            params.top_logprobs = s.top_logprobs
        return params

    def _feed(self, token_ids: Sequence[int], logprobs: Sequence[inference_pb2.TokenLogprobs] = ()) -> bool:
        """Parse new tokens; True when a stop string ended the output (``_stop_at_string`` then ends
        the generation)."""
        self.place.prefilled()
        if self.parser.done:
            return False
        with self.watch:
            before = len(self.generated)
            self.generated.extend(token_ids)
            safety_from = len(self.parser.safety_text)
            if self.text_logprobs is not None and len(logprobs) == len(token_ids):
                outs = self._feed_with_logprobs(token_ids, logprobs)
            else:
                outs = self.parser.feed(token_ids)
            self._queue_events(outs, safety_from)
            if self.parser.stopped_by_string and len(token_ids) > 1:
                del self.generated[self._tokens_to_stop(before):]
        return self.parser.stopped_by_string

    async def _stop_at_string(self) -> None:
        """A stop string ended the output: cancel the generation, which finishes as STOP."""
        await self.place.abandon(self.request_id)
        self._finish(inference_pb2.GenerationFinished(
            finish_reason=common_pb2.FINISH_REASON_STOP, usage=common_pb2.Usage(output_tokens=len(self.generated))))

    def _feed_with_logprobs(self, token_ids: Sequence[int],
                            logprobs: Sequence[inference_pb2.TokenLogprobs]) -> list[OutputEvent]:
        """Parse token by token (the text is the same however the ids are batched), so each
        token's entry goes with the text it releases; entries of tokens that became a tool call
        (those since the last text when a call event comes) and the stop token are left out."""
        assert self.text_logprobs is not None
        stops = self._stop_ids
        outs: list[OutputEvent] = []
        for token, lp in zip(token_ids, logprobs, strict=True):
            if token not in stops:
                self._lp_pending.append(self.text_logprobs.entry(token, lp))
            events = self.parser.feed((token,))
            self._attach_logprobs(events)
            outs += events
            if self.parser.done:
                break
        return outs

    def _attach_logprobs(self, events: list[OutputEvent]) -> None:
        """Pending entries go to the text events in order, as many as spell each one's bytes (the
        last text event takes the rest); a call event drops those not yet out (the call's)."""
        last = max((i for i, ev in enumerate(events) if type(ev) is TextOut), default=-1)
        for i, ev in enumerate(events):
            if type(ev) is not TextOut:
                self._lp_pending = []
                continue
            if i == last:
                taken, self._lp_pending = self._lp_pending, []
            else:
                need, got, n = len(ev.text.encode()), 0, 0
                while n < len(self._lp_pending) and got < need:
                    got += len(self._lp_pending[n]["bytes"])  # type: ignore[arg-type]
                    n += 1
                taken, self._lp_pending = self._lp_pending[:n], self._lp_pending[n:]
            if taken:
                ev.logprobs = taken

    def _tokens_to_stop(self, before: int) -> int:
        """How many generated ids it took to reach the stop string that ended the output, when the
        batch that held it held more: the turn counts the same however the replica batched it."""
        lo, hi = before + 1, len(self.generated)
        while lo < hi:  # the fewest ids whose text reaches a stop string (once per response)
            mid = (lo + hi) // 2
            probe = OutputParser(self.gw.model, stops=self.parser.stops, tools=self.parser.tools)
            probe.feed(self.generated[:mid])
            if probe.stopped_by_string:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _end_output(self) -> None:
        with self.watch:
            safety_from = len(self.parser.safety_text)
            tail = self.parser.finish()
            if self.text_logprobs is not None:
                self._attach_logprobs(tail)
            self._queue_events(tail, safety_from)
        self.safety.close_output()

    def _queue_events(self, outs: list[OutputEvent], safety_from: int) -> None:
        for out in outs:
            self.safety.hold(out.safety_offset, output_event(self.id, out))
        if self.safety.checker is not None:
            self.safety.add_output("".join(self.parser.safety_text[safety_from:]))

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
            self.place.vacate()
            if not gw.config.baseline.stateless:
                gw.store.put(self.id, conversation, session.tenant.name, session.stream_id, self.create.no_store)
                session.conversation = conversation
            reason = self.parser.finish_reason(finished.finish_reason)
            session.limiter.tokens.charge(finished.usage.output_tokens)
            gw.metrics.add("responses", self.model)
            gw.metrics.add("tokens_tokenized", self.model, tokenized)
        t = finished.timings
        timings = common_pb2.Timings(
            gateway_overhead_us=self.watch.us,
            tokenize_us=tokenize_us,
            queue_us=t.queue_us,
            prefill_us=t.prefill_us,
            ttft_us=t.ttft_us,
            decode_us=t.decode_us,
            safety_us=self.safety.us,
            total_us=int((time.perf_counter() - self.started) * 1e6),
            tokens_tokenized=self.p.tokens_tokenized + tokenized,
            bytes_received=self.p.bytes_received,
            tokens_forwarded=self.tokens_forwarded,
        )
        usage = common_pb2.Usage()
        usage.CopyFrom(finished.usage)
        usage.reasoning_tokens = min(usage.output_tokens or len(self.generated),
                                     reasoning_tokens(gw.model, self.generated, self.parser.thought))
        completed = gateway_pb2.ResponseCompleted(finish_reason=reason, usage=usage, timings=timings, output=output)
        self.parser.report_cut(completed)
        return self._event(completed=completed)

    def _event(self, **kwargs: object) -> gateway_pb2.ConverseResponse:
        return event(self.id, **kwargs)

    def _safety_event(self, stage: int, verdict: Verdict, us: int, checked: int) -> gateway_pb2.ConverseResponse:
        return safety_event(self.id, stage, verdict, us, checked)

    def _fail(self, error: RequestError) -> gateway_pb2.ConverseResponse:
        self.gw.metrics.add("failed_responses", self.model)
        return failed(self.id, error)
