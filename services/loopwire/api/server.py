"""``loopwire api``: flags (each defaulting from ``LOOPWIRE_<FLAG>``) and startup of the
OpenAI-compatible front door, a separate process that is a gRPC client of the gateway.

Separate, so conversation state, deltas, tokenization, safety and routing stay in the gateway
alone (this process holds no conversation) and the HTTP stack scales and restarts on its own.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from google.protobuf import json_format

from loopwire.api.app import build_app
from loopwire.api.background import BackgroundResponses
from loopwire.api.body import Decoding
from loopwire.api.context import ApiContext
from loopwire.api.gateway_client import GatewayClient
from loopwire.api.protocol import MAX_HEADER_BYTES, BoundedH11Protocol
from loopwire.api.store import ResponseStore
from loopwire.common import gc_tuning
from loopwire.common.config import add_flags, setting
from loopwire.common.service_flags import add_insecure_dev_argument, check_insecure_dev, load_authenticator
from loopwire.v1 import common_pb2

log = logging.getLogger("loopwire.api")
# Worker threads: --decode-per-tenant for each tenant of the tenants file, up to this many tenants.
MAX_DECODE_TENANTS = 32
# How long a thread holding the GIL keeps it from another that asks (CPython's default: 5 ms). A
# body parsed in a worker thread holds it; the event loop serving everyone else asks for it many
# times per request. 40 near-limit zstd bodies of one tenant: another's canary p50 12.4 ms at 5 ms,
# 8.8 ms at 1 ms (idle 2.4-2.7 ms); the large bodies take longer in turn.
GIL_SWITCH_S = 0.001


@dataclass
class ApiOptions:
    """The flags of `loopwire api`, each also read from its `LOOPWIRE_<FLAG>` variable
    (`loopwire.common.config`); `build_context` checks their ranges."""

    listen: str = setting("127.0.0.1:8080", "host:port of the HTTP/WebSocket server")
    gateway: str = setting("127.0.0.1:50052", "gateway address, host:port; or several gateways as "
                                              "id=host:port,id=host:port with each one's --gateway-id: a "
                                              "continuation goes to the gateway its previous_response_id names, a "
                                              "new conversation to the one with the fewest open streams")
    auth_config: str = setting("", "the gateway's tenants file, to refuse bad keys here too (required unless "
                                   "--insecure-dev; the gateway checks every key either way)")
    models: str = setting("loopwire", "comma-separated model names clients may ask for")
    max_body_bytes: int = setting(16 * 1024 * 1024, "largest request body or WebSocket message; larger is 413")
    replay: str = setting("", "JSON file of recorded assistant turns ([{\"text\": ..., \"function_calls\": "
                              "[{\"call_id\", \"name\", \"arguments\"}]}, ...]): response n replays turn n "
                              "(cycling) while the engine does the real work; for deterministic demos and tests")
    sse_keepalive_s: float = setting(15.0, "seconds without an event (a long prefill) before a streamed response "
                                           "sends an SSE comment line, and again every so often; 0: never")
    ws_ping_s: float = setting(20.0, "WebSocket mode: a protocol ping this often (a client that does not answer "
                                     "within the same time is dropped); 0: never")
    ws_max_age_s: float = setting(3600.0, "WebSocket mode: a connection older than this starts no new response "
                                          "(each gets the error websocket_connection_limit_reached), lets those in "
                                          "flight finish, then closes; 0: no limit (default 3600, OpenAI's 60 "
                                          "minutes)")
    header_timeout_s: float = setting(10.0, "seconds a connection (or a kept-alive one, from its last response) "
                                            "has to send a request's line and headers; later is 408 and closed")
    body_timeout_s: float = setting(60.0, "seconds a request has to send its body once its headers are in; later "
                                          "is 408 and closed")
    keep_alive_s: int = setting(5, "seconds an idle kept-alive connection stays open")
    stored_responses: int = setting(1000, "finished responses kept per tenant for GET /v1/responses/{id} (the "
                                          "oldest leave first; 0: none)")
    stored_bytes: int = setting(64 * 1024 * 1024, "bytes of stored responses and input items kept per tenant")
    stored_ttl_s: float = setting(24 * 3600.0, "seconds a stored response stays readable")
    background_responses: int = setting(16, "background responses (background: true) one tenant may have queued "
                                            "or in progress at once; more is 429; they run in this process and "
                                            "are cancelled when it stops (0: background mode off)")
    decode_per_tenant: int = setting(1, "request bodies of one tenant decompressed and parsed at once, in worker "
                                        "threads off the event loop (a body over 64 KiB or compressed); more wait "
                                        "their turn, behind that tenant's own only. Parsing holds the GIL, so more "
                                        "than one mostly takes more of the loop's turns")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, ApiOptions)
    add_insecure_dev_argument(parser)


def build_context(args: argparse.Namespace) -> ApiContext:
    authenticator = None
    if args.auth_config or not args.insecure_dev:
        authenticator = load_authenticator(args, "api")
    else:
        check_insecure_dev(args, "api", "--auth-config")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    turns = load_replay(args.replay) if args.replay else []
    if turns:
        log.warning("replay: responses replay the %d recorded turns of %s", len(turns), args.replay)
    if args.sse_keepalive_s < 0 or args.ws_ping_s < 0 or args.ws_max_age_s < 0:
        raise SystemExit("api: --sse-keepalive-s, --ws-ping-s and --ws-max-age-s must be 0 (off) or positive")
    if args.header_timeout_s <= 0 or args.body_timeout_s <= 0 or args.keep_alive_s <= 0:
        raise SystemExit("api: --header-timeout-s, --body-timeout-s and --keep-alive-s must be positive")
    if args.stored_responses < 0 or args.stored_bytes < 0 or args.stored_ttl_s <= 0:
        raise SystemExit("api: --stored-responses and --stored-bytes must be 0 or positive, --stored-ttl-s positive")
    if args.background_responses < 0:
        raise SystemExit("api: --background-responses must be 0 (off) or positive")
    if args.decode_per_tenant <= 0:
        raise SystemExit("api: --decode-per-tenant must be positive")
    # In all, as much as the tenants of the tenants file may keep (without one: as for 16 keys).
    tenants = max(1, len(authenticator.tenants)) if authenticator is not None else 16
    store = ResponseStore(per_tenant=args.stored_responses, total=args.stored_responses * tenants,
                          bytes_per_tenant=args.stored_bytes, total_bytes=args.stored_bytes * tenants,
                          ttl_s=args.stored_ttl_s)
    background = BackgroundResponses(per_tenant=args.background_responses,
                                     total=args.background_responses * tenants)
    try:
        gateway = GatewayClient(args.gateway)
    except ValueError as e:
        raise SystemExit(f"api: --gateway: {e}") from None
    return ApiContext(gateway, models, args.max_body_bytes, authenticator, turns,
                      sse_keepalive_s=args.sse_keepalive_s, store=store, background=background,
                      ws_max_age_s=args.ws_max_age_s,
                      decoding=Decoding(args.decode_per_tenant, min(tenants, MAX_DECODE_TENANTS),
                                        preload=BODY_CONVERSIONS))


# The modules whose functions parse a body in a decoding worker process (``api/body.py``).
BODY_CONVERSIONS = ("loopwire.api.chat", "loopwire.api.compact", "loopwire.api.input_tokens")


def load_replay(path: str) -> list[common_pb2.ReplayOutput]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return [json_format.ParseDict(turn, common_pb2.ReplayOutput()) for turn in data]
    except (OSError, ValueError, TypeError, json_format.ParseError) as e:
        raise SystemExit(f"api: --replay {path}: {e}") from None


async def serve_from_args(args: argparse.Namespace, ready: Callable[[int], None] | None = None) -> None:
    ctx = build_context(args)
    ctx.decoding.start()
    host, _, port = args.listen.rpartition(":")
    protocol = functools.partial(BoundedH11Protocol, header_timeout_s=args.header_timeout_s,
                                 body_timeout_s=args.body_timeout_s)
    config = uvicorn.Config(
        build_app(ctx), host=host.strip("[]") or "127.0.0.1", port=int(port), http=protocol,  # type: ignore[arg-type]
        ws="websockets-sansio", ws_max_size=args.max_body_bytes + 64 * 1024, ws_ping_interval=args.ws_ping_s or None,
        ws_ping_timeout=args.ws_ping_s or None, log_level="warning", access_log=False, lifespan="off",
        timeout_graceful_shutdown=10, timeout_keep_alive=args.keep_alive_s,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    server = ApiServer(config, ctx)
    gc_tuning.tune_for_serving()
    sys.setswitchinterval(GIL_SWITCH_S)
    log.info("api on http://%s (gateway %s, models %s)", args.listen, args.gateway, ", ".join(ctx.models))
    try:
        await server.serve()
    finally:
        await ctx.background.shutdown()
        await ctx.gateway.close()
        ctx.decoding.shutdown()


class ApiServer(uvicorn.Server):
    """uvicorn's server that, on shutdown, first cancels the running background responses (they
    cannot outlive the process), so the streams of their clients end before the graceful wait."""

    def __init__(self, config: uvicorn.Config, ctx: ApiContext) -> None:
        super().__init__(config)
        self.ctx = ctx

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        await self.ctx.background.shutdown()
        await super().shutdown(sockets)
