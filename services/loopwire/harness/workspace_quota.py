"""The workspace quota of a session's sandbox: a walk only after a command that changed something.

Checking a workspace's size walks all of it (milliseconds for a source tree), and the check of
a sandbox per command (``tenant_limits.QuotaWatch``) walks it at the end of every command, in a
thread of its own. A session's commands share one ``SessionQuota`` instead: it keeps an inotify
watch on every directory of the workspace (added as each walk passes it), so when a command ends
and no event came since the last walk, nothing there changed and the last usage stands; any
event (a write, a create, a delete, a close after writing, a queue overflow) means walk again.
A command still running after ``quota_interval`` is walked every interval, as before, in the
default executor's threads. Without inotify (no instance left, the watch limit reached) every
check walks. Like QuotaWatch it is a check, not a kernel quota.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator

from loopwire.harness.tenant_limits import megabytes, resolve

# inotify(7): what changes a directory's entries or a file's size.
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE, _IN_MOVED_FROM, _IN_MOVED_TO = 0x2, 0x4, 0x8, 0x40, 0x80
_IN_CREATE, _IN_DELETE, _IN_DELETE_SELF, _IN_MOVE_SELF, _IN_ONLYDIR = 0x100, 0x200, 0x400, 0x800, 0x01000000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
         | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR)
_libc = ctypes.CDLL(None, use_errno=True)


_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def usage(top: int, watch: Callable[[int], object]) -> int:
    """Bytes allocated below the open directory ``top``, as ``tenant_limits.disk_usage`` counts
    them, calling ``watch`` with each directory before listing it: what changes after the
    listing comes as an event."""
    total, seen = 0, set()
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []

    def enter(fd: int) -> None:
        try:
            watch(fd)
            stack.append((fd, os.scandir(fd)))
        except OSError:
            os.close(fd)

    enter(os.open(".", _O_DIR, dir_fd=top))
    while stack:
        fd, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            os.close(fd)
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                enter(os.open(entry.name, _O_DIR, dir_fd=fd))
        elif st.st_nlink > 1:
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
    return total


class _Changes:
    """Whether anything under the watched directories changed since ``clear`` (inotify)."""

    def __init__(self) -> None:
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self.exact = self.fd >= 0
        self._lock = threading.Lock()  # walks add watches in a worker thread; the loop drains

    def watch(self, dir_fd: int) -> None:
        with self._lock:
            if self.exact and _libc.inotify_add_watch(self.fd, f"/proc/self/fd/{dir_fd}".encode(), _MASK) < 0:
                self.exact = False  # the watch limit: from now on every check walks

    def clear(self) -> bool:
        """Drain the events; True when there were any (or changes cannot be told)."""
        seen = False
        with self._lock:
            while self.exact:
                try:
                    if not os.read(self.fd, 65536):
                        break
                    seen = True
                except BlockingIOError:
                    break
            return seen or not self.exact

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd, self.exact = -1, False


class SessionQuota:
    """The workspace usage of one session's sandbox, checked for each of its commands."""

    def __init__(self, dir_fd: int, quota: int, interval: float, previous: int | None,
                 record: Callable[[int], object] = lambda used: None) -> None:
        self.dir_fd, self.quota, self.interval, self.record = dir_fd, quota, interval, record
        self.used = previous  # the last usage measured
        self._changes = _Changes()
        self._walking = threading.Lock()
        self._baseline = asyncio.ensure_future(asyncio.to_thread(self.measure))  # also sets the watches

    def measure(self) -> int:
        """Walk the workspace (in a worker thread) and keep what it uses."""
        with self._walking:
            if self.dir_fd < 0:  # the session ended: its last usage stands
                return self.used or 0
            self._changes.clear()  # events from now on are changes after (or during) this walk
            used = usage(self.dir_fd, self._changes.watch)
            self.used = used
            self.record(used)
            return used

    async def settled(self) -> None:
        """The usage after what has happened so far: walked again only if something changed."""
        await asyncio.shield(self._baseline)
        if self._changes.clear():
            await asyncio.to_thread(self.measure)

    def watch(self, kill: Callable[[], object]) -> CommandQuota:
        return CommandQuota(self, kill)

    def close(self) -> None:
        """Stop watching; a walk under way (in a worker thread) finishes first."""
        threading.Thread(target=self._close, name="quota-close", daemon=True).start()

    def _close(self) -> None:
        with self._walking:
            self._changes.close()
            with contextlib.suppress(OSError):
                os.close(self.dir_fd)
            self.dir_fd = -1


class CommandQuota:
    """One command's share of its session's quota check: killed once the workspace grows past the
    quota while it runs, a note in its output, and a last check when it ends (``done``)."""

    def __init__(self, session: SessionQuota, kill: Callable[[], object]) -> None:
        self.session, self.kill = session, kill
        self.killed = False
        loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = loop.create_future()
        self._stopped = False
        self._periodic: asyncio.Task[None] | None = None
        self._timer = loop.call_later(session.interval, self._start_periodic)

    def _start_periodic(self) -> None:
        self._periodic = asyncio.ensure_future(self._check_while_running())

    async def _check_while_running(self) -> None:
        s = self.session
        await asyncio.shield(s._baseline)
        while not self._stopped:
            before, started = s.used, time.monotonic()
            used = await asyncio.to_thread(s.measure)
            if not self._stopped and used > s.quota and before is not None and used > before:
                self.killed = True
                self.kill()
            await asyncio.sleep(max(s.interval, 5 * (time.monotonic() - started)))

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._timer.cancel()
        asyncio.ensure_future(self._last_check())

    async def _last_check(self) -> None:
        try:
            if self._periodic is not None:
                self._periodic.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._periodic
            await self.session.settled()
        finally:
            resolve(self.done)

    def note(self) -> str:
        """What the tool result says about the quota ('' when within it)."""
        used, quota = self.session.used, self.session.quota
        if self.killed:
            return (f"[killed: the workspace grew to {megabytes(used or 0)}, past its quota of "
                    f"{megabytes(quota)}; delete files to make room]")
        if used is not None and used > quota:
            return (f"[the workspace uses {megabytes(used)}, over its quota of {megabytes(quota)}: "
                    "delete files; a command that makes it grow further is killed]")
        return ""
