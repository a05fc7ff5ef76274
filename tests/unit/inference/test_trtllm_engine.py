"""The TensorRT-LLM engine's translation, on CPU: a stand-in ``LLM`` and config classes record what
the engine passes (roles through DisaggregatedParams, host offload, retention, speculative
configs, finish reasons, acceptance from perf metrics). A GPU-marked test checks every name and
keyword the engine uses against the installed package."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from loopwire.common.model_def import dummy_definition
from loopwire.inference.sequence import FinishReason, GenerationRequest, RetentionPolicy, TokenRangeRetention
from loopwire.inference.server import EngineOptions
from loopwire.inference.trtllm_engine import API_KWARGS, API_NAMES, TrtLlmEngine
from loopwire.inference.trtllm_requests import DRAFT_MODEL_KWARGS


class Recorded:
    """A config class stand-in: keeps its arguments."""

    model_fields: dict[str, Any] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


def _config_class(name: str, fields: list[str]) -> type:
    return type(name, (Recorded,), {"model_fields": dict.fromkeys(fields)})


class Retention(Recorded):
    TokenRangeRetentionConfig = _config_class("TokenRangeRetentionConfig", [])


@dataclass
class Completion:
    token_ids: list[int]
    finish_reason: str | None = None
    request_perf_metrics: Any = None
    disaggregated_params: Any = None


@dataclass
class Output:
    outputs: list[Completion]
    finished: bool


@dataclass
class Result:
    chunks: list[Output]
    aborted: bool = False

    def __aiter__(self):  # type: ignore[no-untyped-def]
        return self._gen()

    async def _gen(self):  # type: ignore[no-untyped-def]
        for c in self.chunks:
            yield c

    def abort(self) -> None:
        self.aborted = True


@dataclass
class FakeLLM:
    """Records every call; answers each request with the scripted completion."""

    script: list[Completion] = field(default_factory=list)
    calls: list[tuple[list[int], dict[str, Any]]] = field(default_factory=list)
    init: dict[str, Any] = field(default_factory=dict)

    def generate_async(self, inputs: dict, **kwargs: Any) -> Result:
        self.calls.append((inputs["prompt_token_ids"], kwargs))
        done = self.script.pop(0)
        half = Completion(done.token_ids[:1])
        return Result([Output([half], False), Output([done], True)])

    def get_kv_cache_events(self, timeout: float) -> list:
        return []

    def get_stats(self, timeout: float) -> list:
        return []

    def shutdown(self) -> None:
        pass


def fake_api(llm: FakeLLM) -> SimpleNamespace:
    def make_llm(**kwargs: Any) -> FakeLLM:
        llm.init = kwargs
        return llm

    return SimpleNamespace(
        LLM=make_llm, SamplingParams=_config_class("SamplingParams", []),
        KvCacheConfig=_config_class("KvCacheConfig", []), KvCacheRetentionConfig=Retention,
        DisaggregatedParams=_config_class("DisaggregatedParams", []),
        NGramDecodingConfig=_config_class("NGramDecodingConfig", []),
        DraftTargetDecodingConfig=_config_class("DraftTargetDecodingConfig", ["max_draft_len", "speculative_model"]),
        EagleDecodingConfig=_config_class("EagleDecodingConfig", ["max_draft_len", "speculative_model_dir"]),
    )


def engine(llm: FakeLLM, **options: Any) -> TrtLlmEngine:
    return TrtLlmEngine.create(EngineOptions(engine="trtllm", model="/ckpt", **options), dummy_definition(),
                               fake_api(llm))


async def finish(e: TrtLlmEngine, req: GenerationRequest):  # type: ignore[no-untyped-def]
    tokens, fin = [], None
    async for out in e.generate(req):
        tokens += out.token_ids
        fin = out.finished or fin
    await e.close()
    return tokens, fin


def test_load_time_configs_host_tier_and_speculation_by_drafter() -> None:
    llm = FakeLLM()
    engine(llm, host_kv_bytes=8 << 30, kv_blocks=100, block_size=32, drafter="prompt_lookup", num_draft_tokens=5)
    kv = llm.init["kv_cache_config"].kwargs
    assert kv["host_cache_size"] == 8 << 30 and kv["max_tokens"] == 3200 and kv["tokens_per_block"] == 32
    assert kv["onboard_blocks"] is True and kv["secondary_offload_min_priority"] == 1  # evicted blocks: to the host
    spec = llm.init["speculative_config"]
    assert type(spec).__name__ == "NGramDecodingConfig" and spec.kwargs["max_draft_len"] == 5
    assert llm.init["skip_tokenizer_init"] is True
    engine(llm, drafter="draft_target", draft_model="/draft", num_draft_tokens=4)
    spec = llm.init["speculative_config"]
    assert type(spec).__name__ == "DraftTargetDecodingConfig"
    assert spec.kwargs == {"max_draft_len": 4, "speculative_model": "/draft"}
    engine(llm, drafter="eagle3", draft_model="/eagle", num_draft_tokens=3)
    spec = llm.init["speculative_config"]
    assert type(spec).__name__ == "EagleDecodingConfig"  # the older keyword when that is what the class has
    assert spec.kwargs == {"max_draft_len": 3, "speculative_model_dir": "/eagle", "eagle3_one_model": True}
    engine(llm, num_draft_tokens=0)
    assert llm.init["speculative_config"] is None and "host_cache_size" not in llm.init["kv_cache_config"].kwargs
    with pytest.raises(ValueError, match="draft-model"):
        engine(llm, drafter="eagle3")


async def test_prefill_and_decode_roles_carry_disaggregated_params_as_bytes() -> None:
    opaque = bytes(range(256))  # not text: must survive as bytes
    ctx_params = SimpleNamespace(request_type="context_only", ctx_request_id=4242, first_gen_tokens=[17],
                                 opaque_state=opaque, draft_tokens=None)
    llm = FakeLLM([Completion([17], "length", disaggregated_params=ctx_params)])
    _, fin = await finish(engine(llm), GenerationRequest("p", [1, 2, 3], 1, prefill_only=True))
    sent = llm.calls[0][1]
    assert sent["disaggregated_params"].kwargs == {"request_type": "context_only"}
    assert sent["sampling_params"].kwargs["max_tokens"] == 1
    assert fin.reason is FinishReason.PREFILLED and fin.disagg_state
    llm2 = FakeLLM([Completion([17, 5, 6], "stop")])
    tokens, fin2 = await finish(engine(llm2), GenerationRequest("d", [1, 2, 3], 8, disagg_state=fin.disagg_state))
    gen = llm2.calls[0][1]["disaggregated_params"].kwargs
    assert gen["request_type"] == "generation_only" and gen["ctx_request_id"] == 4242
    assert gen["opaque_state"] == opaque and gen["first_gen_tokens"] == [17]
    assert tokens == [17, 5, 6] and fin2.reason is FinishReason.STOP
    llm3 = FakeLLM([Completion([9], "stop")])
    await finish(engine(llm3), GenerationRequest("both", [1], 4))
    assert llm3.calls[0][1]["disaggregated_params"] is None  # role both: neither half


async def test_retention_policy_maps_one_to_one() -> None:
    llm = FakeLLM([Completion([1], "stop"), Completion([1], "stop")])
    e = engine(llm)
    policy = RetentionPolicy((TokenRangeRetention(0, 64, 90), TokenRangeRetention(64, None, 70, duration_s=30.0)),
                             decode_priority=20, decode_duration_s=5.0)
    await finish(e, GenerationRequest("r", [1, 2], 1, retention=policy))
    cfg = llm.calls[0][1]["kv_cache_retention_config"]
    assert [r.args for r in cfg.args[0]] == [(0, 64, 90, None), (64, None, 70, timedelta(seconds=30))]
    assert cfg.args[1:] == (20, timedelta(seconds=5))
    await finish(engine(llm), GenerationRequest("h", [1, 2], 1, retention_seconds=12))
    hint = llm.calls[1][1]["kv_cache_retention_config"]
    assert [r.args for r in hint.args[0]] == [(0, None, 100, timedelta(seconds=12))]


@pytest.mark.parametrize(("theirs", "ours"), [
    ("stop", FinishReason.STOP), ("length", FinishReason.LENGTH), ("cancelled", FinishReason.CANCELLED),
    ("timeout", FinishReason.TIMEOUT), (None, FinishReason.NOT_FINISHED)])
async def test_finish_reasons_map_one_to_one(theirs: str | None, ours: FinishReason) -> None:
    _, fin = await finish(engine(FakeLLM([Completion([3, 4], theirs)])), GenerationRequest("f", [1], 4))
    assert fin.reason is ours


async def test_acceptance_comes_from_the_request_perf_metrics() -> None:
    metrics = SimpleNamespace(speculative_decoding=SimpleNamespace(total_draft_tokens=12, total_accepted_draft_tokens=7))
    llm = FakeLLM([Completion(list(range(20)), "stop", request_perf_metrics=metrics)])
    _, fin = await finish(engine(llm), GenerationRequest("a", [1], 32))
    u = fin.usage
    assert (u.draft_tokens_proposed, u.draft_tokens_accepted, u.output_tokens) == (12, 7, 20)
    assert u.verification_steps == 13  # each step emits its accepted drafts plus one token
    assert llm.calls[0][1]["sampling_params"].kwargs["return_perf_metrics"] is True


@pytest.mark.parametrize(("stops", "end_id"), [((2, 7), 2), ((), -1)])
async def test_the_end_id_is_always_given_since_tensorrt_llm_has_no_tokenizer_to_read_it_from(stops, end_id) -> None:
    llm = FakeLLM([Completion([3], "stop")])
    await finish(engine(llm), GenerationRequest("e", [1], 4, stop_token_ids=stops))
    assert llm.calls[0][1]["sampling_params"].kwargs["end_id"] == end_id


def test_iteration_stats_give_queues_and_rates() -> None:
    e = engine(FakeLLM())
    e.read_iteration_stats([{"numActiveRequests": 3, "numQueuedRequests": 2,
                             "inflightBatchingStats": {"numCtxTokens": 500, "numGenRequests": 3}},
                            {"numActiveRequests": 3, "numQueuedRequests": 1,
                             "inflightBatchingStats": {"numCtxTokens": 0, "numGenRequests": 3}}])
    s = e.stats()
    assert (s.running, s.waiting) == (3, 1)
    assert s.prefill_tokens_per_second == pytest.approx(50.0) and s.decode_tokens_per_second == pytest.approx(0.6)


@pytest.mark.gpu
def test_every_name_the_engine_uses_exists_in_the_installed_package() -> None:
    pytest.importorskip("tensorrt_llm")
    for module, names in API_NAMES.items():
        mod = importlib.import_module(module)
        for name in names:
            assert hasattr(mod, name), f"{module}.{name}"
    api = {name: getattr(importlib.import_module(m), name) for m, names in API_NAMES.items() for name in names}
    for name, kwargs in API_KWARGS.items():
        cls = api[name]
        fields = set(getattr(cls, "model_fields", None) or inspect.signature(cls).parameters)
        missing = [k for k in kwargs if k not in fields]
        assert not missing, f"{name} lacks {missing}"
    for name in ("DraftTargetDecodingConfig", "EagleDecodingConfig"):
        fields = set(getattr(api[name], "model_fields", None) or inspect.signature(api[name]).parameters)
        assert fields & set(DRAFT_MODEL_KWARGS), name
    retention = api["KvCacheRetentionConfig"]
    assert hasattr(retention, "TokenRangeRetentionConfig")
    retention([retention.TokenRangeRetentionConfig(0, None, 90, timedelta(seconds=1))], 35, timedelta(seconds=1))
    retention([retention.TokenRangeRetentionConfig(0, 64, 80, timedelta(seconds=30)),  # a KV warm-up's
               retention.TokenRangeRetentionConfig(64, None, 0, None)], 0)
    api["SamplingParams"](max_tokens=1, end_id=-1)
    params = api["DisaggregatedParams"](request_type="context_only")
    assert params.request_type == "context_only"
    generate = inspect.signature(api["LLM"].generate_async).parameters
    assert {"sampling_params", "streaming", "kv_cache_retention_config", "disaggregated_params"} <= set(generate)
