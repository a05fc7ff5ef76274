"""read_file / list inside the workspace (grep: ``workspace_grep``), without a process per call.

Paths are walked one component at a time from an open descriptor of the workspace, never
by name from the host root: every component is opened relative to its parent with
O_NOFOLLOW, and a symlink is followed only by reading it and walking its target the same
way, so a link (or one swapped in while a call runs) can never lead outside the workspace.
This is a userspace openat2(RESOLVE_BENEATH): it works on any kernel and in any container
seccomp profile, and it can accept an absolute link that points back into the workspace.

Only regular files are opened, with O_NONBLOCK and after an lstat, so a FIFO, socket or
device is refused at once instead of blocking a worker; reads are bounded in bytes. File
names that are not UTF-8 are shown escaped.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from loopwire.harness.output import looks_binary, to_text

SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"}
_MAX_LINKS = 40
_RETRIES = 5
_MAX_MKDIRS = 1000
_CHUNK = 1 << 16
READ_SCAN_LIMIT = 16 << 20  # read_file looks at most this far into a file
LINE_KEEP = 64 << 10  # and shows at most this much of one line
EDIT_SIZE_LIMIT = 8 << 20  # edit_file rewrites files up to this size

_O_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# Never a workspace: the root, system trees the sandbox mounts read-only, kernel interfaces.
_NEVER = {"/", "/home", "/root", "/tmp", "/var", "/run", "/srv", "/mnt", "/media", "/opt"}
_NEVER_INSIDE = ("/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64",
                 "/libx32", "/boot")


class ToolInputError(ValueError):
    """Bad arguments of a tool call; the message is shown to the model."""


class NoSuchFile(ToolInputError):
    """The path names nothing (inside the workspace)."""


class OutsideWorkspace(ToolInputError):
    """The path (or a link on it) leads out of the workspace."""


# The host uid/gid that sandboxed commands run as (when the harness is root): what the harness's
# own file tools create in a workspace belongs to it too, so commands can change it afterwards.
_file_owner: tuple[int, int] | None = None


def set_file_owner(owner: tuple[int, int] | None) -> None:
    global _file_owner
    _file_owner = owner


def give_to_sandbox(name: str | int, dir_fd: int | None = None) -> None:
    """chown a file (by descriptor, or by name relative to dir_fd without following links)."""
    if _file_owner is None:
        return
    if isinstance(name, int):
        os.fchown(name, *_file_owner)
    else:
        os.chown(name, *_file_owner, dir_fd=dir_fd, follow_symlinks=False)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def check_workspace_path(path: str | os.PathLike[str]) -> str:
    """The normalized absolute workspace path, or ToolInputError for one that must never be one."""
    text = os.fspath(path)
    if "\0" in text:
        raise ToolInputError("workspace path contains a NUL byte")
    norm = os.path.normpath(os.path.abspath(text))
    if norm.startswith("//"):
        norm = "/" + norm.lstrip("/")
    if norm in _NEVER or any(norm == d or norm.startswith(d + "/") for d in _NEVER_INSIDE):
        raise ToolInputError(f"workspace {norm!r} is a system directory; refusing to use it")
    return norm


def open_workspace(path: str | os.PathLike[str]) -> tuple[int, str]:
    """An O_PATH descriptor of the workspace directory and its path, walked from / without
    following a symlink anywhere (a stored workspace path is always resolved already)."""
    norm = check_workspace_path(path)
    fd = os.open("/", _O_DIR)
    try:
        for part in norm.strip("/").split("/"):
            try:
                child = os.open(part, _O_DIR, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ToolInputError(f"workspace {norm!r}: {part!r} is a symlink or not a directory") from None
                if e.errno == errno.ENOENT:
                    raise ToolInputError(f"workspace {norm!r} does not exist") from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, norm


class WorkspaceNotFound(ToolInputError):
    """A requested workspace outside the caller's own tree: one answer whether or not it exists."""


_SAFE_TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def tenant_dir_name(tenant: str) -> str:
    """The directory of a tenant's workspaces under the root: its name when that is a plain word,
    a digest otherwise ('~' never occurs in a plain name, so the mapping is one to one)."""
    if _SAFE_TENANT.match(tenant):
        return f"tenant-{tenant}"
    return "tenant~" + hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def tenant_workspace(root: str | os.PathLike[str], tenant: str, requested: str, default_name: str) -> Path:
    """Where a session's workspace lives: ``requested`` (relative to the tenant's own tree, or
    absolute inside it; empty means ``default_name``), created under ``<root>/<tenant dir>``.
    Anything that would leave that tree -- another tenant's directory by absolute path, `..`,
    a symlink out -- is WorkspaceNotFound, the same answer whether or not the target exists.
    Directories are created component by component without following links out."""
    if "\0" in requested:
        raise ToolInputError("workspace contains a NUL byte")
    root_path = Path(root)
    root_path.mkdir(parents=True, exist_ok=True)
    root_real = os.path.realpath(root_path)
    tenant_root = os.path.join(root_real, tenant_dir_name(tenant))
    with contextlib.suppress(FileExistsError):
        os.mkdir(tenant_root, 0o711)
    if os.path.islink(tenant_root) or not os.path.isdir(tenant_root):
        raise ToolInputError(f"the tenant's workspace tree {tenant_root!r} is not a directory")
    text = requested or default_name
    missing = WorkspaceNotFound(f"workspace {requested!r} not found")
    if os.path.isabs(text):
        norm = os.path.normpath(text)
        if norm != tenant_root and not norm.startswith(tenant_root + "/"):
            raise missing
        text = os.path.relpath(norm, tenant_root)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise missing
    if not parts:
        raise ToolInputError(f"workspace {requested!r} is the tenant's workspace root itself; name a directory in it")
    root_fd, _ = open_workspace(tenant_root)
    try:
        with _Walk(root_fd, tenant_root) as walk:
            try:
                walk.descend(parts, make_dirs=True, what=f"workspace {requested!r}")
            except OutsideWorkspace:
                raise missing from None
            if not walk.names:
                raise ToolInputError(f"workspace {requested!r} is the tenant's workspace root itself")
            path = os.path.join(tenant_root, *walk.names)
    finally:
        os.close(root_fd)
    check_workspace_path(path)
    return Path(path)


class _Walk:
    """A stack of O_PATH descriptors from the workspace root down to the current directory."""

    def __init__(self, root_fd: int, root_path: str) -> None:
        self.root_path = root_path
        self.stack = [os.dup(root_fd)]
        self.names: list[str] = []
        self.links = 0
        self._retries = self._made = 0  # per descend: looks again after a race, directories made

    def __enter__(self) -> _Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.stack:
            os.close(fd)
        self.stack = []

    @property
    def fd(self) -> int:
        return self.stack[-1]

    def _outside(self, what: str) -> ToolInputError:
        return OutsideWorkspace(f"path {what!r} is outside the workspace")

    def _restart(self) -> None:
        for fd in self.stack[1:]:
            os.close(fd)
        del self.stack[1:]
        self.names.clear()

    def descend(self, parts: list[str], *, create: bool = False, make_dirs: bool = False,
                follow_last: bool = True, what: str = "") -> str | None:
        """Walk ``parts``; return the final component left to open (None when the walk ends on
        a directory, pushed). Symlinks inside are followed, ones leading out refused. ``create``
        makes missing parent directories; ``make_dirs`` makes (and requires) every component a
        directory."""
        todo = list(reversed([p for p in parts if p not in ("", ".")]))
        self._retries = self._made = 0
        while todo:
            part = todo.pop()
            if part == "..":
                self._up(what)
                continue
            last = not todo
            st = self._lstat(part, what)
            if st is None:
                if last and not make_dirs:
                    return part
                self._make_dir(part, create or make_dirs, what)
                todo.append(part)  # look again: whatever is there now is checked like anything else
            elif stat.S_ISLNK(st.st_mode):
                if last and not follow_last:
                    return part
                todo.extend(self._link_parts(part, what))
            elif not stat.S_ISDIR(st.st_mode):
                if last and not make_dirs:
                    return part
                raise ToolInputError(f"{what}: {part!r} is not a directory")
            elif not self._enter(part):
                todo.append(part)  # swapped between the lstat and the open: look again
        return None

    def _up(self, what: str) -> None:
        if len(self.stack) == 1:
            raise self._outside(what)
        os.close(self.stack.pop())
        self.names.pop()

    def _lstat(self, part: str, what: str) -> os.stat_result | None:
        try:
            return os.stat(part, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise ToolInputError(f"{what}: not a directory") from None

    def _make_dir(self, part: str, allowed: bool, what: str) -> None:
        if not allowed:
            raise NoSuchFile(f"{what}: no such file or directory")
        self._made += 1
        if self._made > _MAX_MKDIRS:
            raise ToolInputError(f"{what}: too many directories to create")
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o777, dir_fd=self.fd)
            give_to_sandbox(part, self.fd)

    def _link_parts(self, part: str, what: str) -> list[str]:
        """The components to walk instead of the link ``part`` (reversed, for the stack): its
        target's, from the root for an absolute target inside the workspace; ``part`` itself
        when it is no longer a link (look again)."""
        self.links += 1
        if self.links > _MAX_LINKS:
            raise ToolInputError(f"{what}: too many levels of symbolic links")
        try:
            target = os.readlink(part, dir_fd=self.fd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOENT) or self._retries >= _RETRIES:
                raise
            self._retries += 1
            return [part]
        if target.startswith("/"):
            norm = os.path.normpath(target)
            if norm != self.root_path and not norm.startswith(self.root_path.rstrip("/") + "/"):
                raise self._outside(what)
            self._restart()
            target = os.path.relpath(norm, self.root_path)
        return list(reversed([p for p in target.split("/") if p not in ("", ".")]))

    def _enter(self, part: str) -> bool:
        """Push directory ``part``; False when it changed since its lstat (look again)."""
        try:
            fd = os.open(part, _O_DIR, dir_fd=self.fd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT) or self._retries >= _RETRIES:
                raise
            self._retries += 1
            return False
        self.stack.append(fd)
        self.names.append(part)
        return True


@dataclass
class Target:
    """A resolved path: the directory that holds it (open), its name there, its display path."""

    dir_fd: int
    name: str  # "." when the path is a directory already open in dir_fd
    rel: str


@contextlib.contextmanager
def target(workspace: Path, path: str, *, create_parents: bool = False) -> Iterator[Target]:
    """Resolve ``path`` inside the workspace; ToolInputError when it points outside."""
    if "\0" in path:
        raise ToolInputError("path contains a NUL byte")
    root_fd, root_path = open_workspace(workspace)
    try:
        if path.startswith("/"):
            norm = os.path.normpath(path)
            if norm != root_path and not norm.startswith(root_path.rstrip("/") + "/"):
                raise ToolInputError(f"path {path!r} is outside the workspace")
            path = os.path.relpath(norm, root_path)
        with _Walk(root_fd, root_path) as walk:
            name = walk.descend(path.split("/"), create=create_parents, what=path)
            rel = "/".join([*walk.names, name] if name else walk.names) or "."
            yield Target(walk.fd, name or ".", rel)
    finally:
        os.close(root_fd)


def open_regular(workspace: Path, path: str) -> tuple[int, os.stat_result, str]:
    """A read-only descriptor of a regular file inside the workspace, never blocking on a
    FIFO or device: the type is checked before the open and again on the open descriptor."""
    for _ in range(_RETRIES):
        with target(workspace, path) as t:
            try:
                st = os.stat(t.name, dir_fd=t.dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                raise NoSuchFile(f"{path}: no such file") from None
            if stat.S_ISLNK(st.st_mode):
                continue  # replaced by a link since the walk: walk again
            if stat.S_ISDIR(st.st_mode):
                raise ToolInputError(f"{path} is a directory (use list)")
            if not stat.S_ISREG(st.st_mode):
                raise ToolInputError(f"{path} is {_kind(st.st_mode)}, not a regular file; refusing to open it")
            try:
                fd = os.open(t.name, FILE_FLAGS, dir_fd=t.dir_fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOENT):
                    continue
                raise
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                return fd, st, t.rel
            os.close(fd)
            raise ToolInputError(f"{path} is {_kind(st.st_mode)}, not a regular file; refusing to open it")
    raise ToolInputError(f"{path} keeps changing while it is opened; try again")


def read_bounded(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from the start of an open file, in chunks."""
    parts, total = [], 0
    while total < limit:
        chunk = os.pread(fd, min(_CHUNK, limit - total), total)
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


def read_file(workspace: Path, path: str, offset: int = 1, limit: int = 400,
              scan_limit: int = READ_SCAN_LIMIT) -> str:
    fd, st, _ = open_regular(workspace, path)
    try:
        head = os.pread(fd, 8192, 0)
        if looks_binary(head):
            raise ToolInputError(f"{path} is a binary file ({st.st_size} bytes)")
        start, count = max(offset, 1), max(limit, 1)
        chosen: list[str] = []
        line: list[bytes] = []  # the unfinished line, kept only while it is one to show
        kept = lineno = pos = 0
        open_line = False
        while pos < scan_limit:
            chunk = os.pread(fd, min(_CHUNK, scan_limit - pos), pos)
            if not chunk:
                break
            pos += len(chunk)
            pieces = chunk.split(b"\n")
            for i, piece in enumerate(pieces):
                shown = start <= lineno + 1 < start + count
                if shown and kept <= LINE_KEEP:
                    line.append(piece[: LINE_KEEP - kept])
                    kept += len(line[-1]) + (len(piece) > LINE_KEEP - kept)  # one past: it was cut
                if i < len(pieces) - 1:
                    lineno += 1
                    if shown:
                        chosen.append(_line_text(line, kept))
                    line, kept = [], 0
            open_line = bool(pieces[-1]) or (len(pieces) == 1 and open_line)
        complete = pos < scan_limit or pos >= st.st_size
        if open_line and complete:
            lineno += 1
            if start <= lineno < start + count:
                chosen.append(_line_text(line, kept))
    finally:
        os.close(fd)
    body = "\n".join(f"{n:6}\t{text}" for n, text in enumerate(chosen, start))
    end = start + len(chosen) - 1
    if not complete:
        body += (f"\n[lines {start}-{end}; read stopped after the first {pos} of {st.st_size} bytes "
                 f"({lineno} lines); use grep or the shell for the rest]")
    elif end < lineno or start > 1:
        body += f"\n[lines {start}-{end} of {lineno}]"
    return body


def _line_text(parts: list[bytes], kept: int) -> str:
    text = to_text(b"".join(parts)).rstrip("\r")
    return text + f" [... line cut at {LINE_KEEP} bytes]" if kept > LINE_KEEP else text


def list_dir(workspace: Path, path: str = ".", depth: int = 2, max_entries: int = 500) -> str:
    out: list[str] = []
    with target(workspace, path) as t:
        try:
            dir_fd = os.open(t.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=t.dir_fd)
        except (NotADirectoryError, FileNotFoundError):
            raise ToolInputError(f"{path}: not a directory") from None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ToolInputError(f"{path}: not a directory") from None
            raise
        prefix = "" if t.rel == "." else t.rel + "/"
        try:
            for dirpath, dirnames, filenames, _ in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
                here = PurePosixPath(dirpath)
                dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
                if len(here.parts) >= depth:
                    dirnames[:] = []
                for name in [*(d + "/" for d in dirnames), *sorted(filenames)]:
                    out.append(to_text(prefix + str(here / name.rstrip("/"))) + ("/" if name.endswith("/") else ""))
                    if len(out) >= max_entries:
                        return "\n".join([*out, f"[listing stopped at {max_entries} entries]"])
        finally:
            os.close(dir_fd)
    return "\n".join(out) if out else "(empty)"
