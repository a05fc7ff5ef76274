"""A host uid of its own for every tenant, and the tenant's tree owned by it.

Sandboxed commands of one tenant run as one host uid from a configured range, so the kernel
keeps tenants apart where a shared uid could not: RLIMIT_NPROC counts per real uid (a fork
flood of one tenant does not starve another), and a tenant's directory
(``<workspace_root>/tenant-<name>``) is owned by its uid with mode 0700, so no other tenant's
uid can enter it, even where the workspace root is visible inside a sandbox (a root under
/opt or /usr). The harness, root, still reads everything.

The uid belongs to the tenant's directory, found from the workspace path (every session's
workspace lies in its tenant's tree: ``workspace_files.tenant_workspace``), so the uid a
command runs as and the owner of the tree it works in can never disagree, whichever caller
starts it. It is a stable hash of the directory name into the range; two names that land on
the same uid are told apart by probing the next free one, and every assignment is recorded in
a small JSON state file (under a lock, so replicas sharing the workspace root agree), so a
tenant keeps its uid across restarts. A workspace outside every tenant's tree (made before the
per-tenant layout) runs as the uid of the key ''.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from loopwire.harness.workspace_files import check_workspace_path, open_workspace

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TENANT_DIR = re.compile(r"^tenant(-[A-Za-z0-9_-]{1,64}|~[0-9a-f]{32})$")  # workspace_files.tenant_dir_name


class UidRangeExhausted(RuntimeError):
    """Every uid of the range belongs to another tenant."""


class TenantUids:
    """tenant directory name -> host uid (gid = uid) in ``[base, base + count)``."""

    def __init__(self, base: int, count: int, state_file: Path | None = None) -> None:
        if base <= 0 or count <= 0 or base + count > 1 << 31:
            raise ValueError(f"bad sandbox uid range {base}+{count}")
        self.base, self.count, self.state_file = base, count, state_file
        self._known: dict[str, int] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        where = f"recorded in {self.state_file}" if self.state_file else "not recorded (no state file)"
        return f"host uids {self.base}-{self.base + self.count - 1}, one per tenant, {where}"

    def uid_for(self, tenant: str) -> int:
        if (uid := self._known.get(tenant)) is not None:
            return uid
        with self._lock, self._locked_state() as state:
            uid = state.get(tenant)
            if not isinstance(uid, int) or not self.base <= uid < self.base + self.count:
                uid = self._allocate(tenant, set(state.values()))
                state[tenant] = uid
                self._save(state)
            self._known[tenant] = uid
            return uid

    def _allocate(self, tenant: str, taken: set[object]) -> int:
        start = int.from_bytes(hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).digest()[:8], "big")
        for i in range(self.count):
            uid = self.base + (start + i) % self.count
            if uid not in taken:
                return uid
        raise UidRangeExhausted(f"all {self.count} sandbox uids from {self.base} are taken; widen --sandbox-uid-count")

    @contextlib.contextmanager
    def _locked_state(self) -> Iterator[dict[str, int]]:
        if self.state_file is None:
            yield dict(self._known)
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(f"{self.state_file}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            try:
                state = json.loads(self.state_file.read_text())
            except FileNotFoundError:
                state = {}
            except ValueError as e:
                raise RuntimeError(f"the tenant uid state file {self.state_file} is corrupt: {e}") from None
            yield state
        finally:
            os.close(lock_fd)

    def _save(self, state: dict[str, int]) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f, sort_keys=True, indent=0)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_file)


def tenant_tree(workspace: str, root: str | os.PathLike[str] | None) -> str | None:
    """``<root>/<tenant dir>`` holding ``workspace`` (a normalized path) strictly below it, or None."""
    if root is None:
        return None
    base = os.path.realpath(root)
    if not workspace.startswith(base + "/"):
        return None
    name, _, rest = workspace[len(base) + 1 :].partition("/")
    return os.path.join(base, name) if rest and _TENANT_DIR.match(name) else None


def claim(tree: str, workspace: str, uid: int) -> None:
    """Give a tenant's tree to its uid: the tenant directory 0700 and every directory down to the
    workspace owned by the uid. The first time (the directory is not the uid's yet: new, or made
    under another mapping) everything in it is given too. Walked by descriptor, never through a
    link."""
    workspace = check_workspace_path(workspace)
    parent_fd, _ = open_workspace(os.path.dirname(tree))
    try:
        fd = os.open(os.path.basename(tree), _O_DIR, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:
            _give_all(fd, uid)
        if (st.st_uid, st.st_gid) != (uid, uid):
            os.fchown(fd, uid, uid)
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
        for part in os.path.relpath(workspace, tree).split("/"):
            child = os.open(part, _O_DIR, dir_fd=fd)
            os.close(fd)
            fd = child
            st = os.fstat(fd)
            if (st.st_uid, st.st_gid) != (uid, uid):
                os.fchown(fd, uid, uid)
    finally:
        os.close(fd)


def _give_all(dir_fd: int, uid: int) -> None:
    """chown everything below dir_fd (links themselves, never what they point to; a file with
    several hard links is left alone: one of its names may be outside the tree)."""
    for _, dirnames, filenames, fd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if st.st_uid != uid and (stat.S_ISDIR(st.st_mode) or st.st_nlink == 1):
                    os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)


# --- who owns what the harness's own file tools create ------------------------------------------

_thread = threading.local()


class ThreadOwner:
    """The owner ``workspace_files.give_to_sandbox`` gives files to: the tenant's uid in a thread
    working for a tenant (``acting_as``), ``default`` in any other thread. (It is unpacked like
    the (uid, gid) tuple that ``set_file_owner`` takes.)"""

    def __init__(self, default: tuple[int, int]) -> None:
        self.default = default

    def __iter__(self) -> Iterator[int]:
        return iter(getattr(_thread, "owner", None) or self.default)


_libc = None


def _setfs(uid: int, gid: int) -> None:
    """setfsuid/setfsgid: for the calling thread only (glibc does not broadcast these)."""
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.setfsgid(gid)
    _libc.setfsuid(uid)
    if _libc.setfsuid(-1 & 0xFFFFFFFF) != uid:  # setfsuid reports no error: read it back
        raise PermissionError(f"cannot take the filesystem identity of uid {uid}")


@contextlib.contextmanager
def acting_as(uid: int | None, *, fs_identity: bool) -> Iterator[None]:
    """In this thread: files the harness creates belong to ``uid``; with ``fs_identity`` the kernel
    also checks every file access as that uid (setfsuid drops root's file capabilities), so a
    file tool of one tenant cannot open another tenant's files whatever path it is given."""
    if uid is None:
        yield
        return
    _thread.owner = (uid, uid)
    try:
        if fs_identity:
            _setfs(uid, uid)
        try:
            yield
        finally:
            if fs_identity:
                _setfs(os.geteuid(), os.getegid())
    finally:
        _thread.owner = None
