"""Limits per tenant: processes, memory and CPU in a cgroup v2 group of the tenant's own where
the harness can make one, and the workspace disk quota.

cgroup v2: each tenant's commands join ``<base>/tenant-<uid>`` (pids.max, memory.max,
cpu.max: all of the tenant's commands together, enforced by the kernel). ``base`` is a
delegated, empty cgroup the operator names (``--sandbox-cgroup``) or, by default,
``loopwire-sandbox`` below the harness's own cgroup when the harness may enable controllers
there (only at a hierarchy's root: cgroup v2 lets no other group with processes of its own
hand controllers to children). Otherwise the sandbox relies on rlimits, per process except
RLIMIT_NPROC, which counts per real uid and so, with a uid per tenant, per tenant.

Disk: RLIMIT_FSIZE (kernel) bounds every file a command writes to the quota; the total is bound
by a filesystem of the quota's size per tenant where the harness can mount one
(``tenant_volumes``), and otherwise *checked* (``QuotaWatch``) while a command runs and when it
ends, and a command that makes it grow past the quota is killed. Project quotas are not used:
they need the workspace root on a filesystem mounted with them, which a harness cannot assume.

Memory outside the cgroup: each running command's /tmp and /dev/shm are tmpfs of a capped size,
and a tenant's running commands together may mount at most ``TmpfsBudget`` bytes of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

CONTROLLERS = ("pids", "memory", "cpu")


class Cgroups:
    """Per-tenant groups below ``base`` (whose subtree_control enables CONTROLLERS)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._made: set[str] = set()

    @classmethod
    def find(cls, configured: str = "", mount: str = "/sys/fs/cgroup") -> tuple[Cgroups | None, str]:
        """(groups, '') or (None, why the sandbox falls back to rlimits)."""
        if configured == "none":
            return None, "cgroups disabled by --sandbox-cgroup none"
        try:
            if configured:
                base = Path(configured)
            else:
                if not (Path(mount) / "cgroup.controllers").exists():
                    return None, f"{mount} is not a cgroup v2 hierarchy"
                own = _own_cgroup()
                if own is None:
                    return None, "the harness's cgroup v2 group is unknown (/proc/self/cgroup)"
                _enable(Path(mount) / own.lstrip("/"))
                base = Path(mount) / own.lstrip("/") / "loopwire-sandbox"
                base.mkdir(exist_ok=True)
            _enable(base)
        except OSError as e:
            hint = ("; name a delegated, empty cgroup with --sandbox-cgroup" if not configured else "")
            return None, f"cannot make cgroup v2 groups ({e}){hint}"
        return cls(base), ""

    def procs_file(self, key: str, processes: int, memory: int, cpus: float) -> str:
        """The cgroup.procs of a tenant's group, made (and its limits written) on first use."""
        group = self.base / f"tenant-{key}"
        if str(group) not in self._made:
            group.mkdir(exist_ok=True)
            (group / "pids.max").write_text(str(processes))
            (group / "memory.max").write_text(str(memory))
            if (group / "memory.swap.max").exists():
                (group / "memory.swap.max").write_text("0")
            (group / "cpu.max").write_text(f"{int(cpus * 100_000)} 100000" if cpus > 0 else "max 100000")
            self._made.add(str(group))
        return str(group / "cgroup.procs")


class TmpfsExhausted(RuntimeError):
    """A command's /tmp and /dev/shm would take its tenant past its tmpfs budget."""


class TmpfsBudget:
    """Bytes of tmpfs (/tmp and /dev/shm, each capped) a tenant's running commands may hold together.

    tmpfs pages are host memory that no rlimit counts (and, without a cgroup, nothing at all), so
    their sizes are charged when a command starts, whether or not it fills them, and given back
    when it ends: a tenant's commands can never pin more than the budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held: dict[str, int] = {}

    def take(self, tenant: str, size: int) -> Callable[[], None]:
        """Charge ``size`` bytes to ``tenant``; the function that gives them back (once)."""
        held = self.held.get(tenant, 0)
        if held + size > self.budget:
            raise TmpfsExhausted(
                f"RESOURCE_EXHAUSTED: this tenant's running commands and exec sessions already hold "
                f"{megabytes(held)} of /tmp and /dev/shm, and another needs {megabytes(size)}: past the tenant's "
                f"tmpfs budget of {megabytes(self.budget)} (--sandbox-tmpfs-budget-mb); end a command or exec "
                "session first")
        self.held[tenant] = held + size
        given = False

        def give() -> None:
            nonlocal given
            if given:
                return
            given = True
            left = self.held.get(tenant, 0) - size
            if left > 0:
                self.held[tenant] = left
            else:
                self.held.pop(tenant, None)

        return give


def _own_cgroup() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    return None


def _enable(group: Path) -> None:
    offered = set((group / "cgroup.controllers").read_text().split())
    if missing := [c for c in CONTROLLERS if c not in offered]:
        raise OSError(f"{group} does not offer the {', '.join(missing)} controller(s)")
    enabled = set((group / "cgroup.subtree_control").read_text().split())
    if todo := " ".join(f"+{c}" for c in CONTROLLERS if c not in enabled):
        (group / "cgroup.subtree_control").write_text(todo)


# --- the workspace quota ------------------------------------------------------------------------


def disk_usage(dir_fd: int) -> int:
    """Bytes allocated below an open directory (st_blocks: a sparse file counts what it holds;
    a file with several links once), never following a link."""
    total, seen = 0, set()
    for _, dirnames, filenames, fd in os.fwalk(".", dir_fd=dir_fd, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def resolve(future: asyncio.Future[None]) -> None:
    """Complete a future unless it is done already (a callback may come twice)."""
    if not future.done():
        future.set_result(None)


def megabytes(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"


class QuotaWatch:
    """Kills a command (``kill``, called on the event loop) once its workspace is over ``quota`` bytes and still
    growing: a check every ``interval`` seconds (longer when a check itself takes long) in a
    thread of its own, and a last one when the command ends. A check after the fact: between
    two checks a command can write past the quota by as much as it manages in that time."""

    def __init__(self, dir_fd: int, quota: int, interval: float, kill: Callable[[], object], previous: int | None,
                 record: Callable[[int], object] = lambda used: None) -> None:
        self.dir_fd, self.quota, self.interval, self.kill, self.record = dir_fd, quota, interval, kill, record
        self.used = previous  # the last usage measured: a command may shrink an over-quota workspace
        self.killed = False
        self._stop = threading.Event()
        loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(target=self._run, args=(loop,), name="quota-watch", daemon=True)
        self._thread.start()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            if self.used is None:
                self.used = disk_usage(self.dir_fd)  # the baseline, taken as the command starts
            pause = self.interval
            while True:
                stopping = self._stop.wait(pause)
                started = time.monotonic()
                used = disk_usage(self.dir_fd)
                pause = max(self.interval, 5 * (time.monotonic() - started))
                if not stopping and used > self.quota and used > self.used:
                    self.killed = True
                    with contextlib.suppress(RuntimeError):  # the loop is gone, and the command with it
                        loop.call_soon_threadsafe(self.kill)
                self.used = used
                if stopping:
                    self.record(used)
                    break
        finally:
            os.close(self.dir_fd)
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(resolve, self.done)

    def stop(self) -> None:
        self._stop.set()

    def note(self) -> str:
        """What the tool result says about the quota ('' when within it)."""
        if self.killed:
            return (f"[killed: the workspace grew to {megabytes(self.used or 0)}, past its quota of "
                    f"{megabytes(self.quota)}; delete files to make room]")
        if self.used is not None and self.used > self.quota:
            return (f"[the workspace uses {megabytes(self.used)}, over its quota of {megabytes(self.quota)}: "
                    "delete files; a command that makes it grow further is killed]")
        return ""
