"""A started sandboxed command: its output collected in bounded memory, its wait and timeout, the kill
of its pid namespace's init (which ends everything it started), and the reaping of a sandbox whose
start was abandoned. ``mark``/``TRACE`` time the stages of the command path (``bench_sandbox --profile``)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import signal
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Protocol

from loopwire.harness import egress
from loopwire.harness.output import CappedOutput, HeadTailBuffer
from loopwire.harness.sandbox_mounts import Spawn
from loopwire.harness.tenant_limits import QuotaWatch, megabytes, resolve
from loopwire.harness.tenant_volumes import VolumeQuota
from loopwire.harness.workspace_quota import CommandQuota


@dataclass
class ShellResult:
    output: CappedOutput
    exit_code: int
    timed_out: bool
    started_at_us: int
    finished_at_us: int


def now_us() -> int:
    return time.time_ns() // 1000


# Where a command's time goes (``bench_sandbox --profile``): None, or a list each stage of the
# command path appends (stage, time.time_ns()) to. A context variable, so a trace follows the
# task (and the tasks and callbacks it starts) that set it, never another session's commands.
# Off, a mark costs one ContextVar.get.
TRACE: contextvars.ContextVar[list[tuple[str, int]] | None] = contextvars.ContextVar("loopwire_sandbox_trace",
                                                                                     default=None)


def mark(stage: str, at: int = 0) -> None:
    trace = TRACE.get()
    if trace is not None:
        trace.append((stage, at or time.time_ns()))


_REAPERS: set[asyncio.Task[None]] = set()


def keep(coro: Coroutine[None, None, None]) -> None:
    task = asyncio.ensure_future(coro)
    _REAPERS.add(task)
    task.add_done_callback(_REAPERS.discard)


def reap_spawned(spawn: Spawn, starting: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if starting.cancelled() or starting.exception() is not None:
        spawn.close_ours()
    else:
        keep(reap(spawn, starting.result(), asyncio.ensure_future(child_pid(spawn.info_r))))


async def reap(spawn: Spawn, proc: asyncio.subprocess.Process, told: asyncio.Future[int]) -> None:
    """Kill a sandbox whose start was abandoned. Its command waits for "go", so there is time
    to learn its pid; killing bwrap first could orphan a child that has not yet asked to die
    with its parent, and that child would run the command once the block pipe closes."""
    try:
        with contextlib.suppress(OSError, ValueError, TimeoutError):
            pid = await told
            _kill_init(_open_pid(pid))
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    finally:
        spawn.close_ours()


async def child_pid(fd: int) -> int:
    """The pid (on the host) of the sandbox's init, from bwrap's --info-fd JSON."""
    data = b""
    async with asyncio.timeout(30):
        while True:
            chunk = await _read_when_ready(fd)
            if not chunk:
                raise OSError("bubblewrap ended before it started the sandbox")
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data)["child-pid"])


async def _read_when_ready(fd: int) -> bytes:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, resolve, ready)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return os.read(fd, 65536)


def _open_pid(pid: int) -> int:
    """A pidfd of the sandbox's init (-1 when it is gone): bwrap is its parent and has not
    reaped it, so the pid still names it; through the pidfd a later kill cannot hit a reuse."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -1


def _kill_init(pidfd: int) -> None:
    """SIGKILL to a pid namespace's init ends every process in it, whatever process groups or
    sessions (``--new-session``) they made."""
    if pidfd >= 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)


class Proc(Protocol):
    """What a sandboxed command's process offers: bwrap's own, or a session supervisor's command."""

    @property
    def stdout(self) -> asyncio.StreamReader | None: ...

    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class SandboxedProcess:
    """A running sandboxed command whose output is collected in bounded memory."""

    def __init__(self, proc: Proc, buffer: HeadTailBuffer, largest_file: int = 0, *, group: int = 0) -> None:
        """``group``: a process group to kill with the sandbox's init (bwrap's own; 0: none)."""
        self.proc = proc
        self.group = group
        self.buffer = buffer
        self.started_at_us = now_us()
        # A session's command pumps its output pipe into the buffer from a reader callback (no task, no
        # transport, no copy through a StreamReader); bwrap's own process is read through its stream.
        pump = getattr(proc, "pump", None)
        self._reader: asyncio.Future[None] = pump(buffer) if pump is not None else asyncio.ensure_future(self._read())
        self._finishing: asyncio.Future[None] | None = None  # _finish, run once whoever waits for it
        self.timed_out = False
        self.largest_file = largest_file
        self.proxy: egress.Proxy | None = None
        self.quota: QuotaWatch | CommandQuota | VolumeQuota | None = None
        self.releases: list[Callable[[], None]] = []  # what the command holds of its tenant's budgets, given back
        self._init = -1  # pidfd of the sandbox's init, once bwrap told its pid
        self._noted = False

    def adopt(self, pid: int) -> None:
        self._init = _open_pid(pid)

    def adopt_pidfd(self, pidfd: int) -> None:
        """Hold ``pidfd`` (of the command's init, made by a session's supervisor) as its kill."""
        self._init = pidfd

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.buffer.feed(chunk)
        mark("output closed")

    def _finished(self) -> asyncio.Future[None]:
        if self._finishing is None:
            self._finishing = asyncio.ensure_future(self._finish())
        return self._finishing

    async def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the command to exit; True when it did."""
        finishing = self._finished()
        if finishing.done():
            finishing.result()
            return True
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(finishing)
            return True
        except TimeoutError:
            return False

    async def _finish(self) -> None:
        await self._reader
        await self.proc.wait()
        mark("exit seen")
        self._release()
        if self.quota is not None:
            await self.quota.done  # its last check of the workspace
            mark("quota checked")

    def _release(self) -> None:
        if self._init >= 0:
            os.close(self._init)
            self._init = -1
        if self.proxy is not None:
            self.proxy.close()
        if self.quota is not None:
            self.quota.stop()
        while self.releases:
            self.releases.pop()()

    def _note_limits(self) -> None:
        """Say in the output why a limit stopped the command (once)."""
        if self._noted:
            return
        self._noted = True
        notes = []
        if self.proc.returncode in (128 + signal.SIGXFSZ, -signal.SIGXFSZ):
            notes.append(f"[a file reached the size limit of {megabytes(self.largest_file)} per file "
                         "(RLIMIT_FSIZE, at most the workspace quota)]")
        if self.quota is not None and (note := self.quota.note()):
            notes.append(note)
        if notes:
            self.buffer.feed(("\n" + "\n".join(notes) + "\n").encode())

    async def result(self, timeout: float | None = None) -> ShellResult:
        """Wait for exit, killing the whole process group at ``timeout``."""
        if not await self.wait(timeout):
            self.timed_out = True
            self.kill()
            await self._finished()
        self._note_limits()
        return ShellResult(
            output=self.buffer.result(),
            exit_code=self.proc.returncode if self.proc.returncode is not None else -1,
            timed_out=self.timed_out,
            started_at_us=self.started_at_us,
            finished_at_us=now_us(),
        )

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    def kill(self) -> None:
        _kill_init(self._init)
        self._init = -1
        if self.proc.returncode is None and self.group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.group, signal.SIGKILL)
        self._release()
