"""``loopwire gateway``: flags (each defaulting from ``LOOPWIRE_<FLAG>``) and startup."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from loopwire.common import grpc_server
from loopwire.common.config import env as _env
from loopwire.common.config import env_int as _env_int
from loopwire.common.model_def import ModelDefinition
from loopwire.common.response_ids import check_gateway_id
from loopwire.common.service_flags import (
    add_service_token_arguments,
    load_authenticator,
    service_token_from_args,
)
from loopwire.gateway.disagg import DEFAULT_MAX_LOCAL_PREFILL_LENGTH, DEFAULT_MAX_PREFILL_QUEUE, DisaggPolicy
from loopwire.gateway.discovery import parse_inference
from loopwire.gateway.factory import SERVICE_NAME, ModelUnavailable, start_gateway
from loopwire.gateway.policy import SAFETY_MODES
from loopwire.gateway.router import DISCOVERY_INTERVAL_S, DRAIN_TIMEOUT_S, POLICIES, Router
from loopwire.gateway.safety import GuardModelClassifier, LexiconClassifier, SafetyClassifier
from loopwire.gateway.service import GatewayConfig, GatewayServicer

log = logging.getLogger("loopwire.gateway")


def _gateway_id(value: str) -> str:
    try:
        return check_gateway_id(value) if value else ""
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default=_env("listen", "127.0.0.1:50052"), help="host:port (port 0: any free port)")
    parser.add_argument("--inference", default=_env("inference", "127.0.0.1:50053"),
                        help="inference replicas: host:port,host:port,... (static), or every A/AAAA record of a DNS "
                             "name, re-resolved periodically (a Kubernetes headless Service): dns:///name:port "
                             "(system resolver) or dns://dns-server-ip:dns-port/name:port")
    parser.add_argument("--discovery-interval", type=float,
                        default=float(_env("discovery_interval", str(DISCOVERY_INTERVAL_S))),
                        help="seconds between DNS lookups of a dns: --inference name")
    parser.add_argument("--drain-timeout", type=float, default=float(_env("drain_timeout", str(DRAIN_TIMEOUT_S))),
                        help="seconds a replica that left DNS keeps its open streams before they fail over")
    parser.add_argument("--replica-wait", type=float, default=float(_env("replica_wait", "60")),
                        help="seconds to wait at startup for a replica to tell its model (pods may start later)")
    parser.add_argument("--auth-config", default=_env("auth_config", ""),
                        help="JSON or TOML file of tenants, hashed keys and limits (required unless --insecure-dev)")
    add_service_token_arguments(parser, "sent to the inference replicas")
    parser.add_argument("--safety-mode", choices=sorted(SAFETY_MODES), default=_env("safety_mode", "stream-then-cut"),
                        help="the safety mode of tenants whose auth config names none")
    parser.add_argument("--allow-replay", action="store_true", default=_env("allow_replay", "") == "1",
                        help="accept recorded output to emit (CreateResponse.replay): for replays and benchmarks only")
    parser.add_argument("--safety-classifier", default=_env("safety_classifier", "lexicon"),
                        help="'lexicon' (offline rules) or 'guard:host:port' (a guard model on an inference service)")
    parser.add_argument("--safety-chunk-chars", type=int, default=_env_int("safety_chunk_chars", 256),
                        help="output is classified a chunk of this many characters at a time, lagging the stream")
    parser.add_argument("--safety-overlap-chars", type=int, default=_env_int("safety_overlap_chars", 64),
                        help="each chunk or input window is classified from this many characters before it, so a "
                             "phrase split across two is still seen")
    parser.add_argument("--safety-input-window-chars", type=int,
                        default=_env_int("safety_input_window_chars", 64 * 1024),
                        help="the input is classified a window of this many characters at a time, each a job on "
                             "the work pool, so tenants' long prompts take turns")
    parser.add_argument("--work-threads", type=int, default=_env_int("work_threads", 4),
                        help="threads for requests' heavy work (checks, rendering, tokenizing, safety, grammar, "
                             "counting) off the event loop that relays every stream")
    parser.add_argument("--work-tenant-share", type=int, default=_env_int("work_tenant_share", 2),
                        help="most work-pool threads one tenant holds at once; its other jobs wait their turn "
                             "(round-robin across tenants)")
    parser.add_argument("--work-inline-bytes", type=int, default=_env_int("work_inline_bytes", 16 * 1024),
                        help="requests smaller than this run their work inline on the event loop (cheaper than "
                             "the hop to a thread)")
    parser.add_argument("--safety-serial", action="store_true", default=_env("safety_serial", "") == "1",
                        help="finish the input check before inference starts (the naive way, for comparison)")
    parser.add_argument("--max-request-bytes", type=int, default=_env_int("max_request_bytes", 16 * 1024 * 1024))
    parser.add_argument("--max-sessions", type=int, default=_env_int("max_sessions", 10_000),
                        help="conversations kept for previous_response_id (LRU)")
    parser.add_argument("--max-session-tokens", type=int, default=_env_int("max_session_tokens", 1_000_000),
                        help="longest conversation one session may hold")
    parser.add_argument("--max-total-tokens", type=int, default=_env_int("max_total_tokens", 200_000_000),
                        help="tokens held by all kept conversations together (LRU)")
    parser.add_argument("--gateway-id", type=_gateway_id, default=_env("gateway_id", ""),
                        help="1 to 16 lowercase letters and digits put into this gateway's response ids "
                             "(resp_<id>_...), so a front of several gateways (the api's --gateway "
                             "id=host:port,...) sends each continuation to the gateway holding it")
    parser.add_argument("--routing", choices=POLICIES, default=_env("routing", "cache-aware"))
    parser.add_argument("--routing-seed", type=int, default=_env_int("routing_seed", 0),
                        help="seed of the hash that breaks cache-aware routing ties: gateways with the same seed "
                             "send the same prompts to the same replicas")
    parser.add_argument("--max-local-prefill-length", type=int,
                        default=_env_int("max_local_prefill_length", DEFAULT_MAX_LOCAL_PREFILL_LENGTH),
                        help="a --role decode replica has a prompt prefilled on a --role prefill replica when more "
                             "than this many of its tokens are uncached there (and a prefill queue is short)")
    parser.add_argument("--max-prefill-queue", type=int,
                        default=_env_int("max_prefill_queue", DEFAULT_MAX_PREFILL_QUEUE),
                        help="prefill remotely only while some prefill replica has fewer requests queued than this")
    parser.add_argument("--unconstrained", action="store_true", default=_env("unconstrained", "") == "1",
                        help="decode freely: no grammar from tool_choice or text formats (the naive way, for comparison)")
    parser.add_argument("--stateless", action="store_true", default=_env("stateless", "") == "1",
                        help="re-tokenize and forward every request in full (the naive way, for comparison)")


def build_servicer(args: argparse.Namespace, model: ModelDefinition, router: Router, token: str) -> GatewayServicer:
    authenticator = load_authenticator(args, "gateway")
    classifier: SafetyClassifier
    if args.safety_classifier.startswith("guard:"):
        classifier = GuardModelClassifier(args.safety_classifier.removeprefix("guard:"), service_token=token)
    elif args.safety_classifier == "lexicon":
        classifier = LexiconClassifier()
    else:
        raise SystemExit(f"--safety-classifier: unknown classifier {args.safety_classifier!r}")
    if args.work_threads < 1 or not 1 <= args.work_tenant_share <= args.work_threads:
        raise SystemExit(f"--work-tenant-share: must be from 1 to --work-threads ({args.work_threads}), "
                         f"got {args.work_tenant_share}")
    config = GatewayConfig(
        max_request_bytes=args.max_request_bytes,
        max_sessions=args.max_sessions,
        max_session_tokens=args.max_session_tokens,
        max_total_tokens=args.max_total_tokens,
        safety_mode=SAFETY_MODES[args.safety_mode],
        safety_serial=args.safety_serial,
        safety_chunk_chars=args.safety_chunk_chars,
        safety_overlap_chars=args.safety_overlap_chars,
        safety_input_window_chars=args.safety_input_window_chars,
        work_threads=args.work_threads,
        work_tenant_share=args.work_tenant_share,
        work_inline_bytes=args.work_inline_bytes,
        stateless=args.stateless,
        allow_replay=args.allow_replay,
        unconstrained=args.unconstrained,
        gateway_id=args.gateway_id,
    )
    return GatewayServicer(model, router, authenticator, classifier, config)


async def serve_from_args(args: argparse.Namespace, ready: Callable[[int], None] | None = None) -> None:
    token = service_token_from_args(args, "gateway")
    try:
        replicas = parse_inference(args.inference)
    except ValueError as e:
        raise SystemExit(f"gateway: {e}") from None
    try:
        gateway = await start_gateway(
            replicas, routing=args.routing, routing_seed=args.routing_seed, service_token=token, discovery_interval_s=args.discovery_interval,
            drain_timeout_s=args.drain_timeout, disagg=DisaggPolicy(args.max_local_prefill_length, args.max_prefill_queue),
            model_timeout_s=args.replica_wait, make_servicer=lambda model, router: build_servicer(args, model, router, token),
            listen=None)  # grpc_server.serve binds it, with health, reflection and the drain
    except ModelUnavailable as e:
        raise SystemExit(f"gateway: {e}") from None

    async def stop() -> None:
        log.info("gateway metrics at shutdown: %s", gateway.servicer.metrics.snapshot())
        await gateway.close_upstreams()

    await grpc_server.serve(gateway.server, args.listen, [SERVICE_NAME], on_stop=stop, ready=ready)
