"""The TensorRT-LLM engine: the same ``Engine`` protocol over TensorRT-LLM's LLM API.

``tensorrt_llm`` is imported only when this engine is built, so the package (and its tests)
work on machines without it. What maps to what:

* ``generate`` → ``LLM.generate_async(prompt, SamplingParams, streaming=True)``; each streamed
  result carries the cumulative output, of which we forward the new tail.
* prefix caching → ``KvCacheConfig(enable_block_reuse=True, event_buffer_max_size=...)``;
  ``cache_events`` polls ``LLM.get_kv_cache_events`` and re-keys every stored block with
  ``loopwire.common.hashing`` (from its tokens and its parent), so routers predict hits with
  the same hashes for every engine.
* speculative decoding → ``NGramDecodingConfig`` (prompt lookup) at load time; the per-request
  switch cannot turn it off on this engine. Acceptance comes from ``return_perf_metrics``.
* replay oracle → a logits processor that masks every token but the recorded next one.
* retention hints → ``KvCacheRetentionConfig`` with a duration for the prompt's blocks.

The model definition (tokenizer, chat template, stops) is read from the same checkpoint
directory the LLM loads; the engine refuses to start when the checkpoint's vocabulary does not
cover the tokenizer's, and TensorRT-LLM's own tokenizer is not initialised (ids come in, ids go
out). Load figures come from ``LLM.get_stats`` (iteration stats with ``kvCacheStats``); what it
does not report is logged once and left out, never reported as zero.

KV export/import between replicas (Prefill/PullKv) goes through TensorRT-LLM's own
``DisaggregatedParams`` transport, not through this process; ``export_kv``/``import_kv``
raise ``NotImplementedError`` and the service answers UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hash
from loopwire.common.model_def import ModelDefinition
from loopwire.inference.config import EngineConfig, model_preset
from loopwire.inference.engine_core import EngineStats
from loopwire.inference.kv_cache import CacheEvent, CacheEventFeed, CacheEventKind
from loopwire.inference.sequence import (
    Finished,
    FinishReason,
    GenerationRequest,
    RequestOutput,
    Timings,
    Usage,
)

if TYPE_CHECKING:
    from loopwire.inference.engine import KvBlockData
    from loopwire.inference.server import EngineOptions

log = logging.getLogger("loopwire.inference.trtllm")

# How often KV cache events are polled from the executor (seconds).
_EVENT_POLL_S = 0.05


class OracleLogitsProcessor:
    """Forces the recorded tokens: every logit but the oracle's next token becomes -inf."""

    def __init__(self, oracle: list[int], prompt_len: int) -> None:
        self.oracle = oracle
        self.prompt_len = prompt_len

    def __call__(self, req_id: int, logits: Any, token_ids: list[list[int]], stream_ptr: Any, client_id: Any) -> None:
        import torch

        produced = len(token_ids[0]) - self.prompt_len
        if produced >= len(self.oracle):
            return
        mask = torch.full_like(logits, float("-inf"))
        mask[..., self.oracle[produced]] = 0
        logits.add_(mask)


class TrtLlmEngine:
    name = "trtllm"
    supports_kv_transfer = False

    def __init__(self, llm: Any, config: EngineConfig, definition: ModelDefinition) -> None:
        self.llm = llm
        self.config = config
        self.definition = definition
        self.model_name = f"{definition.name} ({definition.source})"
        self.vocab_size = definition.vocab_size
        self._kv_stats: dict[str, Any] = {}
        self._missing_stats_logged = False
        self._handles: dict[str, Any] = {}
        self._cache_feed = CacheEventFeed()
        self._trt_to_ours: dict[int, int] = {}
        self._poller: asyncio.Task[None] | None = None
        self._running = 0
        self._generated: list[tuple[float, int]] = []

    @classmethod
    def from_options(cls, options: EngineOptions, definition: ModelDefinition) -> TrtLlmEngine:
        from loopwire.inference.config import load_model_config
        from loopwire.inference.server import check_vocabulary

        check_vocabulary(load_model_config(definition.source).vocab_size, definition)
        from tensorrt_llm import LLM
        from tensorrt_llm.llmapi import KvCacheConfig, NGramDecodingConfig

        kv = KvCacheConfig(
            enable_block_reuse=options.prefix_cache,
            event_buffer_max_size=16384,
            tokens_per_block=options.block_size,
            **({"max_tokens": options.kv_blocks * options.block_size} if options.kv_blocks else {}),
        )
        spec = None
        if options.num_draft_tokens > 0:
            spec = NGramDecodingConfig(max_draft_len=options.num_draft_tokens, max_matching_ngram_size=3,
                                       is_keep_all=True, is_use_oldest=True, is_public_pool=False)
        llm = LLM(model=definition.source, kv_cache_config=kv, speculative_config=spec, skip_tokenizer_init=True,
                  max_num_tokens=options.max_batch_tokens or 8192)
        config = EngineConfig(
            model=model_preset(options.model_params), replica_id=options.replica_id,
            block_size=options.block_size, num_kv_blocks=options.kv_blocks or 1,
            max_output_tokens=options.max_output_tokens, num_draft_tokens=options.num_draft_tokens,
            prefix_cache=options.prefix_cache,
        )
        return cls(llm, config, definition)

    async def start(self) -> None:
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll_events())

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        self.llm.shutdown()

    async def generate(self, req: GenerationRequest) -> AsyncIterator[RequestOutput]:
        from tensorrt_llm import SamplingParams
        from tensorrt_llm.llmapi import KvCacheRetentionConfig

        await self.start()
        oracle = req.oracle
        params = SamplingParams(
            max_tokens=min(req.max_tokens, len(oracle)) if oracle else req.max_tokens,
            temperature=req.sampling.temperature or None,
            top_p=req.sampling.top_p if req.sampling.temperature > 0 else None,
            seed=req.sampling.seed,
            stop_token_ids=list(req.stop_token_ids),
            return_perf_metrics=True,
            logits_processor=OracleLogitsProcessor(oracle, len(req.prompt)) if oracle else None,
        )
        retention = None
        if req.retention_seconds > 0:
            from datetime import timedelta

            retention = KvCacheRetentionConfig(
                [KvCacheRetentionConfig.TokenRangeRetentionConfig(0, None, 100, timedelta(seconds=req.retention_seconds))],
                35)
        arrival = time.monotonic()
        first_token: float | None = None
        sent = 0
        self._running += 1
        result = self.llm.generate_async({"prompt_token_ids": req.prompt}, sampling_params=params, streaming=True,
                                         kv_cache_retention_config=retention)
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
                if not out.finished:
                    if new:
                        yield RequestOutput(req.request_id, new)
                    continue
                finished = True
                now = time.monotonic()
                reason = FinishReason.STOP if completion.finish_reason == "stop" else FinishReason.LENGTH
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
                                                                   req.prompt + list(completion.token_ids), []))
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
        now = time.monotonic()
        self._generated = [(t, n) for t, n in self._generated if t > now - 10.0]
        rate = sum(n for _, n in self._generated) / 10.0
        kv = self._kv_stats
        used, free, total = (int(kv.get(k, 0)) for k in ("usedNumBlocks", "freeNumBlocks", "maxNumBlocks"))
        return EngineStats(
            running=self._running, waiting=0, kv_blocks_used=used, kv_blocks_free=free, kv_blocks_total=total,
            block_size=self.config.block_size, recent_tokens_per_second=rate, prefill_tokens_per_second=0.0,
            decode_tokens_per_second=rate, prefix_cache_queried_tokens=0, prefix_cache_hit_tokens=0,
            num_preemptions=0, steps=0,
        )

    async def cache_events(self, include_existing: bool) -> AsyncIterator[list[CacheEvent]]:
        await self.start()
        initial = [CacheEvent(CacheEventKind.STORED, list(self._trt_to_ours.values()))] if include_existing else None
        async for events in self._cache_feed.subscribe(initial):
            yield events

    async def export_kv(self, block_hashes: list[int]) -> list[KvBlockData]:
        raise NotImplementedError("the trtllm engine moves KV with TensorRT-LLM's disaggregated transport")

    async def import_kv(self, blocks: list[KvBlockData]) -> int:
        raise NotImplementedError("the trtllm engine moves KV with TensorRT-LLM's disaggregated transport")

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
        """Keep the newest ``kvCacheStats`` of TensorRT-LLM's iteration stats (dicts or JSON strings)."""
        for item in reversed(stats or []):
            data = json.loads(item) if isinstance(item, str) else item
            kv = data.get("kvCacheStats") if isinstance(data, dict) else None
            if kv:
                self._kv_stats = kv
                return
        if stats and not self._missing_stats_logged:
            self._missing_stats_logged = True
            log.warning("TensorRT-LLM iteration stats carry no kvCacheStats: KV block counts are not reported")

    def translate_events(self, raw: list[dict]) -> list[CacheEvent]:
        """TensorRT-LLM event dicts → events keyed by loopwire's chained block hashes."""
        out: list[CacheEvent] = []
        for event in raw:
            data = event.get("data", {})
            kind = data.get("type")
            if kind == "stored":
                parent_trt = data.get("parent_hash")
                parent = self._trt_to_ours.get(parent_trt, ROOT_BLOCK_HASH) if parent_trt is not None else ROOT_BLOCK_HASH
                hashes = []
                for block in data.get("blocks", []):
                    tokens = [int(t["token_id"]) if isinstance(t, dict) else int(t) for t in block.get("tokens", [])]
                    ours = block_hash(parent, tokens)
                    self._trt_to_ours[block["block_hash"]] = ours
                    hashes.append(ours)
                    parent = ours
                if hashes:
                    out.append(CacheEvent(CacheEventKind.STORED, hashes))
            elif kind == "removed":
                gone = [self._trt_to_ours.pop(h) for h in data.get("block_hashes", []) if h in self._trt_to_ours]
                if gone:
                    out.append(CacheEvent(CacheEventKind.REMOVED, gone))
        return out
