"""A sandbox that starts once per session: each command costs a few forks, not a bubblewrap.

The session's first command starts bwrap exactly as ``Sandbox`` would for a command (same
uid drop, cgroup, rlimits, mounts, namespaces, workspace bind), except that it runs a small
supervisor (``sandbox_supervisor``) instead of ``bash -c``. Each later command is a request
on the supervisor's control socket, with the command's output pipe (and stdin pipe) passed as
descriptors.

The kill guarantee holds by construction, as for a sandbox of its own: every command runs in
a pid namespace of its own whose init the supervisor forks; the harness gets a pidfd of that
init before the command may run (the init waits for "go" on a pipe the harness holds, as bwrap
waits on its block pipe), and a SIGKILL through it makes the kernel kill every process of the
namespace, whatever sessions or double forks they made, while the session's sandbox lives on.
When bash exits its init exits too and takes what bash left behind with it, as bwrap's does.
Each command also gets its own mount and IPC namespaces with a fresh /tmp, /dev/shm and
/dev/pts, so nothing a command leaves there is seen by the next; it then runs with no
capability and the seccomp filter, as uid 1000. Commands of one session share its network
namespace (loopback only) and its read-only /proc, which lists the session's processes (a
command can signal only those of its own pid namespace). What a command changes in its shell (cd, export) never reaches the
next: each is a new ``bash -c`` in the workspace with the sandbox's fixed environment.

The session's sandbox dies with the session (``close``, from ``BackgroundTasks.kill_all``), with
the harness (bwrap's --die-with-parent), and when its supervisor dies (bwrap's init then ends
the sandbox's pid namespace); the next command starts a new one. ``network=true`` commands
still get a sandbox of their own: their egress proxy listens in a network namespace of the
command's own, never the session's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import struct
from pathlib import Path

from loopwire.harness.output import HeadTailBuffer
from loopwire.harness.sandbox import Sandbox, SandboxedProcess, SandboxUnavailable, command_env

log = logging.getLogger("loopwire.harness")


class _Command:
    """A command run by a session's supervisor, with the process interface bwrap's has."""

    def __init__(self, stdout: asyncio.StreamReader, stdin: asyncio.StreamWriter | None,
                 exited: asyncio.Future[int]) -> None:
        self.stdout, self.stdin, self._exited = stdout, stdin, exited

    @property
    def returncode(self) -> int | None:
        return self._exited.result() if self._exited.done() else None

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)


class _Supervisor:
    """One running session sandbox and the control socket to its supervisor."""

    def __init__(self, sandbox: Sandbox, workspace: Path) -> None:
        self.sandbox, self.workspace = sandbox, workspace
        self.ctl: socket.socket | None = None
        self.process: SandboxedProcess | None = None  # bwrap running the supervisor
        self._ids = itertools.count(1)
        self._started: dict[int, asyncio.Future[int]] = {}  # request id -> pidfd of its init
        self._exits: dict[int, asyncio.Future[int]] = {}
        self.alive = False
        self.bound = ""
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            spawn = self.sandbox._prepare(self.workspace, "", network=False, control=theirs.fileno())
            self.bound = spawn.workspace  # the workspace's real path: where it is in the sandbox
            theirs.detach()  # the spawn passes it to the supervisor and closes it
            self.process = await self.sandbox._launch(spawn, network=False, stdin=False,
                                                      buffer=HeadTailBuffer(self.sandbox.output_limit))
        except BaseException:
            ours.close()
            theirs.close()
            raise
        self.ctl = ours
        ours.setblocking(False)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(ours.fileno(), self._receive)
        self.alive = True

    def _receive(self) -> None:
        assert self.ctl is not None
        try:
            data, ancdata, _, _ = self.ctl.recvmsg(65536, socket.CMSG_SPACE(4))
        except BlockingIOError:
            return
        except OSError:
            data, ancdata = b"", []
        if not data:
            self._lost()
            return
        fds = [n for level, kind, raw in ancdata if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
               for n in struct.unpack(f"{len(raw) // 4}i", raw[:len(raw) - len(raw) % 4])]
        message = json.loads(data)
        ident = message["id"]
        if "exit" in message:
            if (exited := self._exits.pop(ident, None)) is not None and not exited.done():
                exited.set_result(int(message["exit"]))
            return
        started = self._started.pop(ident, None)
        if "error" in message or not fds or started is None or started.done():
            for fd in fds:  # a start given up on: its command never got "go"; kill its init
                _kill(fd)
            if started is not None and not started.done():
                started.set_exception(SandboxUnavailable(f"the session's sandbox cannot start a command: "
                                                         f"{message.get('error', 'no pidfd')}"))
            self._exits.pop(ident, None)
            return
        started.set_result(fds[0])

    def _lost(self) -> None:
        """The supervisor is gone, and with it every command of the sandbox (its pid namespace ended)."""
        if self.alive:
            said = self.process.buffer.result().text.strip() if self.process is not None else ""
            if said:
                log.warning("a session's sandbox supervisor ended: %s", said[-2000:])
            self.close(said)

    def close(self, said: str = "") -> None:
        """Kill the session's sandbox: its supervisor's pid namespace and every command in it."""
        self.alive = False
        if self.ctl is not None:
            if self._loop is not None and not self._loop.is_closed():  # else it closed before the session did
                self._loop.remove_reader(self.ctl.fileno())
            self.ctl.close()
            self.ctl = None
        if self.process is not None:
            self.process.kill()
        for started in self._started.values():
            if not started.done():
                started.set_exception(SandboxUnavailable("the session's sandbox ended while a command started"
                                                         + (f": {said[-500:]}" if said else "")))
        for exited in self._exits.values():
            if not exited.done():
                exited.set_result(-9)
        self._started.clear()
        self._exits.clear()

    async def run(self, command: str, *, stdin: bool, buffer: HeadTailBuffer | None) -> SandboxedProcess:
        assert self.ctl is not None
        loop = asyncio.get_running_loop()
        ident = next(self._ids)
        out_r, out_w = os.pipe()
        go_r, go_w = os.pipe()
        in_r, in_w = os.pipe() if stdin else (-1, -1)
        ws = self.bound
        request = {"id": ident, "argv": ["bash", "-c", command], "cwd": ws, "env": command_env(ws), "stdin": stdin}
        started: asyncio.Future[int] = loop.create_future()
        exited: asyncio.Future[int] = loop.create_future()
        self._started[ident], self._exits[ident] = started, exited
        try:
            fds = [out_w, go_r, *([in_r] if stdin else [])]
            self.ctl.sendmsg([json.dumps(request).encode()],
                             [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
        except BaseException:
            for fd in (out_r, in_w, go_w):
                _close(fd)
            self._started.pop(ident, None)
            self._exits.pop(ident, None)
            raise
        finally:
            for fd in (out_w, go_r, in_r):
                _close(fd)
        try:
            pidfd = await asyncio.shield(started)
        except BaseException:
            _close(go_w)  # "go" never comes: its init exits without running the command
            started.add_done_callback(_kill_started)
            for fd in (out_r, in_w):
                _close(fd)
            raise
        try:
            reader = asyncio.StreamReader(limit=1 << 20)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(out_r, "rb", 0))
            out_r = -1
            writer = None
            if stdin:
                transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                                    os.fdopen(in_w, "wb", 0))
                in_w = -1
                writer = asyncio.StreamWriter(transport, protocol, None, loop)
            process = SandboxedProcess(_Command(reader, writer, exited),
                                       buffer or HeadTailBuffer(self.sandbox.output_limit),
                                       self.sandbox.limits.largest_file)
            process.adopt_pidfd(pidfd)
            pidfd = -1
            with contextlib.suppress(BrokenPipeError):  # its init failed and said why in the output
                os.write(go_w, b"go")
            self.sandbox.watch_quota(process, ws)
        except BaseException:
            _kill(pidfd)
            for fd in (out_r, in_w):
                _close(fd)
            raise
        finally:
            _close(go_w)
        return process



def _close(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def _kill(pidfd: int) -> None:
    if pidfd >= 0:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        _close(pidfd)


def _kill_started(started: asyncio.Future[int]) -> None:
    if not started.cancelled() and started.exception() is None:
        _kill(started.result())


class SessionSandbox:
    """The sandbox of one session's commands: started on its first command, restarted when it
    died, killed by ``close``. ``network=true`` commands, and every command when the sandbox is
    per command (``Sandbox.per_session`` off), start a sandbox of their own instead."""

    def __init__(self, sandbox: Sandbox, workspace: Path) -> None:
        self.sandbox, self.workspace = sandbox, workspace
        self._supervisor: _Supervisor | None = None
        self._starting: asyncio.Lock | None = None
        self.failed = ""  # why this session's sandbox could not start: its commands run one sandbox each

    async def start(self, command: str, *, network: bool = False, stdin: bool = False,
                    buffer: HeadTailBuffer | None = None) -> SandboxedProcess:
        if network or not self.sandbox.per_session or self.failed:
            return await self.sandbox.start(self.workspace, command, network=network, stdin=stdin, buffer=buffer)
        if self.sandbox.unavailable_reason:
            raise SandboxUnavailable(self.sandbox.unavailable_reason)
        why = ""
        for _ in range(2):  # a supervisor found dead as the command starts is replaced once
            supervisor = await self._running()
            if supervisor is None:
                break
            try:
                return await supervisor.run(command, stdin=stdin, buffer=buffer)
            except (OSError, SandboxUnavailable) as e:
                if supervisor.alive:
                    raise
                supervisor.close()
                why = str(e)
        if why:
            self.failed = why
            log.warning("a session's sandbox ends as it starts commands (%s): each of its commands gets a sandbox of "
                        "its own", why)
        return await self.sandbox.start(self.workspace, command, stdin=stdin, buffer=buffer)

    async def _running(self) -> _Supervisor | None:
        """The live supervisor, started (or restarted) now if need be; None when it cannot start."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._supervisor is not None and self._supervisor.alive:
                return self._supervisor
            supervisor = _Supervisor(self.sandbox, self.workspace)
            try:
                await supervisor.start()
            except (OSError, SandboxUnavailable) as e:
                supervisor.close()
                self.failed = str(e)
                log.warning("a session's sandbox cannot start (%s): each of its commands gets a sandbox of its own", e)
                return None
            self._supervisor = supervisor
            return supervisor

    @property
    def bwrap_pid(self) -> int | None:
        """The host pid of the bwrap that runs this session's sandbox (None when none runs)."""
        supervisor = self._supervisor
        if supervisor is None or not supervisor.alive or supervisor.process is None:
            return None
        return supervisor.process.group

    def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.close()
            self._supervisor = None
