"""edit_file: exact search/replace or a unified diff, applied inside the workspace.

A search string must match exactly once (or ``replace_all``), so an edit never lands in
the wrong place silently; a diff hunk must match its context lines.
"""

from __future__ import annotations

import re
from pathlib import Path

from loopwire.harness.workspace_files import ToolInputError, resolve

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def search_replace(workspace: Path, path: str, search: str, replace: str, replace_all: bool = False) -> str:
    target = resolve(workspace, path)
    if not search:
        if target.exists():
            raise ToolInputError(f"{path} exists; give `search` to edit it")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(replace, encoding="utf-8")
        return f"created {path} ({len(replace.splitlines())} lines)"
    text = _read(target, path)
    count = text.count(search)
    if count == 0:
        raise ToolInputError(f"search text not found in {path}")
    if count > 1 and not replace_all:
        raise ToolInputError(f"search text found {count} times in {path}; make it unique or set replace_all")
    target.write_text(text.replace(search, replace), encoding="utf-8")
    return f"edited {path}: {count if replace_all else 1} replacement(s)"


def apply_diff(workspace: Path, path: str, diff: str) -> str:
    target = resolve(workspace, path)
    lines = _read(target, path).splitlines(keepends=True) if target.exists() else []
    hunks = _parse(diff)
    if not hunks:
        raise ToolInputError("diff has no hunks (expected '@@ -a,b +c,d @@' headers)")
    shift = 0
    for n, (old_start, old, new) in enumerate(hunks, 1):
        at = _locate(lines, old, old_start - 1 + shift)
        if at < 0:
            raise ToolInputError(f"hunk {n} does not match {path}")
        lines[at : at + len(old)] = new
        shift += len(new) - len(old)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines), encoding="utf-8")
    return f"applied {len(hunks)} hunk(s) to {path}"


def _read(target: Path, path: str) -> str:
    try:
        return target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolInputError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ToolInputError(f"{path} is not UTF-8 text") from None


def _parse(diff: str) -> list[tuple[int, list[str], list[str]]]:
    hunks: list[tuple[int, list[str], list[str]]] = []
    for line in diff.splitlines(keepends=True):
        if m := _HUNK.match(line):
            hunks.append((int(m.group(1)), [], []))
        elif not hunks or line.startswith(("---", "+++")) and not hunks[-1][1] and not hunks[-1][2]:
            continue
        elif line.startswith("\\"):  # "\ No newline at end of file"
            continue
        else:
            tag, body = (line[0], line[1:]) if line[:1] in (" ", "-", "+") else (" ", line)
            body = body if body.endswith("\n") else body + "\n"
            if tag in " -":
                hunks[-1][1].append(body)
            if tag in " +":
                hunks[-1][2].append(body)
    return hunks


def _locate(lines: list[str], old: list[str], hint: int) -> int:
    """Where ``old`` occurs, nearest to the line the header named."""
    if not old:
        return min(max(hint + 1, 0), len(lines))
    candidates = [i for i in range(len(lines) - len(old) + 1) if _same(lines[i : i + len(old)], old)]
    return min(candidates, key=lambda i: abs(i - hint)) if candidates else -1


def _same(a: list[str], b: list[str]) -> bool:
    return all(x.rstrip("\n") == y.rstrip("\n") for x, y in zip(a, b, strict=True))
