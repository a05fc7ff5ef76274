"""``InferenceService`` over any ``Engine``: per-session Generate streams (full and append
prompts, cancellation, coalesced token batches through ``outbox.py``), Prefill/PullKv for
disaggregation (``disaggregation.py``), GetStatus, HoldPrefix and WatchCache for routers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from loopwire.common import telemetry
from loopwire.common.errors import Code, RequestError, invalid
from loopwire.common.grammar import ConstraintError, grammar_text
from loopwire.common.hashing import block_hashes, salted_root
from loopwire.common.kv_hint_limits import MAX_RETENTION_SECONDS, hint_problem
from loopwire.common.model_def import ENGINE_KINDS
from loopwire.inference.constraint import Grammar, compiled, ll_tokenizer
from loopwire.inference.disaggregation import DisaggregationRpcs
from loopwire.inference.engine import Engine, KvHint
from loopwire.inference.kv_cache import CacheEventKind
from loopwire.inference.kv_pause_hints import PAUSE_PRIORITY
from loopwire.inference.outbox import COALESCE_MAX_TOKENS, COALESCE_WINDOW_S, Outbox
from loopwire.inference.sampling import SamplingSettings
from loopwire.inference.sequence import Finished, FinishReason, GenerationRequest
from loopwire.inference.validation import (
    MAX_HOLD_BLOCKS,
    HeldSequence,
    ResolvedPrompt,
    check_params,
    resolve_prompt,
)
from loopwire.v1 import common_pb2, inference_pb2, inference_pb2_grpc

log = logging.getLogger("loopwire.inference")

_FINISH = {
    FinishReason.STOP: common_pb2.FINISH_REASON_STOP,
    FinishReason.LENGTH: common_pb2.FINISH_REASON_LENGTH,
    FinishReason.CANCELLED: common_pb2.FINISH_REASON_CANCELLED,
    FinishReason.PREFILLED: common_pb2.FINISH_REASON_STOP,
    FinishReason.TIMEOUT: common_pb2.FINISH_REASON_ERROR,
    FinishReason.NOT_FINISHED: common_pb2.FINISH_REASON_ERROR,
    FinishReason.CONSTRAINT_FAILED: common_pb2.FINISH_REASON_ERROR,
}
_CACHE_EVENT = {
    CacheEventKind.STORED: inference_pb2.CACHE_EVENT_TYPE_STORED,
    CacheEventKind.REMOVED: inference_pb2.CACHE_EVENT_TYPE_REMOVED,
}
_ROLES = {
    "both": inference_pb2.ENGINE_ROLE_BOTH,
    "prefill": inference_pb2.ENGINE_ROLE_PREFILL,
    "decode": inference_pb2.ENGINE_ROLE_DECODE,
}
# A prefill still running this long after the last word to the client gets a progress event:
# a long prompt on a slow engine shows progress, a short one adds no messages.
PROGRESS_INTERVAL_S = 0.25
# Prompts (or appends) with more ids than this are validated and hashed in a worker thread: a
# 32k-id prompt would otherwise hold the event loop, and every stream on it, for milliseconds.
OFFLOAD_IDS = 4096


@dataclass
class _StreamState:
    outbox: Outbox = field(default_factory=Outbox)
    held: HeldSequence | None = None
    active: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    serial: int = 0


class InferenceServicer(DisaggregationRpcs, inference_pb2_grpc.InferenceServiceServicer):
    def __init__(self, engine: Engine, role: str = "both", service_token: str = "",
                 peers: frozenset[str] = frozenset(), progress_interval_s: float = PROGRESS_INTERVAL_S,
                 coalesce_window_s: float = COALESCE_WINDOW_S, coalesce_max_tokens: int = COALESCE_MAX_TOKENS) -> None:
        self.engine = engine
        self.progress_interval_s = progress_interval_s
        self.coalesce_window_s = coalesce_window_s
        self.coalesce_max_tokens = coalesce_max_tokens
        self.config = engine.config
        self.role = role
        self.service_token = service_token  # sent to peers this replica pulls KV from
        self.peers = peers  # the only addresses a kv_source may name (none: no KV is imported)
        self.vocab_size = engine.vocab_size
        self._stop_ids = tuple(engine.definition.stop_token_ids)
        self._model_info = inference_pb2.GetModelInfoResponse(model=engine.definition.to_proto(engine.name))
        self._handles = {}
        self._streams = 0

    # -- Generate ---------------------------------------------------------------------

    async def Generate(
        self, request_iterator: AsyncIterator[inference_pb2.GenerateRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inference_pb2.GenerateResponse]:
        self._streams += 1
        state = _StreamState(Outbox(self.coalesce_window_s, self.coalesce_max_tokens))
        prefix = f"s{self._streams}-{secrets.token_hex(3)}"
        reader = asyncio.create_task(self._read(request_iterator, state, prefix))
        try:
            while True:
                response = await state.outbox.take()
                if response is None:
                    break
                yield response
        finally:
            reader.cancel()
            tasks = list(state.active.values())
            for task in tasks:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            # After the generations' cancels, so nothing parks under the key once it is let go.
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.engine.end_stream(prefix)

    async def _read(
        self, requests: AsyncIterator[inference_pb2.GenerateRequest], state: _StreamState, prefix: str
    ) -> None:
        try:
            async for request in requests:
                action = request.WhichOneof("action")
                if action == "start":
                    await self._start(request.start, state, prefix)
                elif action == "cancel":
                    task = state.active.get(request.cancel.request_id)
                    if task is None:
                        state.outbox.put(_error(request.cancel.request_id, invalid(
                            "cancel.request_id", f"no running generation {request.cancel.request_id!r} on this stream")))
                    else:
                        await self.engine.cancel(f"{prefix}/{request.cancel.request_id}")
                else:
                    state.outbox.put(_error("", invalid("action", "set start or cancel")))
            if state.active:
                await asyncio.gather(*state.active.values(), return_exceptions=True)
        finally:
            state.outbox.close()

    async def _start(self, start: inference_pb2.GenerationStart, state: _StreamState, prefix: str) -> None:
        rid = start.request_id
        try:
            if not rid:
                raise invalid("start.request_id", "required")
            if rid in state.active:
                raise invalid("start.request_id", f"{rid!r} is already running on this stream")
            args = (start, state.held, self.vocab_size, self.config.block_size)
            if len(start.full.token_ids) + len(start.append.token_ids) > OFFLOAD_IDS:
                prompt = await asyncio.to_thread(resolve_prompt, *args)
            else:
                prompt = resolve_prompt(*args)
            check_params(start, prompt.length, self.config, self.vocab_size)
            if start.kv_handle and start.kv_source not in self.peers:
                raise RequestError(Code.ERROR_CODE_INVALID_ARGUMENT,
                                   f"start.kv_source: {start.kv_source!r} is not a configured peer of this replica "
                                   "(--peers): KV is imported only from replicas it trusts", "start.kv_source",
                                   reason=common_pb2.ERROR_REASON_KV_PULL_FAILED)
            grammar = self._grammar(start)
        except RequestError as e:
            state.outbox.put(_error(rid, e))
            return
        p = start.params
        req = GenerationRequest(
            request_id=f"{prefix}/{rid}",
            prompt=prompt.token_ids(),
            max_tokens=p.max_tokens,
            sampling=SamplingSettings(p.temperature, p.top_p or 1.0, p.seed),
            stop_token_ids=tuple(p.stop_token_ids) or self._stop_ids,
            speculative=p.speculative_decoding if p.HasField("speculative_decoding") else True,
            num_draft_tokens=p.num_draft_tokens,
            top_logprobs=p.top_logprobs if p.HasField("top_logprobs") else None,
            oracle=list(start.oracle_token_ids) or None,
            priority=start.priority,
            session_id=start.session_id,
            retention_seconds=float(start.retention_seconds),
            cache_salt=start.cache_salt,
            grammar=grammar,
            block_hashes=prompt.block_hashes,
            park_key=prefix,
            hand_over_prompt=True,
            draft_base=None if prompt.held is None else prompt.held.draft,
        )
        task = asyncio.create_task(self._generate(rid, req, start, prompt, state))
        state.active[rid] = task
        task.add_done_callback(lambda _t: state.active.pop(rid, None))

    def _grammar(self, start: inference_pb2.GenerationStart) -> Grammar | None:
        """The request's constraint compiled against this model's tokenizer (INVALID_ARGUMENT
        naming llguidance's reason when it does not compile)."""
        if not start.HasField("constraint"):
            return None
        if not self.engine.supports_constraints:
            raise RequestError(Code.ERROR_CODE_FAILED_PRECONDITION,
                               f"start.constraint: the {self.engine.name} engine does not constrain decoding",
                               "start.constraint")
        definition = self.engine.definition
        try:
            text = grammar_text(start.constraint)
            if not text:
                raise ConstraintError("set lark, json_schema or regex")
            tokenizer = ll_tokenizer(definition.tokenizer, (list(start.params.stop_token_ids) or self._stop_ids)[0])
            compiled(tokenizer, text)  # compiles (or refuses) it once; each sequence copies it
        except (ConstraintError, ValueError) as e:
            raise invalid("start.constraint", str(e)[:500]) from None
        kind = start.constraint.WhichOneof("grammar") or ""
        return Grammar(text, tokenizer, kind, getattr(start.constraint, kind),
                       tuple(start.constraint.generated_token_ids))

    async def _generate(
        self,
        rid: str,
        req: GenerationRequest,
        start: inference_pb2.GenerationStart,
        prompt: ResolvedPrompt,
        state: _StreamState,
    ) -> None:
        telemetry.bind_log_ids(request_id=rid, session_id=req.session_id)  # this generation's task
        model = self.engine.definition.name  # the short name: the label of its spans and metrics
        with telemetry.generation_span(model, rid, session_id=req.session_id,
                                       trace_context=start.trace_context) as span:
            try:
                if start.kv_handle:
                    await self._pull(start.kv_source, start.kv_handle)
                said = time.monotonic()
                async for out in self.engine.generate(req):
                    if out.prefilled and time.monotonic() - said >= self.progress_interval_s:
                        said = time.monotonic()
                        state.outbox.put(inference_pb2.GenerateResponse(
                            request_id=rid, prefill_progress=common_pb2.PrefillProgress(
                                processed_tokens=out.prefilled, total_tokens=prompt.length)))
                    if out.token_ids:
                        span.first_chunk()
                    state.outbox.tokens(rid, out.token_ids, out.logprobs)
                    if out.finished is not None and out.finished.reason is FinishReason.CONSTRAINT_FAILED:
                        raise RequestError(Code.ERROR_CODE_INVALID_ARGUMENT,
                                           f"start.constraint: the grammar cannot be satisfied: {out.finished.error}",
                                           "start.constraint")
                    if out.finished is not None:
                        response = self._finished(rid, req, out.finished, prompt, state)
                        fin = response.finished
                        span.set_usage(fin.usage)
                        span.finish(fin.finish_reason)
                        telemetry.metrics().record_generation(fin.usage, fin.timings, model, fin.finish_reason)
                        state.outbox.put(response)
            except RequestError as e:
                state.outbox.put(_error(rid, e))
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure ends this generation with an event, never silence
                log.exception("generation %s failed", req.request_id)
                state.outbox.put(_error(rid, RequestError(Code.ERROR_CODE_INTERNAL,
                                                          f"{type(e).__name__}: {e}"[:500], retryable=True)))
            finally:
                telemetry.metrics().set_queue_depth(self.engine.stats().waiting, self.config.replica_id)

    def _finished(
        self,
        rid: str,
        req: GenerationRequest,
        fin: Finished,
        prompt: ResolvedPrompt,
        state: _StreamState,
    ) -> inference_pb2.GenerateResponse:
        seq_hash = prompt.seq_hash.copy().extend(fin.token_ids[prompt.length :])
        if fin.reason is not FinishReason.CANCELLED:
            state.held = HeldSequence(fin.token_ids, len(fin.token_ids), seq_hash, req.cache_salt,
                                      self._held_hashes(fin, req.cache_salt), draft=fin.draft)
        u, t = fin.usage, fin.timings
        return inference_pb2.GenerateResponse(request_id=rid, finished=inference_pb2.GenerationFinished(
            finish_reason=_FINISH[fin.reason],
            usage=common_pb2.Usage(
                input_tokens=u.input_tokens,
                cached_input_tokens=u.cached_input_tokens,
                output_tokens=u.output_tokens,
                draft_tokens_proposed=u.draft_tokens_proposed,
                draft_tokens_accepted=u.draft_tokens_accepted,
                verification_steps=u.verification_steps,
            ),
            timings=common_pb2.Timings(
                queue_us=t.queue_us, prefill_us=t.prefill_us, ttft_us=t.ttft_us, decode_us=t.decode_us,
                total_us=t.ttft_us + t.decode_us,
            ),
            sequence_length=len(fin.token_ids),
            sequence_hash=seq_hash.value,
            replica_id=self.config.replica_id,
        ))

    def _held_hashes(self, fin: Finished, cache_salt: str) -> list[int]:
        """Block hashes of every full block of the finished sequence: the engine's committed
        ones (all but at most the last block) extended, so the next append hashes only its own."""
        bs = self.config.block_size
        hashes = fin.block_hashes  # the engine's list, given away with the result
        done = len(hashes) * bs
        parent = hashes[-1] if hashes else salted_root(cache_salt)
        hashes += block_hashes(fin.token_ids[done : len(fin.token_ids) // bs * bs], bs, parent)
        return hashes

    # -- status -----------------------------------------------------------------------

    async def GetStatus(
        self, request: inference_pb2.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> inference_pb2.GetStatusResponse:
        s = self.engine.stats()
        demoted, onloaded = self.engine.hint_counters()
        return inference_pb2.GetStatusResponse(
            replica_id=self.config.replica_id,
            engine=self.engine.name,
            engine_kind=ENGINE_KINDS.get(self.engine.name, common_pb2.ENGINE_KIND_UNSPECIFIED),
            model=self.engine.model_name,
            role=_ROLES.get(self.role, inference_pb2.ENGINE_ROLE_BOTH),
            running=s.running,
            waiting=s.waiting,
            kv_blocks_used=s.kv_blocks_used,
            kv_blocks_free=s.kv_blocks_free,
            kv_blocks_total=s.kv_blocks_total,
            block_size=s.block_size,
            recent_tokens_per_second=s.recent_tokens_per_second,
            prefill_tokens_per_second=s.prefill_tokens_per_second,
            decode_tokens_per_second=s.decode_tokens_per_second,
            prefix_cache_queried_tokens=s.prefix_cache_queried_tokens,
            prefix_cache_hit_tokens=s.prefix_cache_hit_tokens,
            vocab_size=self.vocab_size,
            max_output_tokens=self.config.max_output_tokens,
            tokenizer_digest=self._model_info.model.tokenizer_digest,
            kv_host_blocks_used=s.kv_host_blocks_used,
            kv_host_blocks_total=s.kv_host_blocks_total,
            prefix_cache_host_hit_tokens=s.prefix_cache_host_hit_tokens,
            num_preemptions=s.num_preemptions,
            kv_hint_demoted_blocks=demoted,
            kv_hint_onloaded_blocks=onloaded,
        )

    async def GetModelInfo(
        self, request: inference_pb2.GetModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> inference_pb2.GetModelInfoResponse:
        return self._model_info

    async def HoldPrefix(
        self, request: inference_pb2.HoldPrefixRequest, context: grpc.aio.ServicerContext
    ) -> inference_pb2.HoldPrefixResponse:
        """Pin (or let go of) a tenant's cached prefix; the hashes carry the tenant's salt, so
        nobody can pin another tenant's blocks, and a hold's name is scoped by the tenant."""
        problem = ""
        if not request.hold_id or len(request.hold_id) > 256:
            problem = "hold_id: required, at most 256 characters"
        elif len(request.cache_salt) > 256:
            problem = "cache_salt: at most 256 characters"
        elif len(request.block_hashes) > MAX_HOLD_BLOCKS:
            problem = f"block_hashes: at most {MAX_HOLD_BLOCKS}"
        elif request.retention_seconds > MAX_RETENTION_SECONDS:
            problem = f"retention_seconds: at most {MAX_RETENTION_SECONDS}"
        elif request.HasField("hint") and (hint_fault := hint_problem(request.hint, request.retention_seconds)):
            problem = ": ".join(hint_fault)
        if problem:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        hint_key = f"hint/{request.cache_salt}/{request.hold_id}"
        if request.HasField("hint"):
            hint = request.hint
            n = await self.engine.hint_prefix(
                hint_key, list(request.block_hashes), salted_root(request.cache_salt),
                KvHint(resume=hint.phase == common_pb2.KV_HINT_PHASE_RESUME,
                       seconds=float(request.retention_seconds), expected_pause_s=hint.expected_pause_ms / 1000,
                       priority=hint.priority or PAUSE_PRIORITY), cache_salt=request.cache_salt)
            return inference_pb2.HoldPrefixResponse(hinted_blocks=n)
        if request.retention_seconds == 0:  # a release (a session cancelled) also ends its pause, if any:
            # an empty pause replaces it, so its blocks are ordinary again instead of kept to the ceiling
            await self.engine.hint_prefix(hint_key, [], salted_root(request.cache_salt), KvHint(resume=False, seconds=0.0),
                                          cache_salt=request.cache_salt)
        key = f"hold/{request.cache_salt}/{request.hold_id}"
        held = await self.engine.hold_prefix(key, list(request.block_hashes), float(request.retention_seconds))
        return inference_pb2.HoldPrefixResponse(held_blocks=held)

    async def WatchCache(
        self, request: inference_pb2.WatchCacheRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inference_pb2.WatchCacheResponse]:
        async for events in self.engine.cache_events(request.include_existing):
            yield inference_pb2.WatchCacheResponse(
                replica_id=self.config.replica_id,
                block_size=self.config.block_size,
                events=[inference_pb2.CacheEvent(type=_CACHE_EVENT[e.kind], block_hashes=e.block_hashes)
                        for e in events],
            )


def _error(request_id: str, e: RequestError) -> inference_pb2.GenerateResponse:
    return inference_pb2.GenerateResponse(request_id=request_id, error=e.to_proto())
