"""edit_file: exact search/replace or a unified diff, applied inside the workspace.

A search string must match exactly once (or ``replace_all``), so an edit never lands in
the wrong place silently; a diff hunk must match its context lines. Files are opened through
``workspace_files`` (never following a link out of the workspace, never a FIFO or device)
and replaced atomically by a rename inside the directory that holds them.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path

from loopwire.harness.workspace_files import (
    EDIT_SIZE_LIMIT,
    NoSuchFile,
    ToolInputError,
    give_to_sandbox,
    open_regular,
    read_bounded,
    target,
)

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def search_replace(workspace: Path, path: str, search: str, replace: str, replace_all: bool = False) -> str:
    if not search:
        if _exists(workspace, path):
            raise ToolInputError(f"{path} exists; give `search` to edit it")
        _write(workspace, path, replace)
        return f"created {path} ({len(replace.splitlines())} lines)"
    text = _read(workspace, path)
    count = text.count(search)
    if count == 0:
        raise ToolInputError(f"search text not found in {path}")
    if count > 1 and not replace_all:
        raise ToolInputError(f"search text found {count} times in {path}; make it unique or set replace_all")
    _write(workspace, path, text.replace(search, replace))
    return f"edited {path}: {count if replace_all else 1} replacement(s)"


def apply_diff(workspace: Path, path: str, diff: str) -> str:
    try:
        lines = _read(workspace, path).splitlines(keepends=True)
    except NoSuchFile:
        lines = []
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
    _write(workspace, path, "".join(lines))
    return f"applied {len(hunks)} hunk(s) to {path}"


def _exists(workspace: Path, path: str) -> bool:
    try:
        with target(workspace, path) as t:
            os.stat(t.name, dir_fd=t.dir_fd, follow_symlinks=False)
    except (NoSuchFile, FileNotFoundError):
        return False
    return True


def _read(workspace: Path, path: str) -> str:
    """The file's text (newlines normalized as text mode reads them), opened without leaving
    the workspace and refused above EDIT_SIZE_LIMIT bytes."""
    fd, st, _ = open_regular(workspace, path)
    try:
        data = read_bounded(fd, EDIT_SIZE_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > EDIT_SIZE_LIMIT:
        raise ToolInputError(f"{path} is too large to edit here ({st.st_size} bytes; the limit is "
                             f"{EDIT_SIZE_LIMIT}); use the shell")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolInputError(f"{path} is not UTF-8 text") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _write(workspace: Path, path: str, text: str) -> None:
    """Replace the file atomically: a new file written in the directory that holds it (opened
    without leaving the workspace), then renamed over the name. A link swapped in meanwhile is
    replaced, never written through."""
    data = text.encode("utf-8")
    with target(workspace, path, create_parents=True) as t:
        if t.name == ".":
            raise ToolInputError(f"{path} is a directory")
        try:
            st: os.stat_result | None = os.stat(t.name, dir_fd=t.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise ToolInputError(f"{path} is a directory")
        if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            raise ToolInputError(f"{path} is not a regular file; refusing to write it")
        mode = stat.S_IMODE(st.st_mode) if st is not None and stat.S_ISREG(st.st_mode) else 0o666
        tmp = f".{t.name[:200]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                     dir_fd=t.dir_fd)
        try:
            try:
                give_to_sandbox(fd)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if st is not None and stat.S_ISREG(st.st_mode):
                    os.fchmod(fd, mode)
            finally:
                os.close(fd)
            os.rename(tmp, t.name, src_dir_fd=t.dir_fd, dst_dir_fd=t.dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=t.dir_fd)
            except FileNotFoundError:
                pass
            raise


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
