"""read_file / list / grep inside the workspace, without a process per call.

Paths are resolved inside the workspace (symlinks included), so a tool call can never
read or write elsewhere; file names that are not UTF-8 are shown escaped.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from loopwire.harness.output import looks_binary, to_text

_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"}


class ToolInputError(ValueError):
    """Bad arguments of a tool call; the message is shown to the model."""


def resolve(workspace: Path, path: str) -> Path:
    """The path inside the workspace, or ToolInputError if it points outside."""
    if "\0" in path:
        raise ToolInputError("path contains a NUL byte")
    root = workspace.resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise ToolInputError(f"path {path!r} is outside the workspace")
    return target


def show(workspace: Path, path: Path) -> str:
    rel = os.path.relpath(path, workspace.resolve())
    return to_text(rel)


def read_file(workspace: Path, path: str, offset: int = 1, limit: int = 400) -> str:
    target = resolve(workspace, path)
    if target.is_dir():
        raise ToolInputError(f"{path} is a directory (use list)")
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        raise ToolInputError(f"{path}: no such file") from None
    if looks_binary(data):
        raise ToolInputError(f"{path} is a binary file ({len(data)} bytes)")
    lines = to_text(data).splitlines()
    start = max(offset, 1)
    chosen = lines[start - 1 : start - 1 + max(limit, 1)]
    body = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(chosen, start))
    end = start + len(chosen) - 1
    if end < len(lines) or start > 1:
        body += f"\n[lines {start}-{end} of {len(lines)}]"
    return body


def list_dir(workspace: Path, path: str = ".", depth: int = 2, max_entries: int = 500) -> str:
    root = resolve(workspace, path)
    if not root.is_dir():
        raise ToolInputError(f"{path}: not a directory")
    out: list[str] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        if len(here.parts) - base_depth >= depth:
            dirnames[:] = []
        for name in [*(d + "/" for d in dirnames), *sorted(filenames)]:
            out.append(show(workspace, here / name.rstrip("/")) + ("/" if name.endswith("/") else ""))
            if len(out) >= max_entries:
                return "\n".join([*out, f"[listing stopped at {max_entries} entries]"])
    return "\n".join(out) if out else "(empty)"


def grep(workspace: Path, pattern: str, path: str = ".", glob: str = "", max_matches: int = 200) -> str:
    try:
        regex = re.compile(pattern)
    except re.error as e:
        raise ToolInputError(f"invalid regular expression: {e}") from None
    root = resolve(workspace, path)
    files = [root] if root.is_file() else _walk_files(root, glob)
    out: list[str] = []
    for file in files:
        try:
            data = file.read_bytes()
        except OSError:
            continue
        if looks_binary(data):
            continue
        for n, line in enumerate(to_text(data).splitlines(), 1):
            if regex.search(line):
                out.append(f"{show(workspace, file)}:{n}:{line[:400]}")
                if len(out) >= max_matches:
                    return "\n".join([*out, f"[stopped at {max_matches} matches]"])
    return "\n".join(out) if out else "no matches"


def _walk_files(root: Path, glob: str) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if not glob or p.match(glob):
                found.append(p)
    return found

