"""``loopwire api``: flags (each defaulting from ``LOOPWIRE_<FLAG>``) and startup of the
OpenAI-compatible front door, a separate process that is a gRPC client of the gateway.

Separate, so conversation state, deltas, tokenization, safety and routing stay in the gateway
alone (this process holds no conversation) and the HTTP stack scales and restarts on its own.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from pathlib import Path

import uvicorn
from google.protobuf import json_format

from loopwire.api.app import build_app
from loopwire.api.context import ApiContext
from loopwire.api.gateway_client import GatewayClient
from loopwire.common.config import env as _env
from loopwire.common.config import env_int as _env_int
from loopwire.common.service_flags import add_insecure_dev_argument, check_insecure_dev, load_authenticator
from loopwire.v1 import common_pb2

log = logging.getLogger("loopwire.api")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default=_env("listen", "127.0.0.1:8080"),
                        help="host:port of the HTTP/WebSocket server (env LOOPWIRE_LISTEN)")
    parser.add_argument("--gateway", default=_env("gateway", "127.0.0.1:50052"),
                        help="gateway address, host:port (env LOOPWIRE_GATEWAY)")
    parser.add_argument("--auth-config", default=_env("auth_config", ""),
                        help="the gateway's tenants file, to refuse bad keys here too (required unless "
                             "--insecure-dev; the gateway checks every key either way) (env LOOPWIRE_AUTH_CONFIG)")
    parser.add_argument("--models", default=_env("models", "loopwire"),
                        help="comma-separated model names clients may ask for (env LOOPWIRE_MODELS)")
    parser.add_argument("--max-body-bytes", type=int, default=_env_int("max_body_bytes", 16 * 1024 * 1024),
                        help="largest request body or WebSocket message; larger is 413 (env LOOPWIRE_MAX_BODY_BYTES)")
    parser.add_argument("--replay", default=_env("replay", ""),
                        help="JSON file of recorded assistant turns ([{\"text\": ..., \"function_calls\": [{\"call_id\", "
                             "\"name\", \"arguments\"}]}, ...]): response n replays turn n (cycling) while the engine "
                             "does the real work; for deterministic demos and tests (env LOOPWIRE_REPLAY)")
    parser.add_argument("--sse-keepalive-s", type=float, default=float(_env("sse_keepalive_s", "15")),
                        help="seconds without an event (a long prefill) before a streamed response sends an SSE "
                             "comment line, and again every so often; 0: never (env LOOPWIRE_SSE_KEEPALIVE_S)")
    parser.add_argument("--ws-ping-s", type=float, default=float(_env("ws_ping_s", "20")),
                        help="WebSocket mode: a protocol ping this often (a client that does not answer within the "
                             "same time is dropped); 0: never (env LOOPWIRE_WS_PING_S)")
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
    if args.sse_keepalive_s < 0 or args.ws_ping_s < 0:
        raise SystemExit("api: --sse-keepalive-s and --ws-ping-s must be 0 (off) or positive")
    return ApiContext(GatewayClient(args.gateway), models, args.max_body_bytes, authenticator, turns,
                      sse_keepalive_s=args.sse_keepalive_s)


def load_replay(path: str) -> list[common_pb2.ReplayOutput]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return [json_format.ParseDict(turn, common_pb2.ReplayOutput()) for turn in data]
    except (OSError, ValueError, TypeError, json_format.ParseError) as e:
        raise SystemExit(f"api: --replay {path}: {e}") from None


async def serve_from_args(args: argparse.Namespace, ready: Callable[[int], None] | None = None) -> None:
    ctx = build_context(args)
    host, _, port = args.listen.rpartition(":")
    config = uvicorn.Config(
        build_app(ctx), host=host.strip("[]") or "127.0.0.1", port=int(port), ws="websockets-sansio",
        ws_max_size=args.max_body_bytes + 64 * 1024, ws_ping_interval=args.ws_ping_s or None,
        ws_ping_timeout=args.ws_ping_s or None, log_level="warning", access_log=False, lifespan="off",
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    log.info("api on http://%s (gateway %s, models %s)", args.listen, args.gateway, ", ".join(ctx.models))
    try:
        await server.serve()
    finally:
        await ctx.gateway.close()
