"""What a harness process is configured with (from `server.py` flags)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
    # Seconds of KV retention asked for on turns whose calls may wait for a human.
    approval_retention: int = 900
    max_turns: int = 200


# Fixed for every session (no dates, paths or policy), so sessions share a cached prefix.
DEFAULT_INSTRUCTIONS = (
    "You are a coding agent working in a sandboxed workspace. Use the tools to inspect and change "
    "files and to run commands; the working directory of every command is the workspace. "
    "Prefer precise commands (grep, read_file with offsets) over dumping large outputs. "
    "When a command runs long it returns a handle: its result arrives by itself, or call wait; "
    "never poll with sleep. When the task is done, answer with a short summary and no tool call."
)
