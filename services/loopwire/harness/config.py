"""What a harness process is configured with: its flags, declared once on `HarnessConfig`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopwire.common.config import checked, setting
from loopwire.common.summaries import SUMMARY_MAX_TOKENS


def _whole(unit: str) -> Callable[[str], int]:
    """A size limit's ``parse``: a count of ``unit``, 1 or more."""
    return checked(int, lambda n: n >= 1, f"a whole number of {unit}, 1 or more")


SANDBOX = "sandbox tenants"


@dataclass
class HarnessConfig:
    """Each field with help is also a flag of `loopwire harness` and its `LOOPWIRE_<FLAG>` variable
    (`loopwire.common.config`); the others are set in code."""

    gateway: str = setting("127.0.0.1:50052", "gateway host:port")
    api_key: str = setting("", "key for the gateway when a caller presented none (insecure dev mode); otherwise "
                               "the caller's own key is sent")
    # Every session workspace resolves to a directory under this root (--workspace-root, default
    # <state-dir>/workspaces): StartTask.workspace may name one relative to it or an absolute path inside it.
    workspace_root: Path = Path(".state/workspaces")
    shell_timeout: float = setting(120.0, "seconds before a shell command is killed (a call may ask for another "
                                          "limit)")
    background_after: float = setting(30.0, "seconds after which a running command detaches into a handle")
    output_limit: int = setting(16384, "bytes of tool output kept (head + tail)")
    max_input_bytes: int = setting(
        1 << 20, "UTF-8 bytes of a task, instructions, an added user message or a denial reason; a larger one is "
                 "refused on receipt with INVALID_ARGUMENT naming this limit, before anything is stored, counted "
                 "or sent to the gateway (default 1 MiB)", parse=_whole("bytes"), metavar="BYTES")
    max_tool_schema_bytes: int = setting(
        64 << 10, "bytes of one tool schema: a client-declared one (a replay's tools) over it, or nested deeper "
                  "than 64 levels (`json_limits.MAX_JSON_DEPTH`), is refused on receipt with INVALID_ARGUMENT; an "
                  "MCP server's is left out of the catalog with a note (default 64 KiB)",
        parse=_whole("bytes"), metavar="BYTES")
    max_request_bytes: int = setting(
        4 << 20, "bytes of one RunRequest message; gRPC refuses a larger one (RESOURCE_EXHAUSTED) before it is "
                 "parsed (default 4 MiB, room for a task and instructions at --max-input-bytes)",
        parse=_whole("bytes"), metavar="BYTES")
    approval_retention: int = setting(900, "seconds the KV of a session waiting for approval is kept, paused (it "
                                           "may leave the device for the host tier under pressure; resumed on the "
                                           "decision, released on a cancel; at most the tenant's "
                                           "max_retention_seconds, which the gateway enforces; 0: not kept)")
    tool_choice: str = setting("auto", "sessions that do not choose: 'auto' (the model may answer or call a "
                                       "tool; an opened call is always schema-valid) or 'required' (a tool call "
                                       "every turn until the model calls `finish` with its answer: what small "
                                       "models need)", choices=["auto", "required"])
    tool_set: str = setting("full", "tools of new sessions: 'full' (shell, read_file, edit_file, list, grep, "
                                    "wait, exec_command, write_stdin) or 'shell' (shell only, and finish with "
                                    "--tool-choice required: the one choice a very small model makes well)",
                            choices=["full", "shell"])
    max_turns: int = setting(200, "turns per run when the task does not say")
    # Deferred tools (found with tool_search): factories of `tool_catalog.DeferredTool` run in this
    # process, and MCP servers (`mcp_client.McpServer`, --mcp-server) whose tools join the catalog.
    deferred_tools: list[Callable[[], Any]] = field(default_factory=list)
    mcp_servers: list[Any] = field(default_factory=list)
    tool_search_budget: int = setting(4000, "token budget (cl100k) of the schemas one tool_search appends "
                                            "(compacted to fit)")
    tool_search_threshold: float = setting(
        0.1, "offer tool_search only when the deferred tools' schemas take more than this share of the context "
             "window; a smaller catalog is offered directly as tools (0: always tool_search; MCP servers, or a "
             "window neither --context-window nor the gateway gave: tool_search)", metavar="SHARE",
        parse=checked(float, lambda share: 0 <= share <= 1, "a share of the context window from 0 to 1 "
                                                            "(0: always tool_search)"))
    code_mode: bool = setting(False, "offer exec_js: scripts call the tools from an isolated V8 context")
    js_timeout: float = setting(60.0, "wall time of one exec_js script before it is stopped", flag="js-timeout-s",
                                parse=checked(float, lambda s: 0 < s < math.inf, "a number of seconds above 0"),
                                metavar="SECONDS")
    js_memory_mb: int = setting(128, "V8 heap limit of one exec_js script; a script over it is stopped",
                                parse=_whole("MiB"), metavar="MIB")
    exec_sessions_per_tenant: int = setting(8, "interactive exec_command sessions one tenant may run at once, "
                                               "over all its sessions")
    # Conversation compaction: past `compact_at` of `context_window` tokens (0: never), old tool
    # outputs are masked (`compact_mask`) and, when the prompt is still over `compact_target` of the
    # window, older turns are summarized; about `compact_keep` of the window of recent items is kept.
    context_window: int = setting(0, "the model's context window in tokens; past --compact-at of it older turns "
                                     "are summarized (0: the window the gateway reports for its model; "
                                     "--compact-at 0 turns compaction off)")
    compact_at: float = setting(0.9, "share of the context window at which compaction runs")
    compact_keep: float = 0.25
    compact_target: float = 0.5
    compact_mask: bool = True
    summary_max_tokens: int = SUMMARY_MAX_TOKENS
    # Tenants apart in the shell sandbox (harness as root; `sandbox.py`, `tenant_uids.py`, `tenant_limits.py`,
    # `egress.py`); uid assignments are kept in <workspace_root>/.tenant-uids.json.
    sandbox_uid_base: int = setting(61000, "first host uid of the range tenants' commands run as (one uid per "
                                           "tenant; no account needs to exist, none should use the range)",
                                    group=SANDBOX)
    sandbox_uid_count: int = setting(1000, "how many uids the range has (the most tenants this harness serves)",
                                     group=SANDBOX)
    sandbox_processes: int = setting(1024, "processes (and threads) of one tenant's commands together: "
                                           "RLIMIT_NPROC per tenant uid, and pids.max of its cgroup", group=SANDBOX)
    sandbox_memory_mb: int = setting(16384, "MiB of memory of one tenant's commands together (cgroup memory.max; "
                                            "without cgroup v2 only RLIMIT_AS per process holds)", group=SANDBOX)
    sandbox_cpus: float = setting(0.0, "CPUs one tenant's commands may use together (cgroup cpu.max; 0: uncapped)",
                                  group=SANDBOX)
    sandbox_cgroup: str = setting("", "a delegated, empty cgroup v2 directory for the tenants' groups (default: "
                                      "find one below the harness's own cgroup; 'none': rlimits only)", group=SANDBOX)
    sandbox_workspace_quota_mb: int = setting(
        10240, "MiB one tenant's workspaces may hold together, a filesystem of that size per tenant "
               "(--sandbox-volumes); without one, MiB one workspace may hold, checked while a command runs, which "
               "is killed when it grows the workspace past it (every file bounded by RLIMIT_FSIZE; 0: none)",
        group=SANDBOX)
    sandbox_volumes: bool = setting(
        True, "bound each tenant's workspaces by an ext4 image of the quota's size, loop-mounted on its tree "
              "(<workspace-root>/.tenant-volumes; a harness running as root, where loop devices mount): a write "
              "past the quota fails with ENOSPC; where none can be mounted the quota stays a check (default on)",
        group=SANDBOX)
    sandbox_tmp_mb: int = setting(64, "MiB of each command's /tmp and of its /dev/shm (tmpfs: host memory once "
                                      "filled)", group=SANDBOX)
    sandbox_tmpfs_budget_mb: int = setting(
        1536, "MiB of /tmp and /dev/shm one tenant's running commands and exec sessions may hold together (each "
              "takes 2 x --sandbox-tmp-mb while it runs); one past it is refused with RESOURCE_EXHAUSTED",
        group=SANDBOX)
    # network=true commands reach only these host:port globs, through the proxy (--sandbox-egress-allow).
    sandbox_egress_allow: list[str] = field(default_factory=lambda: ["*:80", "*:443"])
    sandbox_per_session: bool = setting(
        True, "start a session's sandbox once and run each of its commands inside it, in pid, mount and IPC "
              "namespaces of the command's own (a kill still ends the command's whole process tree), so a command "
              "costs a few forks instead of a bubblewrap; --no-sandbox-per-session starts a sandbox per command "
              "(network=true commands always get their own; default on)", group=SANDBOX)


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
