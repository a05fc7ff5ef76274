"""Long-running commands detach into handles; their completion is pushed, not polled.

The loop appends a finished task's result to the conversation at the next safe point, and
the `wait` tool blocks on a handle, so the model never writes a `sleep` loop.

Handles outlive the run that made them: a run that suspends for approval parks its tasks
with the service and the resumed run takes them back. A harness restart kills them (they die
with their parent); the resumed run finds their handles in the transcript and reports them
as lost, so the model is told instead of waiting for a result that cannot come.

The session's interactive exec sessions (``exec_sessions``) live here too, so they share that
lifetime: parked while the session waits for approval, killed with ``kill_all``, lost on restart.
So does the session's sandbox (``session_sandbox``), which every command of the session starts in.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from loopwire.harness.exec_sessions import ExecSessions
from loopwire.harness.output import HeadTailBuffer
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_process import SandboxedProcess, ShellResult
from loopwire.harness.session_sandbox import SessionSandbox


@dataclass
class BackgroundTask:
    handle: str
    command: str
    process: SandboxedProcess
    waiter: asyncio.Task[ShellResult]
    result: ShellResult | None = None
    # Set once the model has seen the result (through `wait` or a completion item).
    delivered: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)


# The texts the harness itself writes when it detaches a command and when the model sees its end.
_DETACHED = re.compile(r"detached as handle (bg-(\d+))\b")
_SEEN = re.compile(r"^(?:\[background command (bg-\d+) (?:finished|was lost)|(bg-\d+) finished:)")


def transcript_handles(texts: list[str]) -> tuple[list[str], set[str]]:
    """Handles detached in a transcript (in order), and those whose end the model has seen."""
    detached, seen = [], set()
    for text in texts:
        detached += [m.group(1) for m in _DETACHED.finditer(text)]
        if m := _SEEN.match(text):
            seen.add(m.group(1) or m.group(2))
    return detached, seen


class BackgroundTasks:
    """The detached commands of one session (kept across the runs of one harness process)."""

    def __init__(self) -> None:
        self.tasks: dict[str, BackgroundTask] = {}
        self.lost: set[str] = set()  # detached by an earlier harness process that has since died
        self._numbers = itertools.count(1)
        self._changed = asyncio.Event()
        self.exec = ExecSessions(self.start)  # interactive commands on a pty (exec_command / write_stdin)
        self.sandbox: SessionSandbox | None = None

    async def start(self, sandbox: Sandbox, workspace: Path, command: str, *, network: bool = False,
                    stdin: bool = False, buffer: HeadTailBuffer | None = None) -> SandboxedProcess:
        """Start a command of this session in the session's sandbox (made on first use)."""
        if self.sandbox is None or self.sandbox.sandbox is not sandbox or self.sandbox.workspace != workspace:
            if self.sandbox is not None:
                self.sandbox.close()
            self.sandbox = SessionSandbox(sandbox, workspace)
            weakref.finalize(self, self.sandbox.close)  # a session dropped without kill_all still ends its sandbox
        return await self.sandbox.start(command, network=network, stdin=stdin, buffer=buffer)

    def adopt(self, texts: list[str]) -> list[str]:
        """Reconcile with the transcript: handles it names that no task here runs are lost.

        Returns the newly lost handles (to tell the model once); new handles are numbered
        after every handle the transcript names, so an old handle never means a new command.
        """
        detached, seen = transcript_handles(texts)
        newly_lost = [h for h in dict.fromkeys(detached) if h not in self.tasks and h not in seen
                      and h not in self.lost]
        self.lost.update(newly_lost)
        highest = max((int(h.split("-")[1]) for h in detached), default=0)
        highest = max([highest, *(int(h.split("-")[1]) for h in self.tasks)])
        self._numbers = itertools.count(highest + 1)
        return newly_lost + self.exec.adopt(texts)

    def detach(self, process: SandboxedProcess, command: str, timeout: float) -> str:
        handle = f"bg-{next(self._numbers)}"
        waiter = asyncio.ensure_future(process.result(timeout))
        task = BackgroundTask(handle, command, process, waiter)
        waiter.add_done_callback(lambda w: self._finished(task, w))
        self.tasks[handle] = task
        return handle

    def _finished(self, task: BackgroundTask, waiter: asyncio.Task[ShellResult]) -> None:
        if not waiter.cancelled() and waiter.exception() is None:
            task.result = waiter.result()
        task.done.set()
        self._changed.set()

    async def wait(self, handle: str, timeout: float) -> BackgroundTask | None:
        """Block until the handle's command finishes (then it counts as delivered) or timeout."""
        task = self.tasks.get(handle)
        if task is None:
            return None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task.done.wait(), timeout)
        if task.done.is_set():
            task.delivered = True
        return task

    def undelivered(self) -> list[BackgroundTask]:
        """Finished tasks whose result the model has not seen yet; marks them delivered."""
        ready = [t for t in self.tasks.values() if t.done.is_set() and not t.delivered]
        for t in ready:
            t.delivered = True
        return ready

    @property
    def running(self) -> bool:
        return any(not t.done.is_set() for t in self.tasks.values())

    @property
    def pending(self) -> bool:
        """Some task is still running or its result has not reached the model, or an exec
        session runs (it waits for the model's next input)."""
        return any(not t.delivered for t in self.tasks.values()) or self.exec.live

    async def next_completion(self) -> None:
        """Return once some task has finished that the model has not seen."""
        while not any(t.done.is_set() and not t.delivered for t in self.tasks.values()):
            self._changed.clear()
            await self._changed.wait()

    def kill_all(self) -> None:
        for t in self.tasks.values():
            t.process.kill()
            t.waiter.cancel()
        self.exec.kill_all()
        if self.sandbox is not None:
            self.sandbox.close()
