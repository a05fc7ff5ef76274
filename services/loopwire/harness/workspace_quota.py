"""The workspace quota of a session's sandbox, kept up to date from what changed (inotify).

Where the tenant's tree is a volume of the quota's size (``tenant_volumes``) the filesystem is the
bound and none of this runs; it is the quota where no volume can be mounted (not root, no loop
devices, ``--no-sandbox-volumes``, a tree that held files before its volume).

Walking a workspace to measure it costs milliseconds for a source tree (more for a large one), and
the check of a sandbox per command (``tenant_limits.QuotaWatch``) walks it at the end of every
command. A session's commands share one ``SessionQuota`` instead, which walks the workspace once
and then follows its changes:

* the walk and what follows it are ``workspace_usage.UsageTree``'s: inotify watches on every
  directory, and only the directories whose entries changed listed again (in a worker thread);
* when a command ends and no event came, the last usage stands, without a thread;
* a command still running after ``quota_interval`` is checked the same way every interval, in the
  default executor's threads, and killed once the workspace grows past the quota.

Like QuotaWatch it is a check, not a kernel quota: a change that makes no event in the
workspace's directories (a write through a shared mapping or through a hard link from outside the
workspace, blocks a filesystem allocates later for its own metadata) is counted once that file's
directory changes again, or at the next whole walk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable

from loopwire.harness.tenant_limits import megabytes, resolve
from loopwire.harness.workspace_usage import UsageTree


class SessionQuota:
    """The workspace usage of one session's sandbox, checked for each of its commands."""

    def __init__(self, dir_fd: int, quota: int, interval: float, previous: int | None,
                 record: Callable[[int], object] = lambda used: None) -> None:
        self.dir_fd, self.quota, self.interval, self.record = dir_fd, quota, interval, record
        self.used = previous  # the last usage measured
        self._tree = UsageTree()
        self._walking = threading.Lock()
        self._baseline = asyncio.ensure_future(asyncio.to_thread(self.measure))  # the first walk, and the watches

    def measure(self) -> int:
        """Bring the usage up to date (in a worker thread): from the events since the last check, or
        walked whole when they cannot tell; and keep it."""
        with self._walking:
            if self.dir_fd < 0:  # the session ended: its last usage stands
                return self.used or 0
            used = self._tree.measure(self.dir_fd)
            self.used = used
            self.record(used)
            return used

    def current(self) -> bool:
        """Whether the usage kept is already the usage after what has happened so far: the first
        walk is done, no event came since, and no check is under way (whose result is not kept yet)."""
        return self._baseline.done() and not self._walking.locked() and not self._tree.changed()

    async def settled(self) -> None:
        """The usage after what has happened so far: checked again only when it is not ``current``."""
        await asyncio.shield(self._baseline)
        if not self.current():
            await asyncio.to_thread(self.measure)

    def watch(self, kill: Callable[[], object]) -> CommandQuota:
        return CommandQuota(self, kill)

    def close(self) -> None:
        """Stop watching; a walk under way (in a worker thread) finishes first."""
        threading.Thread(target=self._close, name="quota-close", daemon=True).start()

    def _close(self) -> None:
        with self._walking:
            self._tree.close()
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
        if self._periodic is None and self.session.current():
            # Nothing happened in the workspace since the last check (most commands write nothing):
            # the last check is done now, with no task and no worker thread to wait for.
            resolve(self.done)
            return
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
