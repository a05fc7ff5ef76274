"""`loopwire harness`: flags and startup of the harness service."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
from collections.abc import Callable
from pathlib import Path

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.common.config import env as _env
from loopwire.common.service_flags import add_insecure_dev_argument, load_authenticator
from loopwire.harness import exec_sessions
from loopwire.harness import metrics as harness_metrics
from loopwire.harness.config import HarnessConfig
from loopwire.harness.sandbox import Sandbox, SandboxLimits
from loopwire.harness.service import HarnessService
from loopwire.harness.store import SessionStore, Status, StoreError, open_store
from loopwire.v1 import harness_pb2, harness_pb2_grpc

log = logging.getLogger("loopwire.harness")


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a number of seconds above 0")
    return value


def _positive_mib(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number of MiB, 1 or more")
    return value


def _positive_bytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number of bytes, 1 or more")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a share of the context window from 0 to 1 "
                                         "(0: always tool_search)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default=_env("listen", "127.0.0.1:50051"), help="host:port (port 0 = any)")
    parser.add_argument("--gateway", default=_env("gateway", "127.0.0.1:50052"), help="gateway host:port")
    parser.add_argument("--api-key", default=_env("api-key", ""),
                        help="key for the gateway when a caller presented none (insecure dev mode); otherwise "
                             "the caller's own key is sent (env LOOPWIRE_API_KEY)")
    parser.add_argument("--auth-config", default=_env("auth_config", ""),
                        help="JSON or TOML file of tenants and hashed keys, the gateway's format "
                             "(required unless --insecure-dev; env LOOPWIRE_AUTH_CONFIG)")
    add_insecure_dev_argument(parser)
    parser.add_argument("--state-dir", default=_env("state-dir", ".state"))
    parser.add_argument("--sessions", default=_env("sessions", ""),
                        help="where sessions live: sqlite:///relative/path, sqlite:////absolute/path (one harness), or "
                             "postgresql://user@host:port/database (several harness replicas share sessions; "
                             "default: sqlite <state-dir>/harness.db; env LOOPWIRE_SESSIONS)")
    parser.add_argument("--db", default=_env("db", ""), help="SQLite file (the same as --sessions sqlite:///FILE)")
    parser.add_argument("--workspace-root", default=_env("workspace-root", ""),
                        help="where fresh workspaces go (default <state-dir>/workspaces)")
    parser.add_argument("--shell-timeout", type=float, default=float(_env("shell-timeout", "120")),
                        help="seconds before a shell command is killed (a call may ask for another limit)")
    parser.add_argument("--background-after", type=float, default=float(_env("background-after", "30")),
                        help="seconds after which a running command detaches into a handle")
    parser.add_argument("--output-limit", type=int, default=int(_env("output-limit", "16384")),
                        help="bytes of tool output kept (head + tail)")
    parser.add_argument("--max-input-bytes", type=_positive_bytes, default=int(_env("max-input-bytes", str(1 << 20))),
                        metavar="BYTES",
                        help="UTF-8 bytes of a task, instructions, an added user message or a denial reason; a "
                             "larger one is refused on receipt with INVALID_ARGUMENT naming this limit, before "
                             "anything is stored, counted or sent to the gateway (default 1 MiB; env "
                             "LOOPWIRE_MAX_INPUT_BYTES)")
    parser.add_argument("--max-tool-schema-bytes", type=_positive_bytes,
                        default=int(_env("max-tool-schema-bytes", str(64 << 10))), metavar="BYTES",
                        help="bytes of one tool schema: a client-declared one (a replay's tools) over it, or "
                             "nested deeper than 64 levels, is refused on receipt with INVALID_ARGUMENT; an MCP "
                             "server's is left out of the catalog with a note (default 64 KiB; env "
                             "LOOPWIRE_MAX_TOOL_SCHEMA_BYTES)")
    parser.add_argument("--max-request-bytes", type=_positive_bytes,
                        default=int(_env("max-request-bytes", str(4 << 20))), metavar="BYTES",
                        help="bytes of one RunRequest message; gRPC refuses a larger one (RESOURCE_EXHAUSTED) "
                             "before it is parsed (default 4 MiB, room for a task and instructions at --max-input-bytes; "
                             "env LOOPWIRE_MAX_REQUEST_BYTES)")
    parser.add_argument("--approval-retention", type=int, default=int(_env("approval-retention", "900")),
                        help="seconds the KV of a session waiting for approval stays held (released on the decision or a cancel; "
                             "at most the tenant's max_retention_seconds, which the gateway enforces; 0: never held)")
    parser.add_argument("--tool-choice", choices=["auto", "required"], default=_env("tool-choice", "auto"),
                        help="sessions that do not choose: 'auto' (the model may answer or call a tool; an opened "
                             "call is always schema-valid) or 'required' (a tool call every turn until the model "
                             "calls `finish` with its answer: what small models need)")
    parser.add_argument("--tool-set", choices=["full", "shell"], default=_env("tool-set", "full"),
                        help="tools of new sessions: 'full' (shell, read_file, edit_file, list, grep, wait, "
                             "exec_command, write_stdin) or 'shell' (shell only, and finish with --tool-choice "
                             "required: the one choice a very small model makes well)")
    parser.add_argument("--max-turns", type=int, default=int(_env("max-turns", "200")),
                        help="turns per run when the task does not say")
    parser.add_argument("--mcp-server", action="append", default=[], metavar="NAME=COMMAND ARGS...|NAME=URL",
                        help="an MCP server whose tools sessions find with tool_search (stdio command or "
                             "streamable HTTP URL); repeat for more")
    parser.add_argument("--tool-search-budget", type=int, default=int(_env("tool-search-budget", "4000")),
                        help="token budget of the schemas one tool_search appends (compacted to fit)")
    parser.add_argument("--tool-search-threshold", type=_share, default=_env("tool-search-threshold", "0.1"),
                        metavar="SHARE",
                        help="offer tool_search only when the deferred tools' schemas take more than this share "
                             "of the context window; a smaller catalog is offered directly as tools (0: always "
                             "tool_search; MCP servers, or a window neither --context-window nor the gateway "
                             "gave: tool_search)")
    parser.add_argument("--code-mode", action="store_true", default=_env("code-mode", "") in ("1", "true"),
                        help="offer exec_js: scripts call the tools from an isolated V8 context")
    parser.add_argument("--js-timeout-s", type=_positive_seconds, default=_env("js-timeout-s", "60"),
                        metavar="SECONDS", help="wall time of one exec_js script before it is stopped")
    parser.add_argument("--js-memory-mb", type=_positive_mib, default=_env("js-memory-mb", "128"), metavar="MIB",
                        help="V8 heap limit of one exec_js script; a script over it is stopped")
    parser.add_argument("--exec-sessions-per-tenant", type=int, default=int(_env("exec-sessions-per-tenant", "8")),
                        help="interactive exec_command sessions one tenant may run at once, over all its sessions")
    parser.add_argument("--context-window", type=int, default=int(_env("context-window", "0")),
                        help="the model's context window in tokens; past --compact-at of it older turns are "
                             "summarized (0: the window the gateway reports for its model; --compact-at 0 turns "
                             "compaction off)")
    parser.add_argument("--compact-at", type=float, default=float(_env("compact-at", "0.9")),
                        help="share of the context window at which compaction runs")
    _add_sandbox_arguments(parser)


def _add_sandbox_arguments(parser: argparse.ArgumentParser) -> None:
    """Tenants apart in the shell sandbox (a harness running as root)."""
    sandbox = parser.add_argument_group("sandbox tenants")
    sandbox.add_argument("--sandbox-uid-base", type=int, default=int(_env("sandbox-uid-base", "61000")),
                         help="first host uid of the range tenants' commands run as (one uid per tenant; no "
                              "account needs to exist, none should use the range)")
    sandbox.add_argument("--sandbox-uid-count", type=int, default=int(_env("sandbox-uid-count", "1000")),
                         help="how many uids the range has (the most tenants this harness serves)")
    sandbox.add_argument("--sandbox-processes", type=int, default=int(_env("sandbox-processes", "1024")),
                         help="processes (and threads) of one tenant's commands together: RLIMIT_NPROC per "
                              "tenant uid, and pids.max of its cgroup")
    sandbox.add_argument("--sandbox-memory-mb", type=int, default=int(_env("sandbox-memory-mb", "16384")),
                         help="MiB of memory of one tenant's commands together (cgroup memory.max; without "
                              "cgroup v2 only RLIMIT_AS per process holds)")
    sandbox.add_argument("--sandbox-cpus", type=float, default=float(_env("sandbox-cpus", "0")),
                         help="CPUs one tenant's commands may use together (cgroup cpu.max; 0: uncapped)")
    sandbox.add_argument("--sandbox-cgroup", default=_env("sandbox-cgroup", ""),
                         help="a delegated, empty cgroup v2 directory for the tenants' groups (default: find "
                              "one below the harness's own cgroup; 'none': rlimits only)")
    sandbox.add_argument("--sandbox-workspace-quota-mb", type=int,
                         default=int(_env("sandbox-workspace-quota-mb", "10240")),
                         help="MiB one tenant's workspaces may hold together, a filesystem of that size per "
                              "tenant (--sandbox-volumes); without one, MiB one workspace may hold, checked while a "
                              "command runs, which is killed when it grows the workspace past it (every file bounded "
                              "by RLIMIT_FSIZE; 0: none; env LOOPWIRE_SANDBOX_WORKSPACE_QUOTA_MB)")
    sandbox.add_argument("--sandbox-volumes", action=argparse.BooleanOptionalAction,
                         default=_env("sandbox-volumes", "1") not in ("0", "false", "no"),
                         help="bound each tenant's workspaces by an ext4 image of the quota's size, loop-mounted "
                              "on its tree (<workspace-root>/.tenant-volumes; a harness running as root, where loop "
                              "devices mount): a write past the quota fails with ENOSPC; where none can be mounted "
                              "the quota stays a check (default on; env LOOPWIRE_SANDBOX_VOLUMES)")
    sandbox.add_argument("--sandbox-tmp-mb", type=int, default=int(_env("sandbox-tmp-mb", "64")),
                         help="MiB of each command's /tmp and of its /dev/shm (tmpfs: host memory once filled; "
                              "env LOOPWIRE_SANDBOX_TMP_MB)")
    sandbox.add_argument("--sandbox-tmpfs-budget-mb", type=int, default=int(_env("sandbox-tmpfs-budget-mb", "1536")),
                         help="MiB of /tmp and /dev/shm one tenant's running commands and exec sessions may hold "
                              "together (each takes 2 x --sandbox-tmp-mb while it runs); one past it is refused "
                              "with RESOURCE_EXHAUSTED (env LOOPWIRE_SANDBOX_TMPFS_BUDGET_MB)")
    sandbox.add_argument("--sandbox-egress-allow", action="append", default=None, metavar="HOST:PORT",
                         help="where network=true commands may connect through the harness's proxy, a glob in "
                              "each part (e.g. *.example.org:443); repeat for more; a loopback or private address "
                              "only when named as that IP literal (default *:80 and *:443; env "
                              "LOOPWIRE_SANDBOX_EGRESS_ALLOW, comma-separated; 'none': nothing)")
    sandbox.add_argument("--sandbox-per-session", action=argparse.BooleanOptionalAction,
                         default=_env("sandbox-per-session", "1") not in ("0", "false", "no"),
                         help="start a session's sandbox once and run each of its commands inside it, in pid, "
                              "mount and IPC namespaces of the command's own (a kill still ends the command's "
                              "whole process tree), so a command costs a few forks instead of a bubblewrap; "
                              "--no-sandbox-per-session starts a sandbox per command (network=true commands "
                              "always get their own; default on; env LOOPWIRE_SANDBOX_PER_SESSION)")


def _sandbox_config(args: argparse.Namespace) -> dict:
    allow = args.sandbox_egress_allow or [a for a in _env("sandbox-egress-allow", "*:80,*:443").split(",") if a]
    return dict(sandbox_uid_base=args.sandbox_uid_base, sandbox_uid_count=args.sandbox_uid_count,
                sandbox_processes=args.sandbox_processes, sandbox_memory_mb=args.sandbox_memory_mb,
                sandbox_cpus=args.sandbox_cpus, sandbox_cgroup=args.sandbox_cgroup,
                sandbox_workspace_quota_mb=args.sandbox_workspace_quota_mb, sandbox_volumes=args.sandbox_volumes,
                sandbox_tmp_mb=args.sandbox_tmp_mb, sandbox_tmpfs_budget_mb=args.sandbox_tmpfs_budget_mb,
                sandbox_egress_allow=[] if allow == ["none"] else allow, sandbox_per_session=args.sandbox_per_session)


def config_from_args(args: argparse.Namespace) -> HarnessConfig:
    state = Path(args.state_dir)
    return HarnessConfig(
        gateway=args.gateway, api_key=args.api_key,
        workspace_root=Path(args.workspace_root) if args.workspace_root else state / "workspaces",
        shell_timeout=args.shell_timeout, background_after=args.background_after, output_limit=args.output_limit,
        max_input_bytes=args.max_input_bytes, max_tool_schema_bytes=args.max_tool_schema_bytes,
        max_request_bytes=args.max_request_bytes,
        approval_retention=args.approval_retention, max_turns=args.max_turns, tool_choice=args.tool_choice,
        tool_set=args.tool_set,
        mcp_servers=_mcp_servers(args.mcp_server), tool_search_budget=args.tool_search_budget,
        tool_search_threshold=args.tool_search_threshold,
        code_mode=args.code_mode, js_timeout=args.js_timeout_s, js_memory_mb=args.js_memory_mb,
        context_window=args.context_window, compact_at=args.compact_at,
        exec_sessions_per_tenant=args.exec_sessions_per_tenant,
        **_sandbox_config(args))


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
