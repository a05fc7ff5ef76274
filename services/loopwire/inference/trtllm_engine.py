"""The TensorRT-LLM engine: the same ``Engine`` protocol over TensorRT-LLM's LLM API.

``tensorrt_llm`` is imported only when this engine is built, so the package (and its tests)
work on machines without it. What maps to what:

* ``generate`` → ``LLM.generate_async(prompt, SamplingParams, streaming=True)``; each streamed
  result carries the cumulative output, of which we forward the new tail.
* cache salt (the tenant) → ``generate_async(cache_salt=...)`` where the release takes it, so
  tenants never share TensorRT-LLM's prefix cache; a release without it is warned about at start.
* prefix caching → ``KvCacheConfig(enable_block_reuse=True, event_buffer_max_size=...)``;
  ``cache_events`` polls ``LLM.get_kv_cache_events`` and re-keys every stored block with
  ``loopwire.common.hashing`` from the salted roots of those that submitted its first block
  (``trtllm_events``), so routers predict hits with the same hashes for every engine.
* host-memory KV tier → ``KvCacheConfig(host_cache_size=--host-kv-bytes, onboard_blocks=True,
  secondary_offload_min_priority=1)``: every evicted block a retention priority ranked above
  the lowest goes to the host tier, as on the reference engine (TensorRT-LLM's default, 30,
  would drop those ranked 0-29); a warm-up's own scratch block, ranked 0, is dropped.
* pause/resume hints → warm-up requests (``trtllm_kv_hints``): a resume hint, or a pause's
  expected end less the copy's time, submits the session's cached prefix as a one-token
  request that reuses (so onloads) its host-tier blocks and keeps them at the pause's priority
  (``KvCacheRetentionConfig``) for 30 s, or until the pause runs out when it came early; its
  output goes to no client. A pause is remembered only: nothing cached can be demoted or
  re-ranked after the fact.
* speculative decoding, chosen by ``--drafter`` at load time: ``NGramDecodingConfig`` (prompt
  lookup; also what ``suffix`` maps to, TensorRT-LLM has no cross-session suffix drafter),
  ``DraftTargetDecodingConfig`` (``draft_target``) or ``EagleDecodingConfig`` (``eagle3``), the
  latter two with ``--draft-model``. The per-request switch cannot turn it off on this engine.
  Acceptance comes from the request's perf metrics (``return_perf_metrics``).
* replay oracle → a logits processor that masks every token but the recorded next one.
* constraint → ``SamplingParams(guided_decoding=GuidedDecodingParams(grammar|json|regex))`` with
  the LLM built with ``guided_decoding_backend="llguidance"`` (a Lark grammar is llguidance's).
* retention → ``KvCacheRetentionConfig``: a request's ``RetentionPolicy`` token ranges and
  decode priority one to one; a retention hint as priority 100 with its duration.
* roles → ``DisaggregatedParams``: a prefill-only request runs ``request_type="context_only"``
  and hands back the returned params (``opaque_state`` kept as bytes) as ``disagg_state``; a
  request carrying ``disagg_state`` runs ``"generation_only"`` with them (``ctx_request_id``,
  ``first_gen_tokens``). The KV itself moves over TensorRT-LLM's cache transceiver.
* log-probabilities → ``SamplingParams(logprobs=k)`` (at least 1: older releases read 0 as
  off); each streamed ``CompletionOutput.logprobs`` entry (a dict token id -> ``Logprob``, or a
  bare float) becomes the token's ``TokenLogprobs``, its candidates sorted most likely first.
  TensorRT-LLM computes them from the logits it samples from (its own definition; the
  reference engine's are the raw ``log_softmax``).
* finish reasons one to one: stop, length, cancelled, timeout; a finished output without a
  reason is NOT_FINISHED, never "length".

The model definition (tokenizer, chat template, stops) is read from the same checkpoint
directory the LLM loads; the engine refuses to start when the checkpoint's vocabulary does not
cover the tokenizer's, and TensorRT-LLM's own tokenizer is not initialised (ids come in, ids go
out). Load figures come from ``LLM.get_stats`` (iteration stats with ``kvCacheStats``); what it
does not report is logged once and left out, never reported as zero.

KV export/import between replicas (Prefill/PullKv) goes through TensorRT-LLM's own ``DisaggregatedParams``
transport, not this process: ``export_kv``/``import_kv`` raise ``NotImplementedError`` (UNIMPLEMENTED).

Every TensorRT-LLM name used is listed in ``API_NAMES`` / ``API_KWARGS`` (checked against the installed
package by a GPU-marked test); ``load_api`` is the only import. A request's parameters: ``trtllm_requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from loopwire.common.model_def import ModelDefinition, check_vocabulary
from loopwire.inference.config import EngineConfig, model_preset
from loopwire.inference.cost_model import kv_bytes_per_token, slowest_host_link_bytes_per_s
from loopwire.inference.engine_core import EngineStats
from loopwire.inference.kv_cache import CacheEvent, CacheEventFeed, CacheEventKind
from loopwire.inference.kv_host_tier import MIN_PRIORITY
from loopwire.inference.sequence import (
    Finished,
    FinishReason,
    GenerationRequest,
    RequestOutput,
    Timings,
    Usage,
)
from loopwire.inference.trtllm_events import TrtEventKeys
from loopwire.inference.trtllm_kv_hints import StoredBlocks, TrtPauseHints
from loopwire.inference.trtllm_requests import (
    OracleLogitsProcessor,
    encode_disagg_state,
    generation_params,
    guided_decoding,
    output_logprobs,
    retention_config,
    speculative_config,
    warm_up_retention,
)

if TYPE_CHECKING:
    from loopwire.inference.config import ModelConfig
    from loopwire.inference.engine import KvBlockData, KvHint
    from loopwire.inference.server import EngineOptions

log = logging.getLogger("loopwire.inference.trtllm")

# How often KV cache events are polled from the executor (seconds).
_EVENT_POLL_S = 0.05
_RATE_WINDOW_S = 10.0
# Blocks assumed on the device before TensorRT-LLM reports its count (bounds the stored-block map).
_DEVICE_BLOCKS_UNTIL_REPORTED = 65536

# Module -> names this engine imports from it.
API_NAMES = {
    "tensorrt_llm": ["LLM", "SamplingParams"],
    "tensorrt_llm.llmapi": ["KvCacheConfig", "KvCacheRetentionConfig", "DisaggregatedParams", "NGramDecodingConfig",
                            "DraftTargetDecodingConfig", "EagleDecodingConfig", "GuidedDecodingParams"],
}
# Name -> keyword arguments this engine passes to it.
API_KWARGS = {
    "KvCacheConfig": ["enable_block_reuse", "event_buffer_max_size", "tokens_per_block", "max_tokens", "host_cache_size",
                      "onboard_blocks", "secondary_offload_min_priority"],
    "DisaggregatedParams": ["request_type", "first_gen_tokens", "ctx_request_id", "opaque_state", "draft_tokens"],
    "NGramDecodingConfig": ["max_draft_len", "max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"],
    "DraftTargetDecodingConfig": ["max_draft_len"],
    "EagleDecodingConfig": ["max_draft_len", "eagle3_one_model"],
    "SamplingParams": ["max_tokens", "temperature", "top_p", "seed", "stop_token_ids", "return_perf_metrics",
                       "logits_processor", "guided_decoding", "logprobs", "end_id"],
    "GuidedDecodingParams": ["grammar", "json", "regex"],
    "LLM": ["model", "kv_cache_config", "speculative_config", "skip_tokenizer_init", "max_num_tokens",
            "guided_decoding_backend"],
}
# TensorRT-LLM's CompletionOutput.finish_reason -> ours.
FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "cancelled": FinishReason.CANCELLED,
    "timeout": FinishReason.TIMEOUT,
}


def load_api() -> SimpleNamespace:
    """The TensorRT-LLM names this engine uses (the only import of the package)."""
    import importlib

    return SimpleNamespace(**{name: getattr(importlib.import_module(module), name)
                              for module, names in API_NAMES.items() for name in names})


class TrtLlmEngine:
    name = "trtllm"
    supports_kv_transfer = False
    supports_constraints = True

    def __init__(self, llm: Any, config: EngineConfig, definition: ModelDefinition, api: Any = None,
                 kv_block_bytes: int = 0) -> None:
        self.llm = llm
        self._api = api
        self.config = config
        self.definition = definition
        self.model_name = f"{definition.name} ({definition.source})"
        self.vocab_size = definition.vocab_size
        self._kv_stats: dict[str, Any] = {}
        self._missing_stats_logged = False
        self._handles: dict[str, Any] = {}
        self._cache_feed = CacheEventFeed()
        self._poller: asyncio.Task[None] | None = None
        self._running = 0
        self._waiting = 0
        self._running_reported = 0
        self._generated: list[tuple[float, int]] = []
        # (time, context tokens, generated tokens) per iteration, from the iteration stats.
        self._iterations: deque[tuple[float, int, int]] = deque()
        self._iterations_seen = False
        # The stored-block map holds what TensorRT-LLM can: its device blocks (configured, else
        # reported) and the host tier's.
        self._device_blocks = config.num_kv_blocks if config.num_kv_blocks > 1 else 0
        self._host_blocks = config.host_kv_bytes // kv_block_bytes if kv_block_bytes else 0
        # A warm-up's lead is priced over the slowest host link: started early it costs little, late a stall.
        self._hints = TrtPauseHints(StoredBlocks(self._block_capacity()), self._warm_up,
                                    kv_block_bytes / slowest_host_link_bytes_per_s())
        self._events = TrtEventKeys(self._hints)
        self._takes_salt = _takes_cache_salt(llm)
        if not self._takes_salt:
            log.warning("this TensorRT-LLM release's generate_async takes no cache_salt: tenants share its prefix "
                        "cache (a timing side channel between them)")
        self._pause_timer: asyncio.TimerHandle | None = None
        self._warm_ups: set[asyncio.Task[None]] = set()

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = load_api()
        return self._api

    @classmethod
    def from_options(cls, options: EngineOptions, definition: ModelDefinition) -> TrtLlmEngine:
        from loopwire.inference.config import load_model_config

        model = load_model_config(definition.source)
        check_vocabulary(model.vocab_size, definition)
        return cls.create(options, definition, load_api(), model)

    @classmethod
    def create(cls, options: EngineOptions, definition: ModelDefinition, api: Any,
               model: ModelConfig | None = None) -> TrtLlmEngine:
        """Translate the options into TensorRT-LLM's configs and start its ``LLM``."""
        host_tier = {"host_cache_size": options.host_kv_bytes, "onboard_blocks": True,
                     "secondary_offload_min_priority": MIN_PRIORITY + 1}
        kv = api.KvCacheConfig(
            enable_block_reuse=not options.baseline.no_prefix_cache,
            event_buffer_max_size=16384,
            tokens_per_block=options.block_size,
            **({"max_tokens": options.kv_blocks * options.block_size} if options.kv_blocks else {}),
            **(host_tier if options.host_kv_bytes else {}),
        )
        spec = speculative_config(api, options.drafter, options.num_draft_tokens, options.draft_model)
        llm = api.LLM(model=definition.source, kv_cache_config=kv, speculative_config=spec, skip_tokenizer_init=True,
                      max_num_tokens=options.max_batch_tokens or 8192, guided_decoding_backend="llguidance")
        config = EngineConfig(
            model=model_preset(options.model_params), replica_id=options.replica_id,
            block_size=options.block_size, num_kv_blocks=options.kv_blocks or 1,
            max_output_tokens=options.max_output_tokens, num_draft_tokens=options.num_draft_tokens,
            prefix_cache=not options.baseline.no_prefix_cache, drafter=options.drafter, host_kv_bytes=options.host_kv_bytes,
        )
        block_bytes = kv_bytes_per_token(model) * options.block_size if model is not None else 0
        return cls(llm, config, definition, api, block_bytes)

    async def start(self) -> None:
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll_events())

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        if self._pause_timer is not None:
            self._pause_timer.cancel()
        for task in list(self._warm_ups):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.llm.shutdown()

    async def generate(self, req: GenerationRequest) -> AsyncIterator[RequestOutput]:
        api = self.api
        await self.start()
        oracle = req.oracle
        disagg = None
        if req.prefill_only:
            disagg = api.DisaggregatedParams(request_type="context_only")
        elif req.disagg_state:
            disagg = generation_params(api, req.disagg_state)
        params = api.SamplingParams(
            max_tokens=1 if req.prefill_only else min(req.max_tokens, len(oracle)) if oracle else req.max_tokens,
            temperature=req.sampling.temperature or None,
            top_p=req.sampling.top_p if req.sampling.temperature > 0 else None,
            seed=req.sampling.seed,
            stop_token_ids=list(req.stop_token_ids),
            # TensorRT-LLM runs without its tokenizer here, and reads the end id from it when none is given.
            end_id=req.stop_token_ids[0] if req.stop_token_ids else -1,
            return_perf_metrics=True,
            logits_processor=OracleLogitsProcessor(oracle, len(req.prompt)) if oracle else None,
            guided_decoding=guided_decoding(api, req.grammar) if req.grammar is not None and not oracle else None,
            logprobs=None if req.top_logprobs is None else max(1, req.top_logprobs),
        )
        retention = retention_config(api, req)
        arrival = time.monotonic()
        first_token: float | None = None
        sent = 0
        self._running += 1
        result = self._submit(req.prompt, req.cache_salt, sampling_params=params, streaming=True,
                              kv_cache_retention_config=retention, disaggregated_params=disagg)
        self._handles[req.request_id] = result
        finished = False
        try:
            async for out in result:
                completion = out.outputs[0]
                new = list(completion.token_ids[sent:])
                sent += len(new)
                if new and first_token is None:
                    first_token = time.monotonic()
                self._generated.append((time.monotonic(), len(new)))
                logprobs = (None if req.top_logprobs is None else
                            output_logprobs(completion, sent - len(new), new, req.top_logprobs))
                if not out.finished:
                    if new:
                        yield RequestOutput(req.request_id, new, logprobs=logprobs)
                    continue
                finished = True
                now = time.monotonic()
                reason = FINISH_REASONS.get(completion.finish_reason, FinishReason.NOT_FINISHED)
                state = b""
                if req.prefill_only and reason in (FinishReason.STOP, FinishReason.LENGTH):
                    reason = FinishReason.PREFILLED
                    state = encode_disagg_state(getattr(completion, "disaggregated_params", None))
                usage = Usage(input_tokens=len(req.prompt), output_tokens=sent,
                              cached_input_tokens=int(getattr(out, "cached_tokens", 0) or 0))
                metrics = getattr(completion, "request_perf_metrics", None)
                spec = getattr(metrics, "speculative_decoding", None)
                if spec is not None:
                    usage.draft_tokens_proposed = int(spec.total_draft_tokens)
                    usage.draft_tokens_accepted = int(spec.total_accepted_draft_tokens)
                    usage.verification_steps = max(1, sent - usage.draft_tokens_accepted)
                ft = first_token or now
                timings = Timings(ttft_us=int((ft - arrival) * 1e6), decode_us=int((now - ft) * 1e6))
                yield RequestOutput(req.request_id, new, Finished(reason, usage, timings,
                                                                   req.prompt + list(completion.token_ids), [], state),
                                    logprobs=logprobs)
        finally:
            self._running -= 1
            self._handles.pop(req.request_id, None)
            if not finished:
                result.abort()

    async def cancel(self, request_id: str) -> None:
        handle = self._handles.get(request_id)
        if handle is not None:
            handle.abort()

    def stats(self) -> EngineStats:
        """Queues and rates from TensorRT-LLM's iteration stats when it reports them (context
        and generation tokens per iteration), else the streamed tokens seen here."""
        now = time.monotonic()
        self._generated = [(t, n) for t, n in self._generated if t > now - _RATE_WINDOW_S]
        while self._iterations and self._iterations[0][0] < now - _RATE_WINDOW_S:
            self._iterations.popleft()
        if self._iterations_seen:
            prefill = sum(c for _, c, _ in self._iterations) / _RATE_WINDOW_S
            decode = sum(g for _, _, g in self._iterations) / _RATE_WINDOW_S
            running, waiting = self._running_reported, self._waiting
        else:
            prefill, decode = 0.0, sum(n for _, n in self._generated) / _RATE_WINDOW_S
            running, waiting = self._running, 0
        kv = self._kv_stats
        used, free, total = (int(kv.get(k, 0)) for k in ("usedNumBlocks", "freeNumBlocks", "maxNumBlocks"))
        return EngineStats(
            running=running, waiting=waiting, kv_blocks_used=used, kv_blocks_free=free, kv_blocks_total=total,
            kv_host_blocks_used=0, kv_host_blocks_total=0,  # TensorRT-LLM's stats carry no host-tier counts
            block_size=self.config.block_size, recent_tokens_per_second=prefill + decode,
            prefill_tokens_per_second=prefill, decode_tokens_per_second=decode, prefix_cache_queried_tokens=0,
            prefix_cache_hit_tokens=0, prefix_cache_host_hit_tokens=0, num_preemptions=0, steps=0,
        )

    async def cache_events(self, include_existing: bool) -> AsyncIterator[list[CacheEvent]]:
        await self.start()
        initial = [CacheEvent(CacheEventKind.STORED, self._events.cached())] if include_existing else None
        async for events in self._cache_feed.subscribe(initial):
            yield events

    async def export_kv(self, block_hashes: list[int]) -> list[KvBlockData]:
        raise NotImplementedError("the trtllm engine moves KV with TensorRT-LLM's disaggregated transport")

    async def import_kv(self, blocks: list[KvBlockData]) -> int:
        raise NotImplementedError("the trtllm engine moves KV with TensorRT-LLM's disaggregated transport")

    async def end_stream(self, park_key: str) -> None:
        """Nothing is parked: TensorRT-LLM's own block reuse matches each prompt."""

    async def hold_prefix(self, key: str, block_hashes: list[int], seconds: float) -> int:
        """TensorRT-LLM sets retention per request (KvCacheRetentionConfig), not on blocks
        already cached: nothing is held after the fact (0 tells the gateway so)."""
        return 0

    async def hint_prefix(self, key: str, block_hashes: list[int], root: int, hint: KvHint,
                          cache_salt: str = "") -> int:
        """A pause is remembered (and warms the prefix up ahead of its expected end), a resume
        warms it up at once (``trtllm_kv_hints``), under the tenant's ``cache_salt``. Returns the
        blocks covered."""
        if hint.resume:
            n = self._hints.resume(key, block_hashes, root, hint.priority, cache_salt)
        else:
            n = self._hints.pause(key, block_hashes, root, time.monotonic(), hint.seconds, hint.expected_pause_s,
                                  hint.priority, cache_salt)
        self._arm_pause_timer()
        return n

    def hint_counters(self) -> tuple[int, int]:
        """(paused blocks TensorRT-LLM moved to the host tier while paused, host-tier blocks
        warm-ups covered)."""
        return self._hints.demoted_blocks, self._hints.onloaded_blocks

    def _warm_up(self, tokens: list[int], priority: int, seconds: float, salt: str) -> None:
        """Submit the prefix as a one-token request under the hinting tenant's ``salt`` (so it
        reuses only that tenant's blocks): its block reuse onloads the host-tier blocks, its
        retention keeps them at ``priority`` for ``seconds``. A repeat of the last token follows
        the prefix so every block of it is matched whole; that scratch block is ranked lowest
        (dropped, not offloaded). Submitted now, ahead of the session's next request; its output
        is read off in the background and goes nowhere."""
        stops = self.definition.stop_token_ids
        params = self.api.SamplingParams(max_tokens=1, end_id=stops[0] if stops else -1)
        try:
            result = self._submit(tokens + tokens[-1:], salt, sampling_params=params, streaming=True,
                                  kv_cache_retention_config=warm_up_retention(self.api, len(tokens), priority, seconds))
        except Exception:  # a hint is advice: the session's request runs without it
            log.warning("TensorRT-LLM refused a KV warm-up request", exc_info=True)
            return
        task = asyncio.get_running_loop().create_task(self._discard(result))
        self._warm_ups.add(task)
        task.add_done_callback(self._warm_ups.discard)

    def _submit(self, prompt: list[int], salt: str, **kwargs: Any) -> Any:
        """``LLM.generate_async`` under the tenant's salt where the release takes one; the salt
        is remembered for the prompt's first block, to re-key the blocks TensorRT-LLM stores."""
        self._events.salts.submitted(prompt[:self.config.block_size], salt)
        if self._takes_salt:
            kwargs["cache_salt"] = salt or None
        return self.llm.generate_async({"prompt_token_ids": prompt}, **kwargs)

    @staticmethod
    async def _discard(result: Any) -> None:
        """Wait for a warm-up's first output (its prefix is on the device), then let it go."""
        finished = False
        try:
            async for out in result:
                finished = bool(out.finished)
                break
        except Exception:
            log.warning("a KV warm-up request failed", exc_info=True)
        finally:
            if not finished:
                result.abort()

    def _arm_pause_timer(self) -> None:
        """One timer, for the earliest pause event (a warm-up ahead of its end, or its end)."""
        if self._pause_timer is not None:
            self._pause_timer.cancel()
            self._pause_timer = None
        when = self._hints.next_event()
        if when < math.inf:
            delay = max(0.0, when - time.monotonic())
            self._pause_timer = asyncio.get_running_loop().call_later(delay, self._run_pauses)

    def _run_pauses(self) -> None:
        self._pause_timer = None
        self._hints.run_due(time.monotonic())
        self._arm_pause_timer()

    def _block_capacity(self) -> int:
        return (self._device_blocks or _DEVICE_BLOCKS_UNTIL_REPORTED) + self._host_blocks

    # -- KV cache events --------------------------------------------------------------

    async def _poll_events(self) -> None:
        while True:
            raw = await asyncio.to_thread(self.llm.get_kv_cache_events, 0.2)
            events = self.translate_events(raw or [])
            if events:
                self._cache_feed.publish(events)
            self.read_iteration_stats(await asyncio.to_thread(self.llm.get_stats, 0.05))
            await asyncio.sleep(_EVENT_POLL_S)

    def read_iteration_stats(self, stats: list[Any]) -> None:
        """Keep the newest ``kvCacheStats``, the queue lengths and the tokens of every iteration
        from TensorRT-LLM's iteration stats (dicts or JSON strings)."""
        parsed = [json.loads(item) if isinstance(item, str) else item for item in stats or []]
        parsed = [d for d in parsed if isinstance(d, dict)]
        now = time.monotonic()
        for data in parsed:
            batching = data.get("inflightBatchingStats")
            if isinstance(batching, dict):
                self._iterations_seen = True
                gen = int(batching.get("numGenRequests", 0))  # one token each per iteration (more with drafts)
                self._iterations.append((now, int(batching.get("numCtxTokens", 0)), gen))
            if "numQueuedRequests" in data:
                self._waiting = int(data["numQueuedRequests"])
            if "numActiveRequests" in data:
                self._running_reported = int(data["numActiveRequests"])
        for data in reversed(parsed):
            kv = data.get("kvCacheStats")
            if kv:
                self._kv_stats = kv
                if int(kv.get("maxNumBlocks", 0)) > 0:
                    self._device_blocks = int(kv["maxNumBlocks"])
                    self._events.resize(self._block_capacity())
                return
        if stats and not self._missing_stats_logged:
            self._missing_stats_logged = True
            log.warning("TensorRT-LLM iteration stats carry no kvCacheStats: KV block counts are not reported")

    def translate_events(self, raw: list[dict]) -> list[CacheEvent]:
        """TensorRT-LLM event dicts → events keyed by loopwire's chained block hashes (``trtllm_events``)."""
        return self._events.translate(raw)


def _takes_cache_salt(llm: Any) -> bool:
    """Whether this release's ``generate_async`` takes ``cache_salt`` (recent ones do)."""
    try:
        return "cache_salt" in inspect.signature(llm.generate_async).parameters
    except (AttributeError, TypeError, ValueError):
        return False
