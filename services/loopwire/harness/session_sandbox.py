"""A sandbox that starts once per session: each command costs a few forks, not a bubblewrap.

The session's first command starts bwrap exactly as ``Sandbox`` would for a command (same
uid drop, cgroup, rlimits, mounts, namespaces, workspace bind), except that it runs a small
supervisor (``sandbox_supervisor``) instead of ``bash -c``. While the session is idle the
supervisor makes the next commands' inits (spares: ``Sandbox.spares_ahead``, two, so a second
command right after the first finds one too), each with the command's bash started and waiting,
confined, for its script; it hands the harness a pidfd of each and its ends of the spare's
script, output, status and stdin pipes. A command is written straight to its waiting bash, so it
waits for no clone, mount, seccomp load, exec or shell start. Its output is read from the pipe
into its buffer by an event-loop reader (no task or stream between): the harness's end of a spare and of the
command run in it is ``session_commands``.

The kill guarantee holds by construction, as for a sandbox of its own: every command runs in
a pid namespace of its own whose init is its spare; the harness holds a pidfd of that init
before it sends the command, and a SIGKILL through it makes the kernel kill every process of
the namespace, whatever sessions or double forks they made, while the session's sandbox lives
on. When bash exits its init kills and reaps what bash left behind, then writes bash's status:
nothing of a command runs once the harness sees its end.
Each command also gets its own mount and IPC namespaces with a fresh /tmp, /dev/shm and
/dev/pts, so nothing a command leaves there is seen by the next; it then runs with no
capability and the seccomp filter, as uid 1000. Commands of one session share its network
namespace (loopback only) and its read-only /proc, which lists the session's processes (a
command can signal only those of its own pid namespace). What a command changes in its shell (cd, export) never reaches the
next: each runs in a bash of its own, started in the workspace with the sandbox's fixed environment.

The session's sandbox dies with the session (``close``, from ``BackgroundTasks.kill_all``), with
the harness (bwrap's --die-with-parent), and when its supervisor dies (bwrap's init then ends
the sandbox's pid namespace); the next command starts a new one. ``network=true`` commands
still get a sandbox of their own: their egress proxy listens in a network namespace of the
command's own, never the session's.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import itertools
import json
import logging
import os
import signal
import socket
import struct
from pathlib import Path

from loopwire.harness.output import HeadTailBuffer
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_limits import SandboxUnavailable
from loopwire.harness.sandbox_mounts import command_env
from loopwire.harness.sandbox_process import SandboxedProcess, mark
from loopwire.harness.session_commands import (
    Command,
    ShellCommand,
    Spare,
    close_fd,
    kill_and_close,
    read_status,
    write_script,
)
from loopwire.harness.tenant_volumes import VolumeQuota
from loopwire.harness.workspace_files import ToolInputError, open_workspace
from loopwire.harness.workspace_quota import SessionQuota

log = logging.getLogger("loopwire.harness")


class _Supervisor:
    """One running session sandbox, the control socket to its supervisor, and its spares."""

    def __init__(self, sandbox: Sandbox, workspace: Path) -> None:
        self.sandbox, self.workspace = sandbox, workspace
        self.ctl: socket.socket | None = None
        self.process: SandboxedProcess | None = None  # bwrap running the supervisor
        self._ids = itertools.count(1)
        self._ready: collections.deque[Spare] = collections.deque()
        self._waiting: collections.deque[asyncio.Future[Spare]] = collections.deque()
        self._asked = 0  # spares asked for and not come yet
        self._readying: set[Spare] = set()  # shells whose runner has not yet said they may serve
        self._running = 0  # commands started here that have not ended
        self.alive = False
        self.bound = ""
        self._spec: dict[str, object] = {}  # what each spare is made for: workspace, environment, bash_ahead
        self.quota: SessionQuota | None = None
        self.volume = ""  # the tenant's tree, when it is a volume of the quota's size
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            spawn = self.sandbox._prepare(self.workspace, "", network=False, control=theirs.fileno())
            self.bound = spawn.workspace  # the workspace's real path: where it is in the sandbox
            self._spec = {"cwd": self.bound, "env": command_env(self.bound), "ahead": self.sandbox.bash_ahead,
                          "shell": self.sandbox.shell_stays}
            theirs.detach()  # the spawn passes it to the supervisor and closes it
            self.process = await self.sandbox._launch(spawn, network=False, stdin=False, quota=False,
                                                      buffer=HeadTailBuffer(self.sandbox.output_limit))
        except BaseException:
            ours.close()
            theirs.close()
            raise
        self.ctl = ours
        ours.setblocking(False)
        self._loop = asyncio.get_running_loop()
        # In a context of its own: it serves every later command, so it keeps no trace of the first one.
        self._loop.add_reader(ours.fileno(), contextvars.Context().run, self._receive)
        self.alive = True
        self._top_up()
        lim = self.sandbox.limits
        tree = self.sandbox.tenant_tree(self.bound)
        if self.sandbox.volumes is not None and self.sandbox.bounded(tree):
            self.volume = tree  # the filesystem bounds what its commands write: nothing to check
        elif lim.workspace_quota > 0:
            usage = self.sandbox._usage
            self.quota = SessionQuota(open_workspace(self.bound)[0], lim.workspace_quota, lim.quota_interval,
                                      usage.get(self.bound), functools.partial(usage.__setitem__, self.bound))

    def _top_up(self) -> None:
        """Ask for spares: one per command waiting, and ``Sandbox.spares_ahead`` ready while no command
        runs (so making them never competes with a command for the CPU, and the second of two commands
        back to back finds one made too)."""
        ahead = 0 if self._running else self.sandbox.spares_ahead
        wanted = len(self._waiting) + ahead - len(self._ready) - self._asked - len(self._readying)
        for _ in range(max(0, wanted)):
            if self.ctl is None:
                return
            self.ctl.sendmsg([json.dumps({"spare": next(self._ids), **self._spec}).encode()])
            self._asked += 1

    def _receive(self) -> None:
        assert self.ctl is not None
        try:
            data, ancdata, _, _ = self.ctl.recvmsg(65536, socket.CMSG_SPACE(5 * 4))
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
        self._asked -= 1
        if "error" in message or len(fds) != 5:
            for fd in fds:
                kill_and_close(fd) if fd == fds[0] else close_fd(fd)
            why = SandboxUnavailable(f"the session's sandbox cannot start a command: {message.get('error', 'no pidfd')}")
            while self._waiting:
                if not (waiter := self._waiting.popleft()).done():
                    waiter.set_exception(why)
            return
        spare = Spare(*fds, shell=self.sandbox.shell_stays)
        if spare.shell:
            os.set_blocking(spare.out, False)
            os.set_blocking(spare.status, False)
            self._await_runner(spare)
        else:
            self._give_back(spare, first=False)
        self._top_up()

    def _ended(self, _: object) -> None:
        self._running -= 1
        if self.alive:
            self._top_up()

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
        if self.quota is not None:
            self.quota.close()
            self.quota = None
        while self._ready:
            self._ready.popleft().drop()
        while self._readying:
            spare = self._readying.pop()
            if self._loop is not None and not self._loop.is_closed() and spare.status >= 0:
                self._loop.remove_reader(spare.status)
            spare.drop()
        while self._waiting:
            if not (waiter := self._waiting.popleft()).done():
                waiter.set_exception(SandboxUnavailable("the session's sandbox ended while a command started"
                                                        + (f": {said[-500:]}" if said else "")))

    def _give_back(self, spare: Spare, *, first: bool = True) -> None:
        """A spare for the next command waiting, else in line (a shell that served before: first)."""
        while self._waiting:
            if not (waiter := self._waiting.popleft()).done():
                waiter.set_result(spare)
                return
        if first:
            self._ready.appendleft(spare)
        else:
            self._ready.append(spare)

    def _await_runner(self, spare: Spare) -> None:
        """A shell is handed a command only once its runner said it may serve (``Spare.take_runner``): until then it
        counts as a spare on its way (no other is asked for meanwhile)."""
        assert self._loop is not None
        self._readying.add(spare)
        self._loop.add_reader(spare.status, self._runner_said, spare)
        if spare.holds_line():  # it came with the status line
            self._loop.call_soon(self._runner_said, spare)

    def _runner_said(self, spare: Spare) -> None:
        assert self._loop is not None
        if spare not in self._readying:  # (told already, or dropped with the sandbox)
            return
        line = spare.line()
        if line == b"":
            return
        self._loop.remove_reader(spare.status)
        self._readying.discard(spare)
        if line == b"1" and self.alive and spare.take_runner():
            self._give_back(spare)
        else:  # something left in /tmp, /dev/shm or IPC, or the shell ended
            spare.drop()
        self._top_up()

    async def _spare(self) -> Spare:
        """A spare for the next command: a ready one (a shell that served before first), else the next one made."""
        while self._ready and not self._ready[0].alive():  # ended while idle (killed from outside)
            self._ready.popleft().drop()
        if self._ready:
            spare = self._ready.popleft()
        else:
            waiter: asyncio.Future[Spare] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            self._top_up()
            try:
                spare = await asyncio.shield(waiter)
            except asyncio.CancelledError:
                waiter.cancel()
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    waiter.result().drop()  # it came as we were cancelled
                raise
            mark("spare made (the command waited for it)")
        self._top_up()
        return spare

    async def run(self, command: str, *, stdin: bool, buffer: HeadTailBuffer | None) -> SandboxedProcess:
        """``command`` sent to the next spare: a fresh one (``Command``) or a shell that stays (``ShellCommand``),
        which goes back to the ready ones when the command ends if it said it may serve again."""
        assert self.ctl is not None
        if "\0" in command:
            raise ToolInputError("a shell command cannot hold a NUL character")
        mark("request")
        self._running += 1  # from now on no spare is made ahead
        try:
            spare = await self._spare()
        except BaseException:
            self._ended(None)
            raise
        mark("spare taken")
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[int] = loop.create_future()
        proc: Command | ShellCommand
        if spare.shell:
            proc = ShellCommand(loop, spare, None, exited)
            exited.add_done_callback(functools.partial(self._shell_ended, proc, spare, stdin))
        else:
            proc = Command(loop, spare.out, None, exited)
            exited.add_done_callback(self._ended)
        flag, data = (b"i" if stdin else b"-"), os.fsencode(command)  # what the bash reads
        try:
            if not spare.shell:
                write_script(loop, spare.script, flag + data)
                loop.add_reader(spare.status, read_status, loop, spare.status, exited)
                spare.script = spare.status = -1  # the writer and the status reader close them
                os.set_blocking(spare.out, False)
            elif not write_script(loop, spare.script, flag + b"%010d" % len(data) + data, close=False):
                spare.script = -1  # the writer callback sends the rest and closes it: this shell serves once
            mark("command sent")
            if stdin:
                pipe = os.fdopen(spare.stdin, "wb", 0)
                spare.stdin = -1  # the pipe's, and its transport's once made: they close it, even when cancelled
                transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, pipe)
                proc.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
            elif not spare.shell:
                close_fd(spare.stdin)
                spare.stdin = -1
            process = SandboxedProcess(proc, buffer or HeadTailBuffer(self.sandbox.output_limit),
                                       self.sandbox.limits.largest_file)
            if spare.shell:
                process.adopt_pidfd(os.dup(spare.pidfd))  # the shell keeps its own pidfd for the next command
            else:
                process.adopt_pidfd(spare.pidfd)
                spare.pidfd = spare.out = -1  # the process kills through it; its pump reads, then closes the output
            mark("pipes connected")
            if self.quota is not None:
                process.quota = self.quota.watch(process.kill)
            elif self.volume and self.sandbox.volumes is not None:
                process.quota = VolumeQuota(self.sandbox.volumes, self.volume)
            mark("quota watch started")
        except BaseException:
            if isinstance(proc, ShellCommand):
                proc.abandon()
            spare.drop()  # the command may have started: its namespace ends with its init
            if not exited.done():
                exited.set_result(-signal.SIGKILL)
            raise
        return process

    def _shell_ended(self, shell: ShellCommand, spare: Spare, stdin: bool, _: object) -> None:
        """A shell's command ended: the shell may serve the next one if its own status line ended it (it was not
        killed), the command had no stdin and its script pipe is still open; its next runner then says whether it
        does. Else it is dropped."""
        shell.abandon()
        if shell.reusable and not stdin and self.alive and spare.pidfd >= 0 and spare.script >= 0:
            self._await_runner(spare)
        else:
            spare.drop()
        self._ended(None)


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
        release = await self.sandbox.admit(self.workspace)  # before the sandbox binds the workspace: on its volume
        why = ""
        try:
            for _ in range(2):  # a supervisor found dead as the command starts is replaced once
                supervisor = await self._running()
                if supervisor is None:
                    break
                try:
                    process = await supervisor.run(command, stdin=stdin, buffer=buffer)
                except (OSError, SandboxUnavailable) as e:
                    if supervisor.alive:
                        raise
                    supervisor.close()
                    why = str(e)
                else:
                    process.releases.append(release)
                    return process
        except BaseException:
            release()
            raise
        release()  # the command starts a sandbox of its own below, which takes its own share
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
