"""Long-running commands detach into handles; their completion is pushed, not polled.

The loop appends a finished task's result to the conversation at the next safe point, and
the `wait` tool blocks on a handle, so the model never writes a `sleep` loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from dataclasses import dataclass, field

from loopwire.harness.sandbox import SandboxedProcess, ShellResult


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


class BackgroundTasks:
    """The detached commands of one session run."""

    def __init__(self) -> None:
        self.tasks: dict[str, BackgroundTask] = {}
        self._numbers = itertools.count(1)
        self._changed = asyncio.Event()

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

    async def next_completion(self) -> None:
        """Return once some task has finished that the model has not seen."""
        while not any(t.done.is_set() and not t.delivered for t in self.tasks.values()):
            self._changed.clear()
            await self._changed.wait()

    def kill_all(self) -> None:
        for t in self.tasks.values():
            t.process.kill()
            t.waiter.cancel()
