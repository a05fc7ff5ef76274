"""``loopwire gateway``: flags (declared once, on `GatewayStartup` and `GatewayConfig`) and startup."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass

from loopwire.common import grpc_server
from loopwire.common.config import add_flags, from_args, setting
from loopwire.common.model_def import ModelDefinition
from loopwire.common.service_flags import (
    add_service_token_arguments,
    load_authenticator,
    service_token_from_args,
)
from loopwire.gateway.config import GatewayConfig
from loopwire.gateway.disagg import DEFAULT_MAX_LOCAL_PREFILL_LENGTH, DEFAULT_MAX_PREFILL_QUEUE, DisaggPolicy
from loopwire.gateway.discovery import parse_inference
from loopwire.gateway.factory import SERVICE_NAME, ModelUnavailable, start_gateway
from loopwire.gateway.router import DISCOVERY_INTERVAL_S, DRAIN_TIMEOUT_S, POLICIES, Router
from loopwire.gateway.safety import GuardModelClassifier, LexiconClassifier, SafetyClassifier
from loopwire.gateway.service import GatewayServicer

log = logging.getLogger("loopwire.gateway")


@dataclass
class GatewayStartup:
    """What `loopwire gateway` starts with beside `GatewayConfig`: where it listens, its replicas and
    how it routes to them, its safety classifier."""

    listen: str = setting("127.0.0.1:50052", "host:port (port 0: any free port)")
    inference: str = setting("127.0.0.1:50053", "inference replicas: host:port,host:port,... (static), or every "
                             "A/AAAA record of a DNS name, re-resolved periodically (a Kubernetes headless "
                             "Service): dns:///name:port (system resolver) or dns://dns-server-ip:dns-port/name:port")
    discovery_interval: float = setting(DISCOVERY_INTERVAL_S, "seconds between DNS lookups of a dns: --inference name")
    drain_timeout: float = setting(DRAIN_TIMEOUT_S, "seconds a replica that left DNS keeps its open streams before "
                                                    "they fail over")
    replica_wait: float = setting(60.0, "seconds to wait at startup for a replica to tell its model (pods may "
                                        "start later)")
    auth_config: str = setting("", "JSON or TOML file of tenants, hashed keys and limits (required unless "
                                   "--insecure-dev)")
    safety_classifier: str = setting("lexicon", "'lexicon' (offline rules) or 'guard:host:port' (a guard model on "
                                                "an inference service)")
    routing: str = setting("cache-aware", "how a request picks its replica", choices=POLICIES)
    routing_seed: int = setting(0, "seed of the hash that breaks cache-aware routing ties: gateways with the same "
                                   "seed send the same prompts to the same replicas")
    max_local_prefill_length: int = setting(DEFAULT_MAX_LOCAL_PREFILL_LENGTH,
                                            "a --role decode replica has a prompt prefilled on a --role prefill "
                                            "replica when more than this many of its tokens are uncached there "
                                            "(and a prefill queue is short)")
    max_prefill_queue: int = setting(DEFAULT_MAX_PREFILL_QUEUE, "prefill remotely only while some prefill replica "
                                                                "has fewer requests queued than this")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, GatewayStartup)
    add_service_token_arguments(parser, "sent to the inference replicas")
    add_flags(parser, GatewayConfig)


def build_servicer(args: argparse.Namespace, startup: GatewayStartup, model: ModelDefinition, router: Router,
                   token: str) -> GatewayServicer:
    authenticator = load_authenticator(args, "gateway")
    classifier: SafetyClassifier
    if startup.safety_classifier.startswith("guard:"):
        classifier = GuardModelClassifier(startup.safety_classifier.removeprefix("guard:"), service_token=token)
    elif startup.safety_classifier == "lexicon":
        classifier = LexiconClassifier()
    else:
        raise SystemExit(f"--safety-classifier: unknown classifier {startup.safety_classifier!r}")
    config = from_args(GatewayConfig, args)
    if config.work_threads < 1 or not 1 <= config.work_tenant_share <= config.work_threads:
        raise SystemExit(f"--work-tenant-share: must be from 1 to --work-threads ({config.work_threads}), "
                         f"got {config.work_tenant_share}")
    return GatewayServicer(model, router, authenticator, classifier, config)


async def serve_from_args(args: argparse.Namespace, ready: Callable[[int], None] | None = None) -> None:
    startup = from_args(GatewayStartup, args)
    token = service_token_from_args(args, "gateway")
    try:
        replicas = parse_inference(startup.inference)
    except ValueError as e:
        raise SystemExit(f"gateway: {e}") from None
    try:
        gateway = await start_gateway(
            replicas, routing=startup.routing, routing_seed=startup.routing_seed, service_token=token,
            discovery_interval_s=startup.discovery_interval, drain_timeout_s=startup.drain_timeout,
            disagg=DisaggPolicy(startup.max_local_prefill_length, startup.max_prefill_queue),
            model_timeout_s=startup.replica_wait,
            make_servicer=lambda model, router: build_servicer(args, startup, model, router, token),
            listen=None)  # grpc_server.serve binds it, with health, reflection and the drain
    except ModelUnavailable as e:
        raise SystemExit(f"gateway: {e}") from None

    async def stop() -> None:
        log.info("gateway metrics at shutdown: %s", gateway.servicer.metrics.snapshot())
        await gateway.close_upstreams()

    await grpc_server.serve(gateway.server, startup.listen, [SERVICE_NAME], on_stop=stop, ready=ready)
