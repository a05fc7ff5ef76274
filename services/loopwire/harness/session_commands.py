"""A command in a session's sandbox, seen from the harness: the spare its supervisor made ahead (``Spare``: a
confined init, its bash waiting for the script) and the process interface bwrap's own process has, over the spare's
pipes (``Command``; ``ShellCommand`` for a shell that stays): output pumped from the pipe into the command's
buffer by an event-loop reader, the end read from the status pipe. ``session_sandbox`` asks for spares and hands
them commands."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal

from loopwire.harness.output import HeadTailBuffer
from loopwire.harness.sandbox_process import mark

_READ_SIZE = 1 << 18  # bytes of output read per wake-up (what asyncio's pipe transport reads)


class Command:
    """A command run in a spare of a session's supervisor, with the process interface bwrap's has.
    Its output is pumped straight from the pipe into the command's buffer (``pump``)."""

    stdout = None  # no stream: SandboxedProcess uses ``pump``

    def __init__(self, loop: asyncio.AbstractEventLoop, out_fd: int, stdin: asyncio.StreamWriter | None,
                 exited: asyncio.Future[int]) -> None:
        self._loop, self._out, self.stdin, self._exited = loop, out_fd, stdin, exited

    def pump(self, buffer: HeadTailBuffer) -> asyncio.Future[None]:
        """Feed the output pipe into ``buffer`` from a reader callback; the future is done at its end
        (every writer gone: the command's namespace has ended, or all it left closed the pipe)."""
        loop, fd = self._loop, self._out
        self._out = -1
        closed: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if _read_into(fd, buffer):
                return
            loop.remove_reader(fd)
            os.close(fd)
            mark("output closed")
            if not closed.done():
                closed.set_result(None)

        loop.add_reader(fd, readable)
        return closed

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)


class Spare:
    """A command's init made ahead of time, confined, its bash waiting for the script written to ``script``;
    ``out``, ``status`` and ``stdin``: our ends of its output, status and stdin pipes. With ``shell`` its
    bash is a shell that stays, serving one command after another, each read and run by a subshell it forked
    ahead (its runner: ``sandbox_supervisor.SHELL``)."""

    def __init__(self, pidfd: int, script: int, out: int, status: int, stdin: int, *, shell: bool = False) -> None:
        self.pidfd, self.script, self.out, self.status, self.stdin = pidfd, script, out, status, stdin
        self.shell = shell
        self.pid = _pid_of(pidfd) if shell else 0  # the init's pid here, whose tree tells a command's end
        self.shell_pid = 0  # its shell's pid here, once the shell said it is ready
        self.runner = 0  # the pid here of the shell's child that reads and runs the next command
        self._said = b""  # what the status pipe said past the last line taken

    def line(self) -> bytes | None:
        """The next whole line of the status pipe, without its newline: b"" while none is whole, None at the
        pipe's end (the init and the shell are gone) with no whole line left."""
        while b"\n" not in self._said:
            try:
                said = os.read(self.status, 64)
            except BlockingIOError:
                return b""
            except OSError:
                said = b""
            if not said:
                return None
            self._said += said
        line, self._said = self._said.split(b"\n", 1)
        return line

    def holds_line(self) -> bool:
        """Whether a whole line was read with the one before it (it makes the pipe readable no more)."""
        return b"\n" in self._said

    def take_runner(self) -> bool:
        """Once the shell's runner said the shell may serve (it does so before it reads a command): note the shell and
        its runner, which are then the init's only child and the shell's only child. False when they are not so
        (a status line a command left in the pipe was read as the runner's): the shell must not serve."""
        shells = _children(self.pid)
        if len(shells) != 1 or (self.shell_pid and shells[0] != self.shell_pid):
            return False
        runners = _children(shells[0])
        if len(runners) != 1 or runners[0] == self.runner:
            return False
        self.shell_pid, self.runner = shells[0], runners[0]
        return True

    def command_gone(self) -> bool:
        """Whether nothing of the command the runner ran is left, seen from here. Its processes are the runner, the
        runner's descendants and, orphaned, the init's children. The shell reaps the runner, then kills and waits
        out every other process of the namespace, and forks a new runner only after its status line: so the runner
        no longer the shell's child, then no child of the init but the shell, means the command is gone. A status
        line the command forged (its shell's status pipe is reachable through /proc) is not believed while it runs.
        (In this order: an orphan is the init's child before the runner that left it is reaped.)"""
        if not self.runner or self.runner in _children(self.shell_pid):
            return False
        return set(_children(self.pid)) <= {self.shell_pid}  # (a shell that serves once may have ended since)

    def namespace_ended(self) -> bool:
        """Whether the init has no child left: it says ``!<status>`` only then (its shell died)."""
        return not _children(self.pid)

    def alive(self) -> bool:
        """Whether its init and shell still wait: neither the init exited nor the status pipe holds a word
        (a shell that died idle, whose init then said so)."""
        poll = select.poll()  # (select's descriptors stop at 1024)
        for fd in (self.pidfd, self.status):
            poll.register(fd, select.POLLIN)
        return not poll.poll(0)

    def drop(self) -> None:
        kill_and_close(self.pidfd)
        for fd in (self.script, self.out, self.status, self.stdin):
            close_fd(fd)
        self.pidfd = self.script = self.out = self.status = self.stdin = -1


class ShellCommand:
    """A command run by a shell that stays (a spare with ``shell``), with the process interface bwrap's has.
    Its end is the shell's status line, written once nothing of the command runs and believed only once the
    runner is gone (``Spare.command_gone``), or the init's ``!<status>`` once the shell died and the namespace is
    empty; killed, its init's exit (which waits for every process of its namespace): the output pipe then holds all
    the command wrote, read to empty before the end is told (no marker in the output, which is any bytes)."""

    stdout = None  # no stream: SandboxedProcess uses ``pump``

    def __init__(self, loop: asyncio.AbstractEventLoop, spare: Spare, stdin: asyncio.StreamWriter | None,
                 exited: asyncio.Future[int]) -> None:
        self._loop, self._spare, self.stdin, self._exited = loop, spare, stdin, exited
        self._buffer: HeadTailBuffer | None = None
        self._closed: asyncio.Future[None] = loop.create_future()
        self.reusable = False  # the shell's own status line ended the command: its runner may say it serves again
        self._told = False  # a line of the status pipe told its end (or that it is to be killed)
        loop.add_reader(spare.status, self._status)
        if spare.holds_line():
            loop.call_soon(self._status)

    def pump(self, buffer: HeadTailBuffer) -> asyncio.Future[None]:
        self._buffer = buffer
        self._loop.add_reader(self._spare.out, self._drain)
        return self._closed

    def _drain(self, *, to_empty: bool = False) -> None:
        """Read the output pipe into the buffer (``_read_into``); stop reading once every writer is gone."""
        assert self._buffer is not None
        if not _read_into(self._spare.out, self._buffer, to_empty=to_empty):
            self._loop.remove_reader(self._spare.out)

    def _status(self) -> None:
        spare = self._spare
        if self._told:
            return
        line = spare.line()
        if line == b"":
            return
        self._told = True
        if line is not None and line.isdigit() and spare.command_gone():  # the shell's own line: "<status>"
            code, self.reusable = int(line), True
        elif line is not None and line[:1] == b"!" and line[1:].isdigit() and spare.namespace_ended():
            code = int(line[1:])  # the shell ended; its init told
        else:  # something of it still runs (a line it forged: it is killed, and its end told once all of it is
            # gone), or the pipe ended with the init and the shell, before the rest of the namespace is gone: told
            # once the init has exited, which it does only then
            self._loop.remove_reader(spare.status)
            _kill_only(spare.pidfd)
            self._loop.add_reader(spare.pidfd, self._init_gone)
            return
        self._loop.remove_reader(spare.status)
        mark("status received")
        self._end(code)

    def _init_gone(self) -> None:
        self._loop.remove_reader(self._spare.pidfd)
        self._end(-signal.SIGKILL)

    def _end(self, code: int) -> None:
        """Tell the command's end: nothing of it runs, so the output pipe holds all it wrote."""
        loop, spare = self._loop, self._spare
        if self._buffer is not None:
            self._drain(to_empty=True)
            loop.remove_reader(spare.out)
        mark("output closed")
        if not self._closed.done():
            self._closed.set_result(None)
        if not self._exited.done():
            self._exited.set_result(code)

    def abandon(self) -> None:
        """Stop reading (the command never started, or its shell is dropped)."""
        for fd in (self._spare.status, self._spare.out, self._spare.pidfd):
            if fd >= 0:
                self._loop.remove_reader(fd)
        if not self._closed.done():
            self._closed.set_result(None)

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)


def _read_into(fd: int, buffer: HeadTailBuffer, *, to_empty: bool = False) -> bool:
    """Feed what the output pipe ``fd`` holds into ``buffer``: one read, as a reader callback does (the loop calls
    it again while more waits, and a writer that keeps the pipe full never holds the loop), or with ``to_empty``
    until nothing is left (once nothing writes any more). False at its end: every writer gone."""
    while True:
        try:
            data = os.read(fd, _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        buffer.feed(data)
        if not to_empty:
            return True


def write_script(loop: asyncio.AbstractEventLoop, fd: int, script: bytes, *, close: bool = True) -> bool:
    """Write ``script`` to the waiting bash and close the pipe (its EOF ends the script; with ``close`` off, a
    shell that stays reads its length, and the pipe stays open); what the pipe cannot take at once is written as
    bash reads it, from a writer callback, which then closes the pipe: False says so."""
    os.set_blocking(fd, False)
    try:
        sent = os.write(fd, script)
    except BlockingIOError:
        sent = 0
    except OSError:  # bash is gone (killed): its init reports that
        sent = len(script)
    if sent == len(script):
        if close:
            os.close(fd)
        return True
    rest = memoryview(script)[sent:]

    def writable() -> None:
        nonlocal rest
        try:
            rest = rest[os.write(fd, rest):]
        except BlockingIOError:
            return
        except OSError:
            rest = rest[:0]
        if not rest:
            loop.remove_writer(fd)
            os.close(fd)

    loop.add_writer(fd, writable)
    return False


def read_status(loop: asyncio.AbstractEventLoop, fd: int, exited: asyncio.Future[int]) -> None:
    """bash's status, which the init writes once nothing of the command runs; none: it was killed."""
    loop.remove_reader(fd)
    try:
        data = os.read(fd, 16)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    mark("status received")
    if not exited.done():
        exited.set_result(int(data) if data.strip().lstrip(b"-").isdigit() else -signal.SIGKILL)


def _pid_of(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("Pid:")), -1)


def _children(pid: int) -> list[int]:
    """The children of a single-threaded process (none once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(n) for n in f.read().split()]
    except OSError:
        return []


def _kill_only(pidfd: int) -> None:
    with contextlib.suppress(OSError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def close_fd(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def kill_and_close(pidfd: int) -> None:
    if pidfd >= 0:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        close_fd(pidfd)
