"""Run shell commands under bubblewrap: read-only system, writable workspace only, no
network unless granted, a timeout, and a process-group kill that leaves nothing behind.

There is deliberately no unsandboxed fallback: when bwrap cannot create namespaces the
shell tool reports why, loudly, instead of quietly running commands on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from loopwire.harness.output import CappedOutput, HeadTailBuffer

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


@dataclass
class ShellResult:
    output: CappedOutput
    exit_code: int
    timed_out: bool
    started_at_us: int
    finished_at_us: int


def now_us() -> int:
    return time.time_ns() // 1000


class Sandbox:
    def __init__(self, bwrap: str = "bwrap", output_limit: int = 16384) -> None:
        self.bwrap = shutil.which(bwrap) or bwrap
        self.output_limit = output_limit
        self.unavailable_reason = ""

    def probe(self, scratch: Path) -> str:
        """Try a trivial sandboxed command; return why it failed ('' when it works)."""
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run(self.argv(scratch, "true", network=False), capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.unavailable_reason = f"bubblewrap ({self.bwrap}) cannot run: {e}"
        else:
            if proc.returncode != 0:
                err = proc.stderr.decode(errors="replace").strip()
                self.unavailable_reason = (
                    f"bubblewrap cannot create a sandbox here (exit {proc.returncode}: {err}); "
                    "shell commands are refused rather than run unsandboxed"
                )
        return self.unavailable_reason

    def argv(self, workspace: Path, command: str, *, network: bool) -> list[str]:
        ws = str(workspace.resolve())
        args = [self.bwrap]
        for d in _SYSTEM_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind", ws, ws, "--chdir", ws]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session"]
        if not network:
            args.append("--unshare-net")
        args += ["--clearenv", "--setenv", "PATH", _PATH, "--setenv", "HOME", ws, "--setenv", "LANG", "C.UTF-8",
                 "--setenv", "TERM", "dumb", "--setenv", "PAGER", "cat", "--setenv", "GIT_PAGER", "cat"]
        return [*args, "bash", "-c", command]

    async def start(self, workspace: Path, command: str, *, network: bool = False) -> SandboxedProcess:
        if self.unavailable_reason:
            raise SandboxUnavailable(self.unavailable_reason)
        spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
            *self.argv(workspace, command, network=network),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a kill takes every child with it
        ))
        try:
            proc = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # Cancelled while spawning: the process may exist a moment later; kill it then.
            spawn.add_done_callback(_kill_spawned)
            raise
        return SandboxedProcess(proc, HeadTailBuffer(self.output_limit))

    async def run(self, workspace: Path, command: str, *, timeout: float, network: bool = False) -> ShellResult:
        process = await self.start(workspace, command, network=network)
        try:
            return await process.result(timeout)
        finally:
            process.kill()


def _kill_spawned(spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if not spawn.cancelled() and spawn.exception() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(spawn.result().pid, signal.SIGKILL)


class SandboxedProcess:
    """A running sandboxed command whose output is collected in bounded memory."""

    def __init__(self, proc: asyncio.subprocess.Process, buffer: HeadTailBuffer) -> None:
        self.proc = proc
        self.buffer = buffer
        self.started_at_us = now_us()
        self._reader = asyncio.ensure_future(self._read())
        self.timed_out = False

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.buffer.feed(chunk)

    async def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the command to exit; True when it did."""
        try:
            await asyncio.wait_for(asyncio.shield(self._finish()), timeout)
            return True
        except TimeoutError:
            return False

    async def _finish(self) -> None:
        await self._reader
        await self.proc.wait()

    async def result(self, timeout: float | None = None) -> ShellResult:
        """Wait for exit, killing the whole process group at ``timeout``."""
        if not await self.wait(timeout):
            self.timed_out = True
            self.kill()
            await self._finish()
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
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
