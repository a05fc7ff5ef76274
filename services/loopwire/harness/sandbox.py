"""Run shell commands under bubblewrap: read-only system, writable workspace only, no
network unless granted, a timeout, and a process-group kill that leaves nothing behind.

The command runs as an unprivileged user (uid/gid 1000) in its own user, mount, pid, ipc,
uts, cgroup and (unless granted) network namespaces, with every capability dropped (even
when the harness is root), a seccomp filter (``seccomp.py``), resource limits set by
``prlimit`` before bwrap starts, a read-only /proc (no sysctl or sysrq writes), a minimal
/etc of its own (no shadow, no host secrets) and an environment that never contains the
harness's: bwrap itself starts with an empty one, so not even /proc/1/environ shows it.
The workspace is opened without following links and bound by descriptor, so a path swapped
while the command starts cannot redirect the bind.

When the harness runs as root, the whole chain (prlimit, bwrap, the command) first drops to an
unprivileged host uid (``setpriv``; SANDBOX_HOST_UID by default): inside, the command is still
uid 1000, but on the host it is nobody in particular, so RLIMIT_NPROC really counts its
processes and no root-owned file is writable through a mount. The harness's file tools give
what they create in a workspace to that uid.

There is deliberately no unsandboxed fallback: when bwrap cannot create namespaces the
shell tool reports why, loudly, instead of quietly running commands on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from loopwire.harness import seccomp
from loopwire.harness.output import CappedOutput, HeadTailBuffer
from loopwire.harness.workspace_files import give_to_sandbox, open_workspace, set_file_owner

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
_PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"
SANDBOX_UID = SANDBOX_GID = 1000
SANDBOX_USER = "sandbox"
# The host uid/gid sandboxed commands run as when the harness is root (no account needed).
SANDBOX_HOST_UID = 60999
# What of the host's /etc a build needs and that holds no secret: dynamic linker, Debian's
# alternatives symlinks, CA certificates, time zone, services/protocols, interpreter configs.
_ETC_FROM_HOST = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
                  "protocols", "services", "mime.types", "magic", "magic.mime", "ssl/certs", "ssl/openssl.cnf",
                  "ca-certificates", "ca-certificates.conf", "gai.conf", "host.conf", "inputrc", "os-release",
                  "debian_version", "xattr.conf", "terminfo", "perl", "python3*", "java-*", "gitconfig")
_NSSWITCH = b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n" \
            b"protocols: files\nservices: files\n"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of every sandboxed process (setrlimit, inherited by all children).

    RLIMIT_NPROC counts per host user: with the drop to an unprivileged host uid (harness as
    root) it bounds every sandboxed process of this harness together."""

    processes: int = 1024  # RLIMIT_NPROC
    address_space: int = 8 << 30  # RLIMIT_AS, bytes of virtual memory per process
    file_size: int = 8 << 30  # RLIMIT_FSIZE, largest file a process may write
    cpu_seconds: int = 3600  # RLIMIT_CPU per process
    open_files: int = 4096  # RLIMIT_NOFILE
    tmp_size: int = 1 << 30  # size of the /tmp and /dev/shm tmpfs

    def prlimit_args(self) -> list[str]:
        return [f"--nproc={self.processes}", f"--as={self.address_space}", f"--fsize={self.file_size}",
                f"--cpu={self.cpu_seconds}", f"--nofile={self.open_files}", "--core=0"]


@dataclass
class ShellResult:
    output: CappedOutput
    exit_code: int
    timed_out: bool
    started_at_us: int
    finished_at_us: int


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class _Spawn:
    argv: list[str]
    fds: list[int] = field(default_factory=list)

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def data_fd(self, data: bytes) -> int:
        fd = os.memfd_create("loopwire-sandbox-file")
        self.fds.append(fd)
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd


class Sandbox:
    def __init__(self, bwrap: str = "bwrap", output_limit: int = 16384,
                 limits: SandboxLimits | None = None, host_uid: int | None = None) -> None:
        self.bwrap = shutil.which(bwrap) or bwrap
        self.prlimit = shutil.which("prlimit") or "prlimit"
        self.setpriv = shutil.which("setpriv") or "setpriv"
        self.output_limit = output_limit
        self.limits = limits or SandboxLimits()
        self.unavailable_reason = ""
        self.warning = ""  # the sandbox works, but with less isolation than it could have
        # Root drops to an unprivileged host uid; anyone else already is one.
        self.host_uid = host_uid if host_uid is not None else (SANDBOX_HOST_UID if os.geteuid() == 0 else None)
        if self.host_uid is not None and self.host_uid == os.geteuid():
            self.host_uid = None
        set_file_owner((self.host_uid, self.host_uid) if self.host_uid is not None else None)

    def probe(self, scratch: Path) -> str:
        """Try a trivial sandboxed command; return why it failed ('' when it works).

        A harness running as root first tries the drop to the unprivileged host uid; when that
        uid cannot reach the workspace root (a 0700 parent) or the kernel refuses it user
        namespaces, it keeps the host uid 0 mapping and says so in ``warning``."""
        scratch.mkdir(parents=True, exist_ok=True)
        self.unavailable_reason = self.warning = ""
        tools = [(self.bwrap, "bubblewrap"), (self.prlimit, "util-linux")]
        if self.host_uid is not None:
            tools.append((self.setpriv, "util-linux"))
        for tool, package in tools:
            if not (os.path.isfile(tool) and os.access(tool, os.X_OK)):
                self.unavailable_reason = f"{package} ({tool}) cannot run: not found or not executable"
                return self.unavailable_reason
        failure = self._try(scratch)
        if failure and self.host_uid is not None:
            dropped_uid, self.host_uid = self.host_uid, None
            set_file_owner(None)
            if not self._try(scratch):
                self.warning = (f"sandboxed commands run as host uid 0 (in a user namespace, without capabilities): "
                                f"host uid {dropped_uid} cannot run them here ({failure}); RLIMIT_NPROC then counts "
                                "every root process. Give the workspace root's parents o+x to drop the uid.")
                return ""
            self.host_uid = dropped_uid
            set_file_owner((dropped_uid, dropped_uid))
        if failure:
            self.unavailable_reason = f"{failure}; shell commands are refused rather than run unsandboxed"
        return self.unavailable_reason

    def _try(self, scratch: Path) -> str:
        """Run `true` in the sandbox; '' or why it failed."""
        try:
            spawn = self._prepare(scratch.resolve(), "true", network=False)
        except (seccomp.SeccompUnavailable, OSError, ValueError) as e:
            return f"bubblewrap ({self.bwrap}) cannot run: {e}"
        try:
            proc = subprocess.run(spawn.argv, capture_output=True, timeout=30, pass_fds=spawn.fds, env={})
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bubblewrap ({self.bwrap}) cannot run: {e}"
        finally:
            spawn.close()
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            as_uid = f" as host uid {self.host_uid}" if self.host_uid is not None else ""
            return f"bubblewrap cannot create a sandbox here{as_uid} (exit {proc.returncode}: {err})"
        return ""

    def _prepare(self, workspace: Path, command: str, *, network: bool) -> _Spawn:
        """The argv (prlimit, then bwrap) and the descriptors it reads: workspace, seccomp
        program and the files of /etc. The caller closes them once the process started."""
        spawn = _Spawn([])
        try:
            ws_fd, ws = open_workspace(workspace)  # ToolInputError for "/", system dirs, links
            spawn.fds.append(ws_fd)
            if self.host_uid is not None and os.stat(ws, follow_symlinks=False).st_uid == 0:
                give_to_sandbox(ws)  # a workspace the harness made before it dropped its commands' uid
            filter_fd = seccomp.program_fd()
            spawn.fds.append(filter_fd)
            args = [self.prlimit, *self.limits.prlimit_args(), self.bwrap]
            if self.host_uid is not None:
                args[:0] = [self.setpriv, f"--reuid={self.host_uid}", f"--regid={self.host_uid}", "--clear-groups",
                            "--inh-caps=-all", "--"]
            for d in _SYSTEM_DIRS:
                if os.path.islink(d):
                    args += ["--symlink", os.readlink(d), d]
                elif os.path.isdir(d):
                    args += ["--ro-bind", d, d]
            args += ["--dev", "/dev", "--size", str(self.limits.tmp_size), "--tmpfs", "/dev/shm",
                     "--proc", "/proc", "--remount-ro", "/proc",
                     "--size", str(self.limits.tmp_size), "--tmpfs", "/tmp"]
            args += self._etc(spawn, ws, network)
            args += ["--bind-fd", str(ws_fd), ws, "--chdir", ws, "--remount-ro", "/"]
            args += ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID),
                     "--hostname", "sandbox", "--cap-drop", "ALL", "--seccomp", str(filter_fd),
                     "--die-with-parent", "--new-session"]
            if network:
                args.append("--share-net")
            args += ["--clearenv", "--setenv", "PATH", _PATH, "--setenv", "HOME", ws, "--setenv", "LANG", "C.UTF-8",
                     "--setenv", "USER", SANDBOX_USER, "--setenv", "LOGNAME", SANDBOX_USER,
                     "--setenv", "TERM", "dumb", "--setenv", "PAGER", "cat", "--setenv", "GIT_PAGER", "cat"]
            spawn.argv = [*args, "bash", "-c", command]
        except BaseException:
            spawn.close()
            raise
        return spawn

    def _etc(self, spawn: _Spawn, home: str, network: bool) -> list[str]:
        """A tmpfs /etc holding only generated account and name-service files plus harmless
        host configuration, then made read-only."""
        files = {
            "passwd": f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:{SANDBOX_USER}:{home}:/bin/bash\n"
                      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
            "group": f"{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n".encode(),
            "hosts": b"127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
            "hostname": b"sandbox\n",
            "nsswitch.conf": _NSSWITCH,
        }
        if network:
            with contextlib.suppress(OSError), open("/etc/resolv.conf", "rb") as f:
                files["resolv.conf"] = f.read(65536)
        args = ["--size", str(16 << 20), "--tmpfs", "/etc"]
        for name, data in files.items():
            args += ["--perms", "0644", "--file", str(spawn.data_fd(data)), f"/etc/{name}"]
        for pattern in _ETC_FROM_HOST:
            for src in sorted(glob.glob(f"/etc/{pattern}")):
                if os.path.islink(src):
                    args += ["--symlink", os.readlink(src), src]
                elif os.path.exists(src):
                    args += ["--ro-bind", src, src]
        return [*args, "--remount-ro", "/etc"]

    async def start(self, workspace: Path, command: str, *, network: bool = False) -> SandboxedProcess:
        if self.unavailable_reason:
            raise SandboxUnavailable(self.unavailable_reason)
        spawn = self._prepare(workspace, command, network=network)
        try:
            # The descriptors are closed once the spawn is over, never before: a number closed
            # early could be reused by another thread and passed into the sandbox instead.
            starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
                *spawn.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=spawn.fds,
                env={},  # bwrap's own environment is /proc/1/environ inside: nothing of the harness
                start_new_session=True,  # its own process group, so a kill takes every child with it
            ))
        except BaseException:
            spawn.close()
            raise
        starting.add_done_callback(lambda _: spawn.close())
        try:
            proc = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # Cancelled while spawning: the process may exist a moment later; kill it then.
            starting.add_done_callback(_kill_spawned)
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
