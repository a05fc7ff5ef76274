"""A session's sandbox driven the way the per-command tests drive ``Sandbox.run``: the helpers the
session-sandbox and shell tests share."""

from __future__ import annotations

from pathlib import Path

from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_process import ShellResult
from loopwire.harness.session_sandbox import SessionSandbox


class SessionRuns:
    """``Sandbox.run`` through one session sandbox per workspace (what the imported tests call)."""

    def __init__(self, box: Sandbox) -> None:
        self.box = box
        self.sessions: dict[Path, SessionSandbox] = {}

    def session(self, workspace: Path) -> SessionSandbox:
        return self.sessions.setdefault(workspace, SessionSandbox(self.box, workspace))

    async def run(self, workspace: Path, command: str, *, timeout: float, network: bool = False) -> ShellResult:
        process = await self.session(workspace).start(command, network=network)
        try:
            return await process.result(timeout)
        finally:
            process.kill()

    async def start(self, workspace: Path, command: str, **kwargs: object) -> object:
        return await self.session(workspace).start(command, **kwargs)  # type: ignore[arg-type]

    async def close(self) -> None:
        """Kill every session's sandbox and wait for its bwrap, while the test's loop still runs."""
        for s in self.sessions.values():
            await end(s)


async def end(session: SessionSandbox) -> None:
    running = session._supervisor.process if session._supervisor is not None else None
    session.close()
    if running is not None:
        await running.wait(30)


def probed(tmp_path: Path, **kwargs: object) -> Sandbox:
    box = Sandbox(output_limit=1 << 20, **kwargs)  # type: ignore[arg-type]
    assert box.probe(tmp_path / "probe") == "", box.unavailable_reason
    assert box.per_session, "no system python3 for a session's supervisor"
    return box


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def host_pid(pidfd: int) -> int:
    with open(f"/proc/self/fdinfo/{pidfd}") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Pid:"))
