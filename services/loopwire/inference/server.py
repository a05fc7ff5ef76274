"""Build an inference engine from flags (or in-process from a config) and serve it.

In-process use (tests, benches, the router benchmark's simulated replicas)::

    engine = build_engine(EngineOptions(engine="simulated", replica_id="r1", time_scale=0))
    servicer = InferenceServicer(engine)
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from loopwire.common import grpc_server, telemetry
from loopwire.common.config import add_flags, checked, from_args, setting
from loopwire.common.model_def import check_vocabulary, load_definition
from loopwire.common.service_auth import ServiceTokenInterceptor
from loopwire.common.service_flags import add_service_token_arguments, service_token_from_args
from loopwire.inference.config import MODEL_SIZES, EngineConfig, ModelConfig, model_preset
from loopwire.inference.cost_model import GPUS, CostModel
from loopwire.inference.engine import AsyncEngine, Engine
from loopwire.inference.model import MATMUL_MODES
from loopwire.inference.outbox import COALESCE_MAX_TOKENS, COALESCE_WINDOW_S
from loopwire.inference.service import PROGRESS_INTERVAL_S, InferenceServicer
from loopwire.v1 import inference_pb2, inference_pb2_grpc

log = logging.getLogger("loopwire.inference")

SERVICE_NAME = inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name


@dataclass
class EngineBaseline:
    """The naive way the benchmarks compare against; off in production."""

    no_prefix_cache: bool = setting(False, "disable prefix caching (the naive baseline)")


@dataclass
class EngineOptions:
    """Everything ``build_engine`` needs; each field is also a flag of `loopwire inference` (and its
    `LOOPWIRE_<FLAG>` variable, `loopwire.common.config`)."""

    engine: str = setting("reference", "the engine: the numpy reference, a simulated GPU (cost model), or "
                                       "TensorRT-LLM", choices=["reference", "simulated", "trtllm"])
    # "" = the engine's default.
    model: str = setting("", "default (SmolLM2-135M-Instruct, bundled) | dummy:<seed> (random weights, cl100k) | "
                             "FILE.gguf | a Hugging Face model directory (default: the real model on reference, "
                             "dummy:0 on simulated; trtllm needs a directory)")
    model_size: str = setting("tiny", "shape of dummy:<seed> weights (reference engine)", choices=MODEL_SIZES)
    replica_id: str = setting("replica-0", "this replica's name, in its replies, metrics and logs")
    kv_blocks: int = setting(0, "KV cache blocks (0: engine default: 4096 on reference, what fits the GPU on "
                                "simulated)")
    block_size: int = setting(16, "tokens per KV cache block")
    max_batch_tokens: int = setting(0, "token budget per step (0: engine default: 1024 on reference, 8192 on "
                                       "simulated)")
    max_output_tokens: int = setting(4096, "most tokens one generation may produce")
    num_draft_tokens: int = setting(8, "speculative draft tokens proposed per sequence and step")
    # 1: each fork reads the whole context again, which costs more than the extra accepted tokens give
    # at agent context lengths (bench/results/speculation.md); a tree-attention kernel would change that.
    draft_branches: int = setting(1, "draft branches verified per sequence and step: the favourite and "
                                     "alternatives starting with the next-likeliest tokens, each a fork of the "
                                     "sequence (suffix drafter; reference and simulated engines; 1: one chain)")
    drafter: str = setting("suffix", "speculative drafts: suffix decoding (session + recent outputs) or prompt "
                                     "lookup; trtllm also draft_target and eagle3 (with --draft-model)",
                           choices=["suffix", "prompt_lookup", "draft_target", "eagle3"])
    draft_model: str = setting("", "trtllm --drafter draft_target/eagle3: the draft checkpoint directory")
    host_kv_bytes: int = setting(0, "host-memory KV tier for evicted blocks, bytes (0: none)")
    eviction_policy: str = setting("priority", "KV eviction: retention priority then LRU, or plain LRU",
                                   choices=["priority", "lru"])
    prefill_policy: str = setting("fair", "fair: decodes first, then the prefills with the fewest tokens left, "
                                          "each at most --prefill-chunk-tokens a step (a short request never waits "
                                          "behind a long prompt); fcfs: arrival order (the old way)",
                                  choices=["fair", "fcfs"])
    prefill_chunk_tokens: int = setting(128, "most prompt tokens one sequence prefills per step under "
                                             "--prefill-policy fair")
    matmul: str = setting("auto", "reference engine: how linear layers multiply. numba: kernels over a GGUF "
                                  "file's Q4_1/Q8_0 codes (float32 for other types); numba-f32: the same kernels "
                                  "over dequantized float32 (same bits, 4x the memory); blas: numpy's BLAS, row "
                                  "invariant by a measured block size; auto: numba when installed, else blas",
                          choices=MATMUL_MODES)
    role: str = setting("both", "what this replica serves: prefill and decode, or one of them (disaggregated "
                                "serving, the gateway's --max-local-prefill-length)",
                        choices=["both", "prefill", "decode"])
    gpu: str = setting("h200", "simulated engine: GPU", choices=sorted(GPUS))
    model_params: str = setting("8b", "simulated engine: model size", choices=MODEL_SIZES)
    time_scale: float = setting(0.0, "simulated engine: real seconds per modelled second (0: virtual time, no "
                                     "sleeping)")
    baseline: EngineBaseline = field(default_factory=EngineBaseline)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EngineOptions:
        return from_args(cls, args)


@dataclass
class ServingOptions:
    """What `loopwire inference` starts with beside `EngineOptions`: where it listens, its peers, how it
    streams."""

    listen: str = setting("127.0.0.1:50053", "host:port (port 0: any free port)")
    peers: str = setting("", "replicas this one may import KV from (kv_source), host:port,... (default: none)")
    prefill_progress_ms: int = setting(int(PROGRESS_INTERVAL_S * 1000),
                                       "a prefill still running this long after the last progress event sends "
                                       "another (tokens processed of total; 0: after every chunk)",
                                       parse=checked(int, lambda ms: ms >= 0, "0 or more"), metavar="MS")
    coalesce_window_ms: float = setting(COALESCE_WINDOW_S * 1000,
                                        "tokens of a generation after its first wait up to this long for more of "
                                        "it to share their stream message (the first never waits; 0: a message "
                                        "per engine step unless the gateway reads slower)",
                                        parse=checked(float, lambda ms: ms >= 0, "0 or more"), metavar="MS")
    coalesce_max_tokens: int = setting(COALESCE_MAX_TOKENS, "a waiting batch of this many tokens is sent without "
                                                            "waiting out the window", metavar="N",
                                        parse=checked(int, lambda n: n >= 1, "1 or more"))


def model_spec(options: EngineOptions) -> str:
    if options.model:
        return options.model
    if options.engine == "trtllm":
        raise ValueError("--model: the trtllm engine needs a Hugging Face checkpoint directory")
    return "default" if options.engine == "reference" else "dummy:0"


def build_engine(options: EngineOptions) -> Engine:
    """An engine ready to serve (its step loop starts with the first request)."""
    spec = model_spec(options)
    if options.engine == "trtllm":
        from loopwire.inference.trtllm_engine import TrtLlmEngine

        return TrtLlmEngine.from_options(options, load_definition(spec))
    definition = load_definition(spec)
    base = EngineConfig(
        replica_id=options.replica_id,
        block_size=options.block_size,
        max_output_tokens=options.max_output_tokens,
        num_draft_tokens=options.num_draft_tokens,
        draft_branches=options.draft_branches,
        prefix_cache=not options.baseline.no_prefix_cache,
        drafter=options.drafter,
        host_kv_bytes=options.host_kv_bytes,
        eviction_policy=options.eviction_policy,
        prefill_policy=options.prefill_policy,
        prefill_chunk_tokens=options.prefill_chunk_tokens,
    )
    if options.engine == "reference":
        from loopwire.inference.model import LlamaModel, resolve_matmul
        from loopwire.inference.reference_engine import reference_core
        from loopwire.inference.weights import load_weights

        matmul = resolve_matmul(options.matmul)
        model_config, weights = load_weights(definition.source, model_preset(options.model_size),
                                             quantized=matmul == "numba")
        check_vocabulary(model_config.vocab_size, definition)
        config = base.with_(model=model_config, num_kv_blocks=options.kv_blocks or kv_blocks_for(model_config, options.block_size),
                            max_batch_tokens=options.max_batch_tokens or 1024)
        core = reference_core(config, LlamaModel(model_config, weights, matmul))
        del weights  # the model holds what it multiplies by
        return AsyncEngine(core, "reference", f"{definition.name} ({definition.source})", definition, offload=True)
    if options.engine == "simulated":
        from loopwire.inference.simulated_engine import simulated_core

        cost = CostModel.named(options.gpu, options.model_params)
        config = base.with_(
            model=model_preset(options.model_params),
            num_kv_blocks=options.kv_blocks or cost.kv_blocks_that_fit(options.block_size),
            max_batch_tokens=options.max_batch_tokens or 8192,
            max_running=256,
        )
        core, executor = simulated_core(config, cost, definition)
        return AsyncEngine(
            core, "simulated", f"llama-{options.model_params} on {options.gpu} (simulated, {definition.name} tokenizer)",
            definition, offload=False, time_scale=options.time_scale, step_seconds=lambda: executor.last_step_seconds,
        )
    raise ValueError(f"unknown engine {options.engine!r}; choose reference, simulated or trtllm")



# Memory the reference engine's KV cache may take by default (float32 keys and values).
_KV_BYTES_DEFAULT = 2 << 30


def kv_block_bytes(model: ModelConfig, block_size: int) -> int:
    """Bytes of one KV block on the reference engine: float32 keys and values, every layer and KV head."""
    return 2 * 4 * model.num_hidden_layers * model.num_key_value_heads * model.head_dim * block_size


def kv_blocks_for(model: ModelConfig, block_size: int = 16, budget_bytes: int = _KV_BYTES_DEFAULT) -> int:
    """KV blocks that fit the budget."""
    return max(64, min(4096 * 16, budget_bytes // kv_block_bytes(model, block_size)))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ServingOptions)
    add_flags(parser, EngineOptions)
    add_service_token_arguments(parser, "accepted from gateways and peer replicas; sent to peers when pulling KV")


def describe(engine: Engine) -> str:
    """One line saying what this replica serves, for its start-up log."""
    d, c = engine.definition, engine.config
    kv = ""
    if engine.name == "reference":
        mib = kv_block_bytes(c.model, c.block_size) * c.num_kv_blocks / 2**20
        kv = f", KV cache {c.num_kv_blocks} blocks x {c.block_size} tokens ({mib:.0f} MiB float32)"
    return (f"serving {d.name} from {d.source} on the {engine.name} engine: vocabulary {d.vocab_size}, "
            f"context {d.context_length or 'unknown'}, tokenizer digest {d.digest[:16]}{kv}")


def add_servicer(server: object, engine: Engine, role: str = "both", service_token: str = "",
                 peers: frozenset[str] = frozenset(), progress_interval_s: float = PROGRESS_INTERVAL_S,
                 coalesce_window_s: float = COALESCE_WINDOW_S, coalesce_max_tokens: int = COALESCE_MAX_TOKENS,
                 ) -> InferenceServicer:
    servicer = InferenceServicer(engine, role, service_token, peers, progress_interval_s, coalesce_window_s,
                                 coalesce_max_tokens)
    inference_pb2_grpc.add_InferenceServiceServicer_to_server(servicer, server)
    return servicer


# What the reference engine and GGUF models need beyond the core install (pyproject's `engine` extra).
ENGINE_EXTRA = {"numba", "llvmlite", "gguf", "threadpoolctl"}


async def serve_from_args(args: argparse.Namespace, ready: Callable[[int], None] | None = None) -> None:
    options, serving = EngineOptions.from_args(args), from_args(ServingOptions, args)
    try:
        engine = build_engine(options)
    except (ValueError, OSError) as e:  # ModelError, TokenizerError, ChatTemplateError are ValueErrors
        raise SystemExit(f"inference: {e}") from None
    except ModuleNotFoundError as e:
        if e.name not in ENGINE_EXTRA:
            raise
        raise SystemExit(f"inference: the {options.engine} engine needs the 'engine' extra ({e.name} is not installed): "
                         "pip install 'loopwire[engine]'") from None
    log.info("%s", describe(engine))
    telemetry.set_model(engine.definition.name)  # on this replica's server spans and every metric
    token = service_token_from_args(args, "inference")
    server = grpc_server.make_server([ServiceTokenInterceptor(token)] if token else [])
    add_servicer(server, engine, options.role, token, frozenset(a.strip() for a in serving.peers.split(",") if a.strip()),
                 serving.prefill_progress_ms / 1000, serving.coalesce_window_ms / 1000, serving.coalesce_max_tokens)
    await engine.start()
    await grpc_server.serve(server, serving.listen, [SERVICE_NAME], on_stop=engine.close, ready=ready)
