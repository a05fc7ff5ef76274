"""Interactive commands on a pseudo-terminal: `exec_command` starts one and returns what it
printed once it exited or its output settled (nothing new for ``QUIET_S``), the yield window
being the longest wait; while it still runs it gets a session id, and `write_stdin` types into
it (control keys too: "\\u0003" is Ctrl-C) and returns what it printed since, the same way.

The pty is made inside the sandbox, by util-linux `script` running as the sandboxed command:
the relay between the harness's pipes and the pty master, the pty itself (from the sandbox's own
devpts instance) and the program all live in the same namespaces, under the same seccomp filter
(TIOCSTI denied), rlimits, uid and cgroup as any shell command, and the kill of the sandbox's
init ends them together. `script` does setsid + TIOCSCTTY, so Ctrl-C reaches the foreground
program as SIGINT through the line discipline. A host pty passed in instead would leave its
master and line discipline on the harness's side and need a second setsid inside to become a
controlling tty; `script` needs nothing new on the host (util-linux is required already).
Only stdin differs from a shell command: a pipe (``Sandbox.start(stdin=True)``), not /dev/null.

Sessions belong to the session's tool context (`BackgroundTasks.exec`): they survive turns and
approval waits (parked with the background commands), end with the session (`kill_all`), are
reported lost after a harness restart (the transcript names them), and are bounded per tenant
(the tenant's tree under the workspace root; ``configure``).
"""

from __future__ import annotations

import asyncio
import codecs
import itertools
import re
import shlex
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from loopwire.harness import tenant_uids
from loopwire.harness.output import CappedOutput, HeadTailBuffer
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_process import SandboxedProcess
from loopwire.harness.workspace_files import ToolInputError, check_workspace_path

MIN_YIELD_MS, MAX_YIELD_MS, DEFAULT_YIELD_MS = 250, 30_000, 1000
# A call returns once the program's output has settled: something printed, then nothing new for this long (a
# REPL's answer, a prompt); the yield window only bounds the wait for a program that stays silent or keeps printing.
QUIET_S = 0.15
DEFAULT_PER_TENANT = 8
# A terminal of a fixed size: `script` copies none from a pipe, and 0x0 confuses programs.
_PTY = "stty rows 40 cols 120 2>/dev/null; exec bash -c {}"
_STARTED = re.compile(r"\[exec session (\d+) still running")
_ENDED = re.compile(r"exec session (\d+) (?:exited|was lost)")


def yield_seconds(ms: float | None) -> float:
    """The yield window in seconds, clamped to [250 ms, 30 s]."""
    value = DEFAULT_YIELD_MS if ms is None else ms
    return min(max(float(value), MIN_YIELD_MS), MAX_YIELD_MS) / 1000


class _Output(HeadTailBuffer):
    """What a session printed since the model last read it, capped head + tail per read. A
    character split between two reads is kept whole for the next one (not escaped twice)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
        self.fed_at = 0.0  # the loop's time of the last output
        self._fed: asyncio.Future[bool] | None = None

    def feed(self, chunk: bytes) -> None:
        super().feed(chunk)
        self.fed_at = time.monotonic()  # the clock of asyncio's loop
        if self._fed is not None and not self._fed.done():
            self._fed.set_result(True)

    async def settled(self, ended: asyncio.Future[bool], window: float) -> bool:
        """Wait until the program ended (True), or its output settled (something to read, then nothing new
        for QUIET_S) or ``window`` seconds passed (False)."""
        loop = asyncio.get_running_loop()
        since = loop.time()
        deadline = since + window
        while not ended.done() and (now := loop.time()) < deadline:
            if self.total:  # new output only moves fed_at: wait out the quiet period from the latest
                quiet = QUIET_S - (now - max(self.fed_at, since))
                if quiet <= 0:
                    break
                await asyncio.wait([ended], timeout=min(quiet, deadline - now))
            else:  # nothing yet: wait for the first output
                self._fed = loop.create_future()
                await asyncio.wait([ended, self._fed], timeout=deadline - now, return_when=asyncio.FIRST_COMPLETED)
                self._fed = None
        return ended.done()

    def take(self, final: bool = False) -> CappedOutput:
        if self.total == len(self.head) + len(self.tail):  # nothing cut
            out = CappedOutput(self._decoder.decode(bytes(self.head + self.tail), final), False)
        else:
            self._decoder.reset()
            out = self.result()
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        return CappedOutput(out.text.replace("\r\n", "\n"), out.truncated)


class _Bound:
    """Live exec sessions per tenant of one harness (one per Sandbox): a slot is taken before
    the command starts and given back when its process ends."""

    def __init__(self, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self.live: dict[str, int] = {}

    def take(self, tenant: str) -> None:
        n = self.live.get(tenant, 0)
        if n >= self.per_tenant:
            raise ToolInputError(f"this tenant already runs {n} exec sessions (at most {self.per_tenant}); end one "
                                 "first (write_stdin with \"exit\\n\" or Ctrl-C \"\\u0003\")")
        self.live[tenant] = n + 1

    def give(self, tenant: str) -> None:
        n = self.live.get(tenant, 0) - 1
        if n > 0:
            self.live[tenant] = n
        else:
            self.live.pop(tenant, None)


_BOUNDS: weakref.WeakKeyDictionary[Sandbox, _Bound] = weakref.WeakKeyDictionary()
_WATCHERS: set[asyncio.Future[bool]] = set()


def configure(sandbox: Sandbox, per_tenant: int) -> None:
    """Set how many exec sessions one tenant may run at once through this sandbox."""
    _bound(sandbox).per_tenant = max(per_tenant, 0)


def _bound(sandbox: Sandbox) -> _Bound:
    bound = _BOUNDS.get(sandbox)
    if bound is None:
        bound = _BOUNDS[sandbox] = _Bound(DEFAULT_PER_TENANT)
    return bound


def tenant_of(sandbox: Sandbox, workspace: Path) -> str:
    """The tenant's tree holding the workspace ('' outside every tenant's tree: one shared bound)."""
    return tenant_uids.tenant_tree(check_workspace_path(workspace), sandbox.workspace_root) or ""


class Starter(Protocol):
    async def __call__(self, sandbox: Sandbox, workspace: Path, command: str, *, stdin: bool,
                       buffer: HeadTailBuffer) -> SandboxedProcess: ...


async def _own_sandbox(sandbox: Sandbox, workspace: Path, command: str, *, stdin: bool,
                       buffer: HeadTailBuffer) -> SandboxedProcess:
    return await sandbox.start(workspace, command, stdin=stdin, buffer=buffer)


@dataclass
class ExecSession:
    number: int
    command: str
    process: SandboxedProcess
    output: _Output
    ended: asyncio.Future[bool]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def stdin(self) -> asyncio.StreamWriter:
        assert self.process.proc.stdin is not None
        return self.process.proc.stdin


@dataclass
class Reply:
    """What a call read: output since the last read, and the exit code once it ended."""

    output: CappedOutput
    number: int = 0  # the session to write to while it runs (0: it exited)
    exit_code: int | None = None
    note: str = ""


class ExecSessions:
    """The exec sessions of one session (kept across its runs in one harness process)."""

    def __init__(self, start: Starter | None = None) -> None:
        """``start``: how a command of this session starts (its session's sandbox); none: a sandbox each."""
        self._start: Starter = start or _own_sandbox
        self.sessions: dict[int, ExecSession] = {}
        self.lost: set[int] = set()  # named by the transcript, run by an earlier harness process
        self._numbers = itertools.count(1)

    def adopt(self, texts: list[str]) -> list[str]:
        """Reconcile with the transcript: sessions it shows running that none here runs are lost.
        New numbers follow every number the transcript names, so an old id never means a new one."""
        started: list[int] = []
        ended: set[int] = set()
        for text in texts:
            started += [int(m.group(1)) for m in _STARTED.finditer(text)]
            ended.update(int(m.group(1)) for m in _ENDED.finditer(text))
        newly = [n for n in dict.fromkeys(started) if n not in self.sessions and n not in ended and n not in self.lost]
        self.lost.update(newly)
        self._numbers = itertools.count(max([0, *started, *ended, *self.sessions]) + 1)
        return [f"exec session {n}" for n in newly]

    @property
    def live(self) -> bool:
        return any(s.process.running for s in self.sessions.values())

    async def start(self, sandbox: Sandbox, workspace: Path, command: str, window: float) -> Reply:
        """Run ``command`` on a pty; once it exited or its output settled (at most ``window`` s) return what
        it printed."""
        tenant = tenant_of(sandbox, workspace)
        bound = _bound(sandbox)
        bound.take(tenant)
        try:
            pty_command = _PTY.format(shlex.quote(command))
            process = await self._start(sandbox, workspace, f"exec script -qec {shlex.quote(pty_command)} /dev/null",
                                        stdin=True, buffer=_Output(sandbox.output_limit))
        except BaseException:
            bound.give(tenant)
            raise
        ended = asyncio.ensure_future(process.wait(None))
        _WATCHERS.add(ended)  # held until the process is gone, whoever still holds the session
        ended.add_done_callback(_WATCHERS.discard)
        ended.add_done_callback(lambda _: bound.give(tenant))
        assert isinstance(process.buffer, _Output)
        session = ExecSession(0, command, process, process.buffer, ended)
        try:
            if await session.output.settled(ended, window):
                return await self._ended(session)
        except BaseException:
            process.kill()
            raise
        session.number = next(self._numbers)
        self.sessions[session.number] = session
        return Reply(session.output.take(), session.number)

    async def write(self, number: int, chars: str, window: float) -> Reply:
        """Type ``chars`` into a running session; once it exited or its output settled (at most ``window`` s)
        return what it printed since the last read."""
        session = self.sessions.get(number)
        if session is None and number in self.lost:
            raise ToolInputError(f"exec session {number} was lost when the harness restarted; start the command "
                                 "again with exec_command")
        if session is None:
            raise ToolInputError(f"no exec session {number} in this session (exec_command gives a session_id to a "
                                 "command that still runs; one that exited has none)")
        async with session.lock:
            deadline = asyncio.get_running_loop().time() + window
            note = ""
            if chars and session.process.running:
                try:
                    session.stdin.write(chars.encode())
                    await asyncio.wait_for(session.stdin.drain(), window)
                except TimeoutError:
                    note = "[the program has not read all of the input yet]"
                except (BrokenPipeError, ConnectionResetError):
                    note = "[input not sent: the program exited]"
            elif chars:
                note = "[input not sent: the program exited]"
            if await session.output.settled(session.ended, max(deadline - asyncio.get_running_loop().time(), 0.0)):
                self.sessions.pop(number, None)
                reply = await self._ended(session)
                reply.note = note
                return reply
            return Reply(session.output.take(), number, note=note)

    async def _ended(self, session: ExecSession) -> Reply:
        result = await session.process.result(None)  # it has exited; adds why a limit stopped it, if one did
        return Reply(session.output.take(final=True), exit_code=result.exit_code)

    def kill_all(self) -> None:
        for session in self.sessions.values():
            session.process.kill()
        self.sessions.clear()
