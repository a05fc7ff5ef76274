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
    bash is a shell that stays, serving one command after another (``sandbox_supervisor.SHELL``)."""

    def __init__(self, pidfd: int, script: int, out: int, status: int, stdin: int, *, shell: bool = False) -> None:
        self.pidfd, self.script, self.out, self.status, self.stdin = pidfd, script, out, status, stdin
        self.shell = shell
        self.pid = _pid_of(pidfd) if shell else 0  # the init's pid here, whose tree tells a command's end

    def quiet(self) -> bool:
        """Whether nothing but the init and its waiting shell runs in the namespace, seen from here: every
        process of a command descends from the shell or, orphaned, from the init. A status line a command
        forged (its shell's status pipe is reachable through /proc) is not believed while the command runs."""
        shells = _children(self.pid)
        if not shells:  # the init alone, or gone: its namespace is empty or ended
            return True
        if len(shells) > 1 or _children(shells[0]):
            return False
        # Nothing was reparented to the init meanwhile; the shell itself may be gone by now (a shell that
        # serves once exits on its script pipe's end right after its status line).
        return set(_children(self.pid)) <= set(shells)

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
    Its end is the shell's status line, written once nothing of the command runs (``in_place``: the shell ran it
    itself and ended with it, so the init's line ``!<status>``), or, killed, its init's exit
    (which waits for every process of its namespace): the output pipe then holds all the command wrote, read to
    empty before the end is told (no marker in the output, which is any bytes)."""

    stdout = None  # no stream: SandboxedProcess uses ``pump``

    def __init__(self, loop: asyncio.AbstractEventLoop, spare: Spare, stdin: asyncio.StreamWriter | None,
                 exited: asyncio.Future[int], *, in_place: bool = False) -> None:
        self._loop, self._spare, self.stdin, self._exited = loop, spare, stdin, exited
        self._buffer: HeadTailBuffer | None = None
        self._closed: asyncio.Future[None] = loop.create_future()
        self.reusable = False  # the shell said it may serve the next command
        self._forged = False  # a status line came while the command still ran
        # Run by the shell itself (which never serves again): its status pipe has one writer left, the init (not
        # dumpable: out of the command's reach), whose line "!<status>" comes once nothing of the namespace runs.
        self._in_place = in_place
        loop.add_reader(spare.status, self._status)

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
        loop, spare = self._loop, self._spare
        try:
            said = os.read(spare.status, 64)
        except BlockingIOError:
            return
        except OSError:
            said = b""
        if said and not self._in_place and (self._forged or not spare.quiet()):  # something of it still runs: it is
            self._forged = True  # killed, and its end told once all of it is gone (below: once its init exited)
            _kill_only(spare.pidfd)
            return
        loop.remove_reader(spare.status)
        mark("status received")
        words = said.split(b"\n", 1)[0].split()  # (a shell that serves once: its init's line may follow)
        if len(words) == 2 and words[0].isdigit():  # "<status> <may serve again>"
            code, self.reusable = int(words[0]), words[1] == b"1"
        elif len(words) == 1 and words[0][:1] == b"!" and words[0][1:].isdigit():  # the shell ended; its init told
            code = int(words[0][1:])
        else:  # killed (nothing said: the pipe ends with the init and the shell, before the rest of the namespace
            # is gone), or nothing readable said: told once the init has exited, which it does only then
            _kill_only(spare.pidfd)
            loop.add_reader(spare.pidfd, self._init_gone)
            return
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
