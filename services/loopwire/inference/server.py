"""Build an inference engine from flags (or in-process from a config) and serve it.

In-process use (tests, benches, the router benchmark's simulated replicas)::

    engine = build_engine(EngineOptions(engine="simulated", replica_id="r1", time_scale=0))
    servicer = InferenceServicer(engine)
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass

from loopwire.common import grpc_server, telemetry
from loopwire.common.config import env as _env
from loopwire.common.model_def import check_vocabulary, load_definition
from loopwire.common.service_auth import ServiceTokenInterceptor
from loopwire.common.service_flags import add_service_token_arguments, service_token_from_args
from loopwire.inference.config import MODEL_SIZES, EngineConfig, ModelConfig, model_preset
from loopwire.inference.cost_model import GPUS, CostModel
from loopwire.inference.engine import AsyncEngine, Engine
from loopwire.inference.model import MATMUL_MODES
from loopwire.inference.service import (
    COALESCE_MAX_TOKENS,
    COALESCE_WINDOW_S,
    PROGRESS_INTERVAL_S,
    InferenceServicer,
)
from loopwire.v1 import inference_pb2, inference_pb2_grpc

log = logging.getLogger("loopwire.inference")

SERVICE_NAME = inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name


@dataclass
class EngineOptions:
    """Everything ``build_engine`` needs; mirrors the command-line flags."""

    engine: str = "reference"
    # default (SmolLM2-135M-Instruct) | dummy:<seed> | FILE.gguf | a Hugging Face directory; "" = the
    # engine's default: the real model on reference, dummy:0 (cl100k) on simulated.
    model: str = ""
    model_size: str = "tiny"
    replica_id: str = "replica-0"
    kv_blocks: int = 0  # 0: 4096 for reference; what fits on the GPU for simulated
    block_size: int = 16
    max_batch_tokens: int = 0  # 0: 1024 for reference, 8192 for simulated
    max_output_tokens: int = 4096
    num_draft_tokens: int = 8
    # Draft branches verified per sequence and step (reference and simulated engines). 1: each fork
    # reads the whole context again, which costs more than the extra accepted tokens give at agent
    # context lengths (bench/results/speculation.md); a tree-attention kernel would change that.
    draft_branches: int = 1
    drafter: str = "suffix"
    draft_model: str = ""  # trtllm draft_target / eagle3: the draft checkpoint directory
    prefix_cache: bool = True
    host_kv_bytes: int = 0
    eviction_policy: str = "priority"
    prefill_policy: str = "fair"
    prefill_chunk_tokens: int = 128
    # reference engine: how linear layers multiply (model.MATMUL_MODES; auto: numba when installed)
    matmul: str = "auto"
    role: str = "both"
    gpu: str = "h200"
    model_params: str = "8b"
    time_scale: float = 0.0

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> EngineOptions:
        return cls(**{k: getattr(args, k) for k in cls.__dataclass_fields__})


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
        prefix_cache=options.prefix_cache,
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


def _non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0:
        raise argparse.ArgumentTypeError(f"{value}: must be 0 or more")
    return number


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be 1 or more")
    return number


def _non_negative(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value}: must be 0 or more")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = EngineOptions()
    parser.add_argument("--listen", default=_env("listen", "127.0.0.1:50053"), help="host:port (port 0: any free port)")
    parser.add_argument("--engine", choices=["reference", "simulated", "trtllm"], default=_env("engine", d.engine))
    parser.add_argument("--model", default=_env("model", d.model),
                        help="default (SmolLM2-135M-Instruct, bundled) | dummy:<seed> (random weights, cl100k) | "
                             "FILE.gguf | a Hugging Face model directory (default: the real model on reference, "
                             "dummy:0 on simulated; trtllm needs a directory)")
    parser.add_argument("--model-size", choices=MODEL_SIZES, default=_env("model_size", d.model_size),
                        help="shape of dummy:<seed> weights (reference engine)")
    parser.add_argument("--replica-id", default=_env("replica_id", d.replica_id))
    parser.add_argument("--kv-blocks", type=int, default=int(_env("kv_blocks", "0")),
                        help="KV cache blocks (0: engine default)")
    parser.add_argument("--block-size", type=int, default=int(_env("block_size", str(d.block_size))))
    parser.add_argument("--max-batch-tokens", type=int, default=int(_env("max_batch_tokens", "0")),
                        help="token budget per step (0: engine default)")
    parser.add_argument("--max-output-tokens", type=int,
                        default=int(_env("max_output_tokens", str(d.max_output_tokens))))
    parser.add_argument("--num-draft-tokens", type=int, default=int(_env("num_draft_tokens", str(d.num_draft_tokens))))
    parser.add_argument("--draft-branches", type=int, default=int(_env("draft_branches", str(d.draft_branches))),
                        help="draft branches verified per sequence and step: the favourite and alternatives "
                             "starting with the next-likeliest tokens, each a fork of the sequence (suffix "
                             "drafter; reference and simulated engines; 1: one chain)")
    parser.add_argument("--drafter", choices=["suffix", "prompt_lookup", "draft_target", "eagle3"],
                        default=_env("drafter", d.drafter),
                        help="speculative drafts: suffix decoding (session + recent outputs) or prompt lookup; "
                             "trtllm also draft_target and eagle3 (with --draft-model)")
    parser.add_argument("--draft-model", default=_env("draft_model", d.draft_model),
                        help="trtllm --drafter draft_target/eagle3: the draft checkpoint directory")
    parser.add_argument("--host-kv-bytes", type=int, default=int(_env("host_kv_bytes", "0")),
                        help="host-memory KV tier for evicted blocks, bytes (0: none)")
    parser.add_argument("--eviction-policy", choices=["priority", "lru"], default=_env("eviction_policy", d.eviction_policy),
                        help="KV eviction: retention priority then LRU, or plain LRU")
    parser.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                        default=_env("no_prefix_cache", "") in ("", "0", "false"),
                        help="disable prefix caching (the naive baseline)")
    add_service_token_arguments(parser, "accepted from gateways and peer replicas; sent to peers when pulling KV")
    parser.add_argument("--peers", default=_env("peers", ""),
                        help="replicas this one may import KV from (kv_source), host:port,... (default: none)")
    parser.add_argument("--prefill-policy", choices=["fair", "fcfs"], default=_env("prefill_policy", d.prefill_policy),
                        help="fair: decodes first, then the prefills with the fewest tokens left, each at most "
                             "--prefill-chunk-tokens a step (a short request never waits behind a long prompt); "
                             "fcfs: arrival order (the old way)")
    parser.add_argument("--prefill-chunk-tokens", type=int,
                        default=int(_env("prefill_chunk_tokens", str(d.prefill_chunk_tokens))),
                        help="most prompt tokens one sequence prefills per step under --prefill-policy fair")
    parser.add_argument("--prefill-progress-ms", type=_non_negative, metavar="MS",
                        default=int(_env("prefill_progress_ms", str(int(PROGRESS_INTERVAL_S * 1000)))),
                        help="a prefill still running this long after the last progress event sends another "
                             "(tokens processed of total; 0: after every chunk)")
    parser.add_argument("--coalesce-window-ms", type=_non_negative_float, metavar="MS",
                        default=float(_env("coalesce_window_ms", f"{COALESCE_WINDOW_S * 1000:g}")),
                        help="tokens of a generation after its first wait up to this long for more of it to share "
                             "their stream message (the first never waits; 0: a message per engine step unless "
                             "the gateway reads slower)")
    parser.add_argument("--coalesce-max-tokens", type=_positive, metavar="N",
                        default=int(_env("coalesce_max_tokens", str(COALESCE_MAX_TOKENS))),
                        help="a waiting batch of this many tokens is sent without waiting out the window")
    parser.add_argument("--matmul", choices=MATMUL_MODES, default=_env("matmul", d.matmul),
                        help="reference engine: how linear layers multiply. numba: kernels over a GGUF file's "
                             "Q4_1/Q8_0 codes (float32 for other types); numba-f32: the same kernels over "
                             "dequantized float32 (same bits, 4x the memory); blas: numpy's BLAS, row invariant "
                             "by a measured block size; auto: numba when installed, else blas")
    parser.add_argument("--role", choices=["both", "prefill", "decode"], default=_env("role", d.role))
    parser.add_argument("--gpu", choices=sorted(GPUS), default=_env("gpu", d.gpu), help="simulated engine: GPU")
    parser.add_argument("--model-params", choices=MODEL_SIZES, default=_env("model_params", d.model_params),
                        help="simulated engine: model size")
    parser.add_argument("--time-scale", type=float, default=float(_env("time_scale", str(d.time_scale))),
                        help="simulated engine: real seconds per modelled second (0: virtual time, no sleeping)")


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
    try:
        engine = build_engine(EngineOptions.from_args(args))
    except (ValueError, OSError) as e:  # ModelError, TokenizerError, ChatTemplateError are ValueErrors
        raise SystemExit(f"inference: {e}") from None
    except ModuleNotFoundError as e:
        if e.name not in ENGINE_EXTRA:
            raise
        raise SystemExit(f"inference: the {args.engine} engine needs the 'engine' extra ({e.name} is not installed): "
                         "pip install 'loopwire[engine]'") from None
    log.info("%s", describe(engine))
    telemetry.set_model(engine.definition.name)  # on this replica's server spans and every metric
    token = service_token_from_args(args, "inference")
    server = grpc_server.make_server([ServiceTokenInterceptor(token)] if token else [])
    add_servicer(server, engine, args.role, token, frozenset(a.strip() for a in args.peers.split(",") if a.strip()),
                 args.prefill_progress_ms / 1000, args.coalesce_window_ms / 1000, args.coalesce_max_tokens)
    await engine.start()
    await grpc_server.serve(server, args.listen, [SERVICE_NAME], on_stop=engine.close, ready=ready)
