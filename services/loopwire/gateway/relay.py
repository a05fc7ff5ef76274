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

from loopwire.common.errors import RequestError
from loopwire.gateway import policy
from loopwire.gateway.events import CANCEL, PROGRESS, event, failed, safety_event
from loopwire.gateway.failover import Placement
from loopwire.gateway.generate_link import GenerateLink, LinkDown
from loopwire.gateway.generation_start import generation_params, set_prompt, start_message
from loopwire.gateway.logprobs import reasoning_tokens
from loopwire.gateway.metrics import Stopwatch
from loopwire.gateway.response_output import ResponseOutput
from loopwire.gateway.safety import INPUT, OUTPUT, Verdict, input_text
from loopwire.gateway.safety_gate import SafetyGate
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

log = logging.getLogger("loopwire.gateway")

if TYPE_CHECKING:
    from loopwire.gateway.conversation import Conversation
    from loopwire.gateway.ports import Caller, ResponsePorts
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
    """Where the link's reader puts this response's replica messages, and where the response's task
    takes them. A token batch that nothing waits before is parsed at once, in the reader's callback,
    and its events go straight to the stream's outbox: no hop to the response's task and up its
    generators per message. Anything else (an end, an error, a batch behind queued work) goes to
    the queue, in order; batches queued behind one another are taken as one."""

    __slots__ = ("run", "queue", "parked", "_held")

    def __init__(self, run: ResponseRun) -> None:
        self.run = run
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.parked = False  # the response's task waits for its next message, none queued
        self._held: object = None  # a message taken while joining token batches, handled next

    def put_nowait(self, message: object) -> None:
        if type(message) is inference_pb2.GenerateResponse and message.request_id != self.run.placement.request_id:
            return  # an attempt this response already failed over from
        if not self.run.take_at_once(message):
            self.queue.put_nowait(message)

    async def next(self) -> object:
        """The next message; token batches queued behind one are joined into it (parsed and sent as one)."""
        queue = self.queue
        if self._held is not None:
            message, self._held = self._held, None
        elif queue.empty():
            self.parked = True
            try:
                message = await queue.get()
            finally:
                self.parked = False
        else:
            message = queue.get_nowait()
        if not _is_tokens(message) or queue.empty():
            return message
        assert isinstance(message, inference_pb2.GenerateResponse)
        joined = inference_pb2.GenerateResponse(request_id=message.request_id)
        joined.tokens.token_ids.extend(message.tokens.token_ids)
        joined.tokens.logprobs.extend(message.tokens.logprobs)
        while not queue.empty():
            nxt = queue.get_nowait()
            if not _is_tokens(nxt):
                self._held = nxt
                break
            assert isinstance(nxt, inference_pb2.GenerateResponse)
            joined.tokens.token_ids.extend(nxt.tokens.token_ids)
            joined.tokens.logprobs.extend(nxt.tokens.logprobs)
        return joined


def _is_tokens(message: object) -> bool:
    return type(message) is inference_pb2.GenerateResponse and message.HasField("tokens")


class ResponseRun:
    """Drives one response through its phases (``Phase``): opening, generating, draining; the
    generation's placement is failover.py's, its output's assembly response_output.py's."""

    def __init__(
        self,
        ports: ResponsePorts,
        caller: Caller,
        link: GenerateLink | None,
        create: gateway_pb2.CreateResponse,
        response_id: str,
        prepared: Prepared,
        watch: Stopwatch,
        started: float,
        emit: Callable[[gateway_pb2.ConverseResponse], None] | None = None,
    ) -> None:
        """``link``: the stream's replica link (None before its first turn); ``emit``: hands an output
        event to the stream's writer, for the token batches parsed as they are read (None: every
        event leaves through ``events``)."""
        self.ports = ports
        self.caller = caller
        self.create = create
        self.id = response_id
        self.prepared = prepared
        self.watch = watch
        self.started = started
        self.model = ports.model.name  # metrics are labelled with the model served (as inference labels them)
        self.inbox = Inbox(self)
        self.emit = emit
        mode = policy.safety_mode(create, caller.tenant, ports.settings.safety_mode)
        self.safety = SafetyGate(ports.classifier, mode, self.inbox.queue,
                                 functools.partial(ports.offload, caller.tenant.name))
        self.output = ResponseOutput(ports.model, create, response_id, prepared.conversation.tools, self.safety)
        self.oracle = (ports.output_ids(create.replay.text, create.replay.function_calls)
                       if create.HasField("replay") else [])
        self.placement = Placement(ports, caller.stream_id, link, response_id, prepared.conversation, watch,
                                   self.model)
        self.remote_prefill = False  # the generation in flight pulls its prompt's KV from a prefill replica
        self.tokens_forwarded = 0
        self.phase = Phase.OPENING
        self.finished: inference_pb2.GenerationFinished | None = None
        # The conversation the stream continues from once the response completed (None: unchanged).
        self.kept: Conversation | None = None

    @property
    def link(self) -> GenerateLink | None:
        """The stream's replica link after this response (the session adopts it)."""
        return self.placement.link

    def stop_safety(self) -> None:
        self.safety.stop()

    async def events(self) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        try:
            async for out in self._events():
                yield out
        finally:
            self.placement.vacate()

    async def _events(self) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        """The response's events: opening, then one handler per message until it ends.

        Phases: GENERATING (the replica streams) -> DRAINING (the generation finished; output
        waits for its safety verdicts) -> completed. Any handler may end it as FAILED (an error,
        a cancel, a safety cut) after yielding its failure event.
        """
        for out in await self._open():
            yield out
        while self.phase in (Phase.GENERATING, Phase.DRAINING):
            for out in await self._handle(await self.inbox.next()):
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

    async def _handle(self, message: object) -> list[gateway_pb2.ConverseResponse]:
        """One message's handler: the replica's, the link's end, a cancel, the reader's markers (a
        safety verdict or progress only wakes the re-evaluation after it)."""
        if isinstance(message, inference_pb2.GenerateResponse):
            return await self._on_replica(message)
        if isinstance(message, LinkDown):
            return await self._on_link_down(message)
        if message is CANCEL:
            return await self._on_cancel()
        if message is STOPPED_BY_STRING:
            await self._stop_at_string()
        elif isinstance(message, _Raised):
            raise message.error
        return []

    async def _open(self) -> list[gateway_pb2.ConverseResponse]:
        """Route, announce the response, check the input, start the generation."""
        settings, safety = self.ports.settings, self.safety
        try:
            link = await self.placement.route()
        except RequestError as e:
            return self._failure(e)
        out = [self._event(created=gateway_pb2.ResponseCreated(response_id=self.id, replica_id=link.replica.name))]
        if safety.on:
            await safety.start(input_text(self.prepared.new_items), settings.safety_chunk_chars,
                               settings.safety_overlap_chars, settings.baseline.safety_serial,
                               settings.safety_input_window_chars)
        if safety.input_verdict is not None and not safety.input_verdict.verdict.allowed:
            out.append(self._safety_event(INPUT, safety.input_verdict.verdict, safety.input_verdict.us, 0))
            return out + self._failure(RequestError(Code.ERROR_CODE_SAFETY_VIOLATION, "input failed the safety check"))
        await self._start(link, resend_full=False)
        self.phase = Phase.GENERATING
        return out

    def take_at_once(self, message: object) -> bool:
        """Parse a token batch now, in the link reader's callback, when the response's task waits with
        nothing queued (so nothing can come out of order) and no safety cut is due; its releasable
        events go to ``emit``. False: the message is for the queue. What needs awaiting (the cancel
        after a stop string, a cut) is left to the task through a marker."""
        inbox = self.inbox
        if (self.emit is None or not inbox.parked or not inbox.queue.empty() or self.phase is not Phase.GENERATING
                or not _is_tokens(message)):
            return False
        assert isinstance(message, inference_pb2.GenerateResponse)
        try:
            if self._feed(message.tokens.token_ids, message.tokens.logprobs):
                inbox.queue.put_nowait(STOPPED_BY_STRING)
            elif self.safety.violation() is not None:
                inbox.queue.put_nowait(PROGRESS)  # the task cuts the response
            else:
                for out in self.output.releasable():
                    self.emit(out)
        except Exception as e:  # noqa: BLE001 - a bug fails this response in its task, never the link's reader
            inbox.queue.put_nowait(_Raised(e))
        return True

    async def _on_replica(self, message: inference_pb2.GenerateResponse) -> list[gateway_pb2.ConverseResponse]:
        kind = message.WhichOneof("event")
        generating = self.phase is Phase.GENERATING
        if kind == "tokens" and generating:
            if self._feed(message.tokens.token_ids, message.tokens.logprobs):
                await self._stop_at_string()
        elif kind == "finished" and generating:
            self._finish(message.finished)
        elif kind == "prefill_progress" and generating and not self.output.generated:
            return [self._event(prefill_progress=message.prefill_progress)]
        elif kind == "error":
            return await self._on_replica_error(message.error)
        return []

    async def _on_replica_error(self, error: common_pb2.Error) -> list[gateway_pb2.ConverseResponse]:
        """A resend in full when the replica lost or could not import the state; a failure otherwise."""
        link, placement, generated = self.placement.link, self.placement, self.output.generated
        if self.remote_prefill and error.reason == common_pb2.ERROR_REASON_KV_PULL_FAILED and not generated:
            # The decode replica refused the pull (say, the prefill replica is not among its
            # --peers): the same request, prefilled locally; the client never sees it.
            self.ports.routing.note_prefill_fallback()
            log.warning("remote prefill refused by %s (%s); prefilling locally",
                        link.replica.name if link else "?", error.message)
        elif error.code == Code.ERROR_CODE_STATE_LOST and placement.attempt == 0 and not generated:
            self.ports.counters.add("state_lost_resends", self.model)
        else:
            placement.detach()
            return self._failure(RequestError(error.code, error.message, error.field, retryable=error.retryable,
                                              retry_after_ms=error.retry_after_ms, reason=error.reason))
        assert link is not None
        link.forget_held()
        await self._start(link, resend_full=True)
        return []

    async def _on_link_down(self, down: LinkDown) -> list[gateway_pb2.ConverseResponse]:
        """The replica died: continue on another (the output so far is kept), unless it already finished."""
        if self.phase is not Phase.GENERATING or down.request_id != self.placement.request_id:
            return []  # finished already, or an attempt already failed over from
        try:
            link = await self.placement.fail_over(down)
        except RequestError as e:
            return self._failure(e)
        await self._start(link, resend_full=True)
        return []

    async def _on_cancel(self) -> list[gateway_pb2.ConverseResponse]:
        await self.placement.abandon()
        return self._failure(RequestError(Code.ERROR_CODE_CANCELLED, "cancelled by the client", "cancel_response"))

    async def _after_message(self) -> list[gateway_pb2.ConverseResponse]:
        """Re-evaluate safety after any message: cut on a violation, else release what passed."""
        safety = self.safety
        violation = safety.violation()
        if violation is not None:
            stage, verdict, us = violation
            self.ports.counters.add("safety_cuts", self.model)
            await self.placement.abandon()
            cut = [self._safety_event(stage, verdict, us, safety.checked_chars)]
            return cut + self._failure(RequestError(Code.ERROR_CODE_SAFETY_VIOLATION,
                                                    f"{verdict.category}: {verdict.detail}"))
        return self.output.releasable()

    def _finish(self, finished: inference_pb2.GenerationFinished) -> None:
        self.finished = finished
        self.phase = Phase.DRAINING
        with self.watch:
            self.output.end()
        self.safety.close_output()

    def _failure(self, error: RequestError) -> list[gateway_pb2.ConverseResponse]:
        self.phase = Phase.FAILED
        return [self._fail(error)]

    # -- generation -------------------------------------------------------------------

    async def _start(self, link: GenerateLink, resend_full: bool) -> None:
        """Send the generation's start on ``link`` (generation_start.py says what it holds), its
        prompt perhaps prefilled on a prefill replica first."""
        placement, routing, generated = self.placement, self.ports.routing, self.output.generated
        with self.watch:
            conversation = self.prepared.conversation
            params = generation_params(self.create.sampling, self.ports.model,
                                       self.ports.settings.default_max_output_tokens,
                                       link.replica.status.max_output_tokens, len(self.oracle), len(conversation),
                                       len(generated))
            start = start_message(placement.request_id, self.caller.stream_id, self.caller.tenant, self.create,
                                  self.prepared, params, self.oracle, generated)
            sent = set_prompt(start, self.prepared, link, generated, resend_full)
            ids, cached = sent.ids, sent.cached
            # A STATE_LOST resend (perhaps a failed KV pull) prefills locally; a failover may go remote.
            source = None
            if not resend_full or placement.attempt > 0:
                source = routing.prefill_source(link.replica, sent.prompt_length, cached)
        self.remote_prefill = False
        if source is not None:
            full = conversation.prompt_ids() + generated
            handle = await routing.prefill(source, placement.request_id, full, params, start.cache_salt)
            if handle is not None:
                start.full.CopyFrom(inference_pb2.FullPrompt(token_ids=full))
                start.kv_handle, start.kv_source = handle, source.address
                self.remote_prefill = True
                ids, cached = full, len(full) - len(full) % link.replica.block_size
        with self.watch:
            full_send = start.WhichOneof("prompt") == "full"
            self.ports.counters.add("full_sends" if full_send else "append_sends", self.model)
            self.tokens_forwarded += len(ids)
            link.forget_held()
            placement.occupy(link.replica, max(0, len(ids) - cached) if full_send else len(ids))
        self.ports.counters.add("tokens_forwarded", self.model, len(ids))
        await link.start(start, self.inbox)

    def _feed(self, token_ids: Sequence[int], logprobs: Sequence[inference_pb2.TokenLogprobs] = ()) -> bool:
        """Parse new tokens; True when a stop string ended the output (``_stop_at_string`` then ends
        the generation)."""
        self.placement.prefilled()
        if self.output.done:
            return False
        with self.watch:
            return self.output.feed(token_ids, logprobs)

    async def _stop_at_string(self) -> None:
        """A stop string ended the output: cancel the generation, which finishes as STOP."""
        await self.placement.abandon()
        self._finish(inference_pb2.GenerationFinished(
            finish_reason=common_pb2.FINISH_REASON_STOP,
            usage=common_pb2.Usage(output_tokens=len(self.output.generated))))

    # -- results ----------------------------------------------------------------------

    def _complete(self, finished: inference_pb2.GenerationFinished | None) -> gateway_pb2.ConverseResponse:
        assert finished is not None
        ports, caller, parser, generated = self.ports, self.caller, self.output.parser, self.output.generated
        link = self.placement.link
        with self.watch:
            conversation = self.prepared.conversation
            output = parser.output_items()
            t0 = time.thread_time_ns()
            if parser.stopped_by_string:  # the turn is what the client got: cut before the stop string
                tokenized = conversation.append(output)
            else:
                tokenized = conversation.complete(output, generated, parser.raw_text)
            tokenize_us = self.prepared.tokenize_us + (time.thread_time_ns() - t0) // 1000
            if link is not None and not parser.stopped_by_string:
                link.done(self.placement.request_id)
                link.replica.observe(finished.usage, finished.timings)
                link.hold(finished.sequence_length, finished.sequence_hash)
            self.placement.vacate()
            if not ports.settings.baseline.stateless:
                ports.keep(self.id, conversation, caller.tenant.name, caller.stream_id, self.create.no_store)
                self.kept = conversation
            reason = parser.finish_reason(finished.finish_reason)
            caller.charge_output_tokens(finished.usage.output_tokens)
            ports.counters.add("responses", self.model)
            ports.counters.add("tokens_tokenized", self.model, tokenized)
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
            tokens_tokenized=self.prepared.tokens_tokenized + tokenized,
            bytes_received=self.prepared.bytes_received,
            tokens_forwarded=self.tokens_forwarded,
        )
        usage = common_pb2.Usage()
        usage.CopyFrom(finished.usage)
        usage.reasoning_tokens = min(usage.output_tokens or len(generated),
                                     reasoning_tokens(ports.model, generated, parser.thought))
        completed = gateway_pb2.ResponseCompleted(finish_reason=reason, usage=usage, timings=timings, output=output)
        parser.report_cut(completed)
        return self._event(completed=completed)

    def _event(self, **kwargs: object) -> gateway_pb2.ConverseResponse:
        return event(self.id, **kwargs)

    def _safety_event(self, stage: int, verdict: Verdict, us: int, checked: int) -> gateway_pb2.ConverseResponse:
        return safety_event(self.id, stage, verdict, us, checked)

    def _fail(self, error: RequestError) -> gateway_pb2.ConverseResponse:
        self.ports.counters.add("failed_responses", self.model)
        return failed(self.id, error)
