"""grep inside the workspace, without a process: RE2 (linear time: no pattern backtracks
catastrophically), falling back to the backtracking `regex` engine, under the call's deadline,
only for what RE2 lacks (backreferences, lookaround). Files are found by walking from an open
descriptor of the workspace (``workspace_files``), never opened through a link, and read bounded
per file and in all."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import regex

from loopwire.harness.output import looks_binary, to_text
from loopwire.harness.workspace_files import (
    FILE_FLAGS,
    SKIP_DIRS,
    Target,
    ToolInputError,
    open_regular,
    read_bounded,
    target,
)

try:  # google-re2: linear-time matching
    import re2
except ImportError:  # pragma: no cover - a dependency; without it every pattern takes the fallback
    re2 = None

GREP_FILE_LIMIT = 4 << 20  # grep searches the first bytes of each file
GREP_TOTAL_LIMIT = 256 << 20  # and stops after this many bytes in all
GREP_TIME_LIMIT = 10.0  # seconds for a whole grep call, regex matching included

def grep(workspace: Path, pattern: str, path: str = ".", glob: str = "", max_matches: int = 200,
         time_limit: float | None = None, file_limit: int = GREP_FILE_LIMIT,
         total_limit: int = GREP_TOTAL_LIMIT) -> str:
    """Matches as path:line:text, with a deadline for the whole call (GREP_TIME_LIMIT unless
    given). RE2 matches in linear time; a pattern only the `regex` engine takes runs without
    the GIL and under the deadline, so a catastrophically backtracking one costs seconds, not hours."""
    search = _compile(pattern)
    deadline = time.monotonic() + (GREP_TIME_LIMIT if time_limit is None else time_limit)
    state = _GrepState(search, deadline, max_matches, file_limit, total_limit)
    with target(workspace, path) as t:
        st = _lstat(t)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            fd, _, rel = open_regular(workspace, path)
            with contextlib.suppress(_Stop):
                state.search_fd(fd, rel)
        else:
            try:
                dir_fd = os.open(t.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 dir_fd=t.dir_fd)
            except FileNotFoundError:
                raise ToolInputError(f"{path}: no such file or directory") from None
            prefix = "" if t.rel == "." else t.rel + "/"
            try:
                state.search_tree(dir_fd, prefix, glob)
            finally:
                os.close(dir_fd)
    return state.result()


_Search = Callable[[str, float], bool]  # (line, seconds left) -> matched; TimeoutError past them


def _compile(pattern: str) -> _Search:
    if re2 is not None:
        options = re2.Options()
        options.log_errors = False
        try:
            linear = re2.compile(pattern, options=options)
        except re2.error:
            pass  # a backreference, lookaround, or a pattern RE2 spells otherwise: the fallback decides
        else:
            return lambda line, remaining: linear.search(line) is not None
    try:
        backtracking = regex.compile(pattern)
    except (regex.error, ValueError, OverflowError) as e:
        raise ToolInputError(f"invalid regular expression: {e}") from None
    return lambda line, remaining: backtracking.search(line, concurrent=True, timeout=remaining) is not None


def _lstat(t: Target) -> os.stat_result | None:
    try:
        return os.stat(t.name, dir_fd=t.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


class _Stop(Exception):
    pass


class _GrepState:
    def __init__(self, search: _Search, deadline: float, max_matches: int, file_limit: int,
                 total_limit: int) -> None:
        self.search, self.deadline, self.max_matches = search, deadline, max_matches
        self.file_limit, self.total_limit = file_limit, total_limit
        self.out: list[str] = []
        self.scanned = 0
        self.partial_files = 0
        self.stopped = ""

    def search_tree(self, dir_fd: int, prefix: str, glob: str) -> None:
        try:
            for dirpath, dirnames, filenames, fd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
                dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
                for name in sorted(filenames):
                    self._check_time()
                    rel = prefix + os.path.normpath(os.path.join(dirpath, name))
                    if glob and not PurePosixPath(rel).match(glob):
                        continue
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        if not stat.S_ISREG(st.st_mode):
                            continue  # links, FIFOs, sockets, devices: never opened
                        file_fd = os.open(name, FILE_FLAGS, dir_fd=fd)
                    except OSError:
                        continue
                    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
                        os.close(file_fd)
                        continue
                    self.search_fd(file_fd, rel)
        except _Stop:
            pass

    def search_fd(self, fd: int, rel: str) -> None:
        """Search one open file (and close it)."""
        try:
            if self.stopped:
                return
            room = min(self.file_limit, self.total_limit - self.scanned)
            if room <= 0:
                self.stopped = f"stopped after searching {self.scanned} bytes"
                raise _Stop
            data = read_bounded(fd, room + 1)
            if len(data) > room:
                data = data[:room]
                self.partial_files += 1
            self.scanned += len(data)
        finally:
            os.close(fd)
        if looks_binary(data):
            return
        shown = to_text(rel)
        for n, line in enumerate(to_text(data).splitlines(), 1):
            remaining = self._check_time()
            try:
                found = self.search(line, remaining)
            except TimeoutError:
                self.stopped = "the pattern took too long (time limit reached); results are incomplete"
                raise _Stop from None
            if found:
                self.out.append(f"{shown}:{n}:{line[:400]}")
                if len(self.out) >= self.max_matches:
                    self.stopped = f"stopped at {self.max_matches} matches"
                    raise _Stop

    def _check_time(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.stopped = "time limit reached; results are incomplete"
            raise _Stop
        return remaining

    def result(self) -> str:
        notes = []
        if self.partial_files:
            notes.append(f"[{self.partial_files} file(s) searched only in their first {self.file_limit} bytes]")
        if self.stopped:
            notes.append(f"[{self.stopped}]")
        if not self.out:
            return "\n".join(["no matches", *notes])
        return "\n".join([*self.out, *notes])
