"""`loopwire harness`: flags (declared once, on `HarnessStartup` and `HarnessConfig`) and startup."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.common.config import add_flags, env, from_args, setting
from loopwire.common.service_flags import add_insecure_dev_argument, load_authenticator
from loopwire.harness import exec_sessions
from loopwire.harness import metrics as harness_metrics
from loopwire.harness.config import SANDBOX, HarnessConfig
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_limits import SandboxLimits
from loopwire.harness.service import HarnessService
from loopwire.harness.store import SessionStore, Status, StoreError, open_store
from loopwire.v1 import harness_pb2, harness_pb2_grpc

log = logging.getLogger("loopwire.harness")


@dataclass
class HarnessStartup:
    """What `loopwire harness` starts with beside `HarnessConfig`: where it listens and keeps its state."""

    listen: str = setting("127.0.0.1:50051", "host:port (port 0 = any)")
    auth_config: str = setting("", "JSON or TOML file of tenants and hashed keys, the gateway's format (required "
                                   "unless --insecure-dev)")
    state_dir: str = setting(".state", "where the session database and workspaces go unless --sessions and "
                                       "--workspace-root say otherwise")
    sessions: str = setting("", "where sessions live: sqlite:///relative/path, sqlite:////absolute/path (one "
                                "harness), or postgresql://user@host:port/database (several harness replicas share "
                                "sessions; default: sqlite <state-dir>/harness.db)")
    db: str = setting("", "SQLite file (the same as --sessions sqlite:///FILE)")
    workspace_root: str = setting("", "where fresh workspaces go (default <state-dir>/workspaces)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, HarnessStartup)
    add_insecure_dev_argument(parser)
    parser.add_argument("--mcp-server", action="append", default=[], metavar="NAME=COMMAND ARGS...|NAME=URL",
                        help="an MCP server whose tools sessions find with tool_search (stdio command or "
                             "streamable HTTP URL); repeat for more")
    groups: dict = {}
    add_flags(parser, HarnessConfig, groups)
    groups[SANDBOX].add_argument(
        "--sandbox-egress-allow", action="append", default=None, metavar="HOST:PORT",
        help="where network=true commands may connect through the harness's proxy, a glob in each part (e.g. "
             "*.example.org:443); repeat for more; a loopback or private address only when named as that IP "
             "literal (default *:80 and *:443; env LOOPWIRE_SANDBOX_EGRESS_ALLOW, comma-separated; 'none': nothing)")


def config_from_args(args: argparse.Namespace) -> HarnessConfig:
    allow = args.sandbox_egress_allow or [a for a in env("sandbox-egress-allow", "*:80,*:443").split(",") if a]
    return from_args(HarnessConfig, args,
                     workspace_root=Path(args.workspace_root) if args.workspace_root
                     else Path(args.state_dir) / "workspaces",
                     mcp_servers=_mcp_servers(args.mcp_server), sandbox_egress_allow=[] if allow == ["none"] else allow)


def _mcp_servers(specs: list[str]) -> list:
    if not specs:
        return []
    from loopwire.harness import mcp_client  # the MCP SDK only when servers are configured

    return [mcp_client.parse_spec(s) for s in specs]


def make_sandbox(config: HarnessConfig) -> Sandbox:
    """The shell sandbox of a harness's configuration: a uid, limits and a quota per tenant."""
    limits = SandboxLimits(processes=config.sandbox_processes, memory=config.sandbox_memory_mb << 20,
                           cpus=config.sandbox_cpus, workspace_quota=config.sandbox_workspace_quota_mb << 20,
                           tmp_size=config.sandbox_tmp_mb << 20, tmpfs_budget=config.sandbox_tmpfs_budget_mb << 20)
    sandbox = Sandbox(output_limit=config.output_limit, limits=limits, uid_base=config.sandbox_uid_base,
                      uid_count=config.sandbox_uid_count, uid_state=config.workspace_root / ".tenant-uids.json",
                      workspace_root=config.workspace_root, cgroup=config.sandbox_cgroup,
                      egress_allow=config.sandbox_egress_allow, per_session=config.sandbox_per_session,
                      volumes=config.sandbox_volumes)
    exec_sessions.configure(sandbox, config.exec_sessions_per_tenant)
    return sandbox


def build(config: HarnessConfig, sessions: Path | str, authenticator: Authenticator
          ) -> tuple[HarnessService, SessionStore]:
    """The servicer with its store (a path or a --sessions URL) and a probed sandbox (shared by the
    server and in-process tests)."""
    store = open_store(sessions)
    interrupted = store.mark_interrupted()
    if interrupted:
        log.info("%d session(s) were running when the harness stopped; resume them with ResumeSession", interrupted)
    sandbox = make_sandbox(config)
    config.workspace_root.mkdir(parents=True, exist_ok=True)
    if reason := sandbox.probe(config.workspace_root / ".sandbox-probe"):
        log.error("SANDBOX UNAVAILABLE: %s", reason)
    else:
        if sandbox.warning:
            log.warning("SANDBOX: %s", sandbox.warning)
        for line in sandbox.describe():
            log.info("sandbox: %s", line)
    return HarnessService(config, store, sandbox, authenticator), store


async def serve_from_args(args: argparse.Namespace, ready: Callable[[int], None] | None = None) -> None:
    config = config_from_args(args)
    authenticator = load_authenticator(args, "harness")
    if args.sessions and args.db:
        raise SystemExit("harness: give --sessions or --db, not both")
    sessions = args.sessions or args.db or Path(args.state_dir) / "harness.db"
    try:
        service, store = build(config, sessions, authenticator)
    except (StoreError, ValueError) as e:
        raise SystemExit(f"harness: {e}") from None
    log.info("sessions in %s", store.describe())
    harness_metrics.watch(lambda: len(service.active), lambda: harness_metrics.count_waiting_approvals(store))
    # Replicas sharing the store: keep this one's leases fresh; cancels asked on another replica end runs here.
    loop = asyncio.get_running_loop()

    def cancel_here(session_id: str) -> None:
        loop.call_soon_threadsafe(service.cancel, session_id, Status.SESSION_STATUS_CANCELLED)

    store.on_cancel_requested = cancel_here
    store.start_heartbeat()
    server = grpc_server.make_server(max_receive_bytes=config.max_request_bytes)
    harness_pb2_grpc.add_HarnessServiceServicer_to_server(service, server)
    name = harness_pb2.DESCRIPTOR.services_by_name["HarnessService"].full_name

    async def on_stop() -> None:
        store.close()
        service.sandbox.release_volumes()

    await grpc_server.serve(server, args.listen, [name], ready=ready, on_stop=on_stop)
