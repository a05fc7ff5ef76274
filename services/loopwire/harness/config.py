"""What a harness process is configured with (from `server.py` flags)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopwire.common.summaries import SUMMARY_MAX_TOKENS


@dataclass
class HarnessConfig:
    gateway: str = "127.0.0.1:50052"
    api_key: str = ""
    # Every session workspace resolves to a directory under this root (default <state-dir>/workspaces):
    # StartTask.workspace may name one relative to it or an absolute path inside it, nothing else.
    workspace_root: Path = Path(".state/workspaces")
    shell_timeout: float = 120.0
    background_after: float = 30.0
    output_limit: int = 16384
    # What one RunRequest may carry, refused on receipt (INVALID_ARGUMENT naming the limit) before anything is
    # stored, counted or sent on: UTF-8 bytes of a task, instructions, an added user message or a denial reason;
    # bytes of one client-declared tool schema (and JSON nesting: `json_limits.MAX_JSON_DEPTH`; an MCP tool over
    # either is left out of the catalog); bytes of the whole message, which gRPC refuses (RESOURCE_EXHAUSTED)
    # before it is even parsed.
    max_input_bytes: int = 1 << 20
    max_tool_schema_bytes: int = 64 << 10
    max_request_bytes: int = 4 << 20
    # Seconds the KV of a session waiting for approval is held (HoldKv; released on the decision).
    approval_retention: int = 900
    max_turns: int = 200
    # How turns use the tools when a StartTask does not say: "auto" (calls when the model opens
    # one, always schema-valid) or "required" (a call every turn, until `finish`).
    tool_choice: str = "auto"
    # "full": shell, file tools, wait, exec_command/write_stdin (and the extensions); "shell": shell
    # (and finish) only, the one choice a very small model makes well.
    tool_set: str = "full"
    # Deferred tools (found with tool_search): factories of `tool_catalog.DeferredTool` run in this
    # process, and MCP servers (`mcp_client.McpServer`) whose tools join the catalog.
    deferred_tools: list[Callable[[], Any]] = field(default_factory=list)
    mcp_servers: list[Any] = field(default_factory=list)
    # Token budget (cl100k) of the schemas one tool_search appends: they are compacted to fit.
    tool_search_budget: int = 4000
    # tool_search only when the deferred catalog's schemas (cl100k tokens) take more than this share of
    # the context window (--context-window, else the window the gateway reported); a smaller catalog is
    # offered directly as tools. 0: always tool_search. An unknown window or MCP servers: tool_search.
    tool_search_threshold: float = 0.10
    # Conversation compaction: past `compact_at` of `context_window` tokens (0: never), old tool
    # outputs are masked (`compact_mask`) and, when the prompt is still over `compact_target` of the
    # window, older turns are summarized; about `compact_keep` of the window of recent items is kept.
    context_window: int = 0
    compact_at: float = 0.9
    compact_keep: float = 0.25
    compact_target: float = 0.5
    compact_mask: bool = True
    summary_max_tokens: int = SUMMARY_MAX_TOKENS
    # Code mode: the `exec_js` tool (a script calls the tools from an isolated V8 context), with the
    # wall time (s) of one script and its V8 heap limit (MiB).
    code_mode: bool = False
    js_timeout: float = 60.0
    js_memory_mb: int = 128
    # Interactive commands on a pty (exec_command) one tenant may run at once, over all its sessions.
    exec_sessions_per_tenant: int = 8
    # Tenants apart in the shell sandbox (harness as root; `sandbox.py`, `tenant_uids.py`, `tenant_limits.py`,
    # `egress.py`): each tenant's commands run as a host uid of its own from [uid_base, uid_base + uid_count)
    # (assignments kept in <workspace_root>/.tenant-uids.json); processes, memory (MiB) and CPUs per tenant
    # (a cgroup v2 group under `sandbox_cgroup`: '' finds one, 'none' uses rlimits only); bytes per
    # workspace (MiB; 0: no quota); network=true reaches only these host:port globs, through the proxy.
    sandbox_uid_base: int = 61000
    sandbox_uid_count: int = 1000
    sandbox_processes: int = 1024
    sandbox_memory_mb: int = 16384
    sandbox_cpus: float = 0.0
    sandbox_cgroup: str = ""
    sandbox_workspace_quota_mb: int = 10240
    # A filesystem of the quota's size per tenant (its tree loop-mounted; `tenant_volumes.py`; harness as root)
    # bounds what its commands write; off, or where none can be mounted, the quota is a check per workspace.
    sandbox_volumes: bool = True
    # Each command's /tmp and /dev/shm (tmpfs, MiB each), and what a tenant's running commands and exec sessions
    # may hold of them together (MiB; 2 x sandbox_tmp_mb per command): a command past it is refused.
    sandbox_tmp_mb: int = 64
    sandbox_tmpfs_budget_mb: int = 1536
    sandbox_egress_allow: list[str] = field(default_factory=lambda: ["*:80", "*:443"])
    # One sandbox per session, each command in namespaces of its own inside it (`session_sandbox.py`);
    # off: a sandbox per command.
    sandbox_per_session: bool = True


# Fixed for every session (no dates, paths or policy), so sessions share a cached prefix.
DEFAULT_INSTRUCTIONS = (
    "You are a coding agent working in a sandboxed workspace. Use the tools to inspect and change "
    "files and to run commands; the working directory of every command is the workspace. "
    "Prefer precise commands (grep, read_file with offsets) over dumping large outputs. "
    "When a command runs long it returns a handle: its result arrives by itself, or call wait; "
    "never poll with sleep. When the task is done, answer with a short summary and no tool call."
)

# With tool choice "required" every reply is one call and the end is a call too. Worked examples
# in the model's own call syntax (Hermes, the format loopwire constrains) are what a 135M model
# follows; prose rules it does not (bench/results/tasks.md).
_EXAMPLES = (
    ("create notes.txt containing hello", "echo hello > notes.txt"),
    ("how many files are here?", "ls | wc -l"),
    ("show the contents of todo.txt", "cat todo.txt"),
    ("which file defines the function main?", "grep -l 'def main' *"),
    ("rename a.txt to b.txt", "mv a.txt b.txt"),
)
REQUIRED_TOOLS_INSTRUCTIONS = (
    "You are an agent that does tasks by running shell commands in a sandboxed workspace. Reply with "
    "exactly one tool call. Examples of a first call:\n"
    + "\n".join(f'Task: {task}\n<tool_call>\n{{"name": "shell", "arguments": {{"command": {json.dumps(cmd)}}}}}'
                f"\n</tool_call>" for task, cmd in _EXAMPLES)
    + "\nAfter the command's output, call finish with the answer for the user."
)
