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
unprivileged host uid of the session's tenant (``setpriv``; ``tenant_uids``: one uid per tenant
from a configured range): inside, the command is still uid 1000, but on the host it is its
tenant's uid, so RLIMIT_NPROC counts that tenant's processes only, no root-owned file is
writable through a mount, and the tenant's directory (0700, owned by that uid) is closed to
every other tenant. The harness's file tools give what they create in a workspace to that uid.

Limits per tenant (``tenant_limits``): a cgroup v2 group (pids, memory, cpu) where the harness
can make one, rlimits otherwise; the workspace quota is RLIMIT_FSIZE per file (kernel) plus a
filesystem of the quota's size per tenant (``tenant_volumes``, kernel) where the harness can mount
one, else a check of the workspace's size while and after a command runs. Each command's /tmp and
/dev/shm are tmpfs of ``tmp_size``, counted against its tenant's ``tmpfs_budget`` while it runs: a
command or exec session past the budget does not start (``ResourceExhausted``). ``network=true`` never shares
the host's network namespace (``egress``): the command gets one of its own and reaches out
only through the harness's allow-listed proxy.

With ``per_session`` (the default) a session's commands share one such sandbox, each in pid,
mount and IPC namespaces of its own inside it (``session_sandbox``, ``sandbox_supervisor``): the
kill of a command is still a SIGKILL to the init of its own pid namespace.

There is deliberately no unsandboxed fallback: when bwrap cannot create namespaces the
shell tool reports why, loudly, instead of quietly running commands on the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import glob
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from loopwire.harness import egress, seccomp, tenant_uids
from loopwire.harness.output import CappedOutput, HeadTailBuffer
from loopwire.harness.tenant_limits import (
    Cgroups,
    QuotaWatch,
    TmpfsBudget,
    TmpfsExhausted,
    megabytes,
    resolve,
)
from loopwire.harness.tenant_volumes import TenantVolumes, VolumeQuota, unmount_below
from loopwire.harness.workspace_files import (
    check_workspace_path,
    open_workspace,
    set_file_owner,
    tenant_dir_name,
)
from loopwire.harness.workspace_quota import CommandQuota

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
_PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"
SANDBOX_UID = SANDBOX_GID = 1000
SANDBOX_USER = "sandbox"
# The host uids/gids sandboxed commands run as when the harness is root (no account needed): one
# per tenant from this range (--sandbox-uid-base/--sandbox-uid-count).
SANDBOX_UID_BASE = 61000
SANDBOX_UID_COUNT = 1000
# Moves the shell into a cgroup (as root, before setpriv drops the uid), then runs the rest.
_JOIN_CGROUP = 'echo 0 > "$1" || exit 126; shift; exec "$@"'
# What of the host's /etc a build needs and that holds no secret: dynamic linker, Debian's
# alternatives symlinks, CA certificates, time zone, services/protocols, interpreter configs.
_ETC_FROM_HOST = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
                  "protocols", "services", "mime.types", "magic", "magic.mime", "ssl/certs", "ssl/openssl.cnf",
                  "ca-certificates", "ca-certificates.conf", "gai.conf", "host.conf", "inputrc", "os-release",
                  "debian_version", "xattr.conf", "terminfo", "perl", "python3*", "java-*", "gitconfig")
_NSSWITCH = b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n" \
            b"protocols: files\nservices: files\n"


def _system_python() -> str:
    """The system's python3 (for a session's supervisor) when the sandbox sees it where the
    host does, under a system directory it binds; '' when there is none."""
    found = shutil.which("python3", path=_PATH) or ""
    real = os.path.realpath(found) if found else ""
    return found if any(real.startswith(d + "/") for d in _SYSTEM_DIRS) else ""


@functools.cache
def _supervisor_source() -> str:
    return (Path(__file__).parent / "sandbox_supervisor.py").read_text()


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


class ResourceExhausted(SandboxUnavailable):
    """A tenant limit refuses to start the command (its tmpfs budget, its workspace quota)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of sandboxed processes.

    RLIMIT_NPROC counts per host user: with a host uid per tenant (harness as root) it bounds
    all of one tenant's sandboxed processes together; the other rlimits hold per process. In
    cgroup mode ``processes``, ``memory`` and ``cpus`` also bound the tenant's group."""

    processes: int = 1024  # RLIMIT_NPROC (per tenant uid) and the tenant cgroup's pids.max
    address_space: int = 8 << 30  # RLIMIT_AS, bytes of virtual memory per process
    file_size: int = 8 << 30  # RLIMIT_FSIZE, largest file a process may write (and never past the quota)
    cpu_seconds: int = 3600  # RLIMIT_CPU per process
    open_files: int = 4096  # RLIMIT_NOFILE
    tmp_size: int = 64 << 20  # size of each of a command's /tmp and /dev/shm tmpfs (host memory once filled)
    tmpfs_budget: int = 1536 << 20  # bytes of those a tenant's running commands may hold together (2 x tmp_size each)
    memory: int = 16 << 30  # memory.max of a tenant's cgroup: all its commands together (cgroup mode)
    cpus: float = 0.0  # cpu.max of a tenant's cgroup, in CPUs (0: uncapped; cgroup mode)
    workspace_quota: int = 10 << 30  # bytes a tenant's volume holds; without volumes, one workspace (0: no quota)
    quota_interval: float = 2.0  # seconds between checks of a workspace's size while a command runs

    @property
    def largest_file(self) -> int:
        return min(self.file_size, self.workspace_quota) if self.workspace_quota > 0 else self.file_size

    def prlimit_args(self) -> list[str]:
        return [f"--nproc={self.processes}", f"--as={self.address_space}", f"--fsize={self.largest_file}",
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


# Where a command's time goes (``bench_sandbox --profile``): None, or a list each stage of the
# command path appends (stage, time.time_ns()) to. A context variable, so a trace follows the
# task (and the tasks and callbacks it starts) that set it, never another session's commands.
# Off, a mark costs one ContextVar.get.
TRACE: contextvars.ContextVar[list[tuple[str, int]] | None] = contextvars.ContextVar("loopwire_sandbox_trace",
                                                                                     default=None)


def mark(stage: str, at: int = 0) -> None:
    trace = TRACE.get()
    if trace is not None:
        trace.append((stage, at or time.time_ns()))


def command_env(home: str) -> dict[str, str]:
    """The whole environment of a sandboxed command: nothing of the harness's."""
    return {"PATH": _PATH, "HOME": home, "LANG": "C.UTF-8", "USER": SANDBOX_USER, "LOGNAME": SANDBOX_USER,
            "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}


@dataclass
class _Spawn:
    argv: list[str]
    fds: list[int] = field(default_factory=list)  # passed to the child, closed once it started
    # Our ends of bwrap's --info-fd (it tells the sandbox's pid) and --block-fd (the command
    # waits for "go" on it): nothing runs before the harness knows the pid it must kill.
    info_r: int = -1
    block_w: int = -1
    workspace: str = ""

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def close_ours(self) -> None:
        for fd in (self.info_r, self.block_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.info_r = self.block_w = -1

    def data_fd(self, data: bytes) -> int:
        fd = os.memfd_create("loopwire-sandbox-file")
        self.fds.append(fd)
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd


class Sandbox:
    def __init__(self, bwrap: str = "bwrap", output_limit: int = 16384,
                 limits: SandboxLimits | None = None, host_uid: int | None = None, *,
                 uid_base: int = SANDBOX_UID_BASE, uid_count: int = SANDBOX_UID_COUNT,
                 uid_state: Path | None = None, workspace_root: Path | None = None,
                 cgroup: str = "", egress_allow: Sequence[str] = egress.DEFAULT_ALLOW, per_session: bool = True,
                 volumes: bool = True) -> None:
        """``host_uid`` given: every tenant's commands run as that one uid (no uid per tenant).
        ``cgroup``: a delegated cgroup v2 directory for the tenants' groups ('' finds one,
        'none' uses rlimits only). ``workspace_root``: where the tenants' trees are; a uid per
        tenant needs it (without it every workspace runs as the uid of the key ''). ``volumes``:
        bound each tenant's tree by a filesystem of the quota's size where one can be mounted."""
        self.bwrap = shutil.which(bwrap) or bwrap
        self.prlimit = shutil.which("prlimit") or "prlimit"
        self.setpriv = shutil.which("setpriv") or "setpriv"
        self.sh = shutil.which("sh") or "/bin/sh"
        self.python = _system_python()
        # One sandbox per session, each command in namespaces of its own inside it (``session_sandbox``);
        # off: every command starts a sandbox of its own.
        self.per_session = per_session and bool(self.python)
        # How many commands' inits a session's supervisor keeps made and confined ahead while the session is
        # idle, so a command waits for no clone, mounts or seccomp, and a second command right after the first
        # (a turn's next call, before the first's replacement is made) neither; 0: each is made when its
        # command comes.
        self.spares_ahead = 2
        # Each spare also starts its command's bash, which waits for its script, so a command costs no exec or
        # shell start either; off: the spare starts bash once its command comes.
        self.bash_ahead = True
        # Each spare's bash is a shell that stays: it runs the session's commands one after another, each in a
        # subshell of its own (``sandbox_supervisor.SHELL``), so back to back they cost no spare or shell start;
        # off: each command gets a spare (and a bash) of its own.
        self.shell_stays = True
        self.output_limit = output_limit
        self.limits = limits or SandboxLimits()
        self.unavailable_reason = ""
        self.warning = ""  # the sandbox works, but with less isolation than it could have
        self.workspace_root = workspace_root
        self.egress = egress.Egress(egress_allow)
        self.cgroup_setting = cgroup
        self.cgroups: Cgroups | None = None
        self.cgroup_reason = "not probed"
        self._usage: dict[str, int] = {}  # workspace -> bytes at the end of its last command
        self.volumes = (TenantVolumes(workspace_root, self.limits.workspace_quota)
                        if volumes and workspace_root is not None and self.limits.workspace_quota > 0 else None)
        self.tmpfs = TmpfsBudget(self.limits.tmpfs_budget)
        # Root drops to an unprivileged host uid per tenant; anyone else already is one.
        self.uids = (tenant_uids.TenantUids(uid_base, uid_count, uid_state)
                     if os.geteuid() == 0 and host_uid is None else None)
        # The uid of workspaces outside every tenant's tree (the probe's), or of all when host_uid is given.
        self.host_uid = host_uid if host_uid is not None else (self.uids.uid_for("") if self.uids else None)
        if self.host_uid is not None and self.host_uid == os.geteuid():
            self.host_uid = self.uids = None
        self._set_file_owner()

    def _set_file_owner(self) -> None:
        """What the file tools create belongs to the uid of the tenant they work for (set by
        ``file_pool`` in its threads), or to the default tenant's in any other thread."""
        uid = self.host_uid
        set_file_owner(tenant_uids.ThreadOwner((uid, uid)) if uid is not None else None)  # type: ignore[arg-type]

    def tenant_access(self, workspace: str | os.PathLike[str]) -> tuple[int | None, str | None]:
        """(the host uid commands in this workspace run as, None: the harness's own, not root;
        the tenant's tree holding it, when uids are per tenant and it lies in one)."""
        if self.host_uid is None or self.uids is None:
            return self.host_uid, None
        tree = tenant_uids.tenant_tree(check_workspace_path(workspace), self.workspace_root)
        return self.uids.uid_for(os.path.basename(tree) if tree else ""), tree

    def describe(self) -> list[str]:
        """What isolates tenants here, for the start log: what the kernel enforces, what is checked."""
        lim = self.limits
        if self.uids is not None:
            who = f"tenants' commands run as {self.uids.describe()}; tenant directories 0700, owned by that uid"
        elif self.host_uid is not None:
            who = f"every tenant's commands run as host uid {self.host_uid} (one uid: tenants share its limits)"
        else:
            who = f"commands run as the harness's uid {os.geteuid()} (no uid per tenant: the harness is not root)"
        if self.cgroups is not None:
            limits = (f"limits per tenant: cgroup v2 {self.cgroups.base}/tenant-<uid> (pids.max={lim.processes}, "
                      f"memory.max={megabytes(lim.memory)}, cpu.max={lim.cpus or 'max'} CPUs), kernel-enforced")
        else:
            limits = (f"limits: rlimits (no cgroup v2: {self.cgroup_reason}): RLIMIT_NPROC={lim.processes} per "
                      f"{'tenant uid' if self.uids is not None else 'uid'}; RLIMIT_AS={megabytes(lim.address_space)} "
                      f"and RLIMIT_CPU={lim.cpu_seconds}s per process")
        if lim.workspace_quota <= 0:
            disk = f"disk: RLIMIT_FSIZE={megabytes(lim.file_size)} per file, no quota"
        elif self.volumes is not None and self.volumes.enabled:
            disk = (f"disk: RLIMIT_FSIZE={megabytes(lim.largest_file)} per file (kernel); each tenant's tree is a "
                    f"filesystem of {megabytes(lim.workspace_quota)} (a loop-mounted ext4 image in "
                    f"{self.volumes.images}), kernel-enforced")
        else:
            why = f" (no volume per tenant: {self.volumes.reason})" if self.volumes is not None else ""
            disk = (f"disk: RLIMIT_FSIZE={megabytes(lim.largest_file)} per file (kernel); workspace total "
                    f"{megabytes(lim.workspace_quota)} checked every {lim.quota_interval:g}s while a command runs and "
                    f"after it, which kills a command that grows it past the quota (a check, not a kernel quota){why}")
        disk += (f"; /tmp and /dev/shm {megabytes(lim.tmp_size)} each per command, "
                 f"{megabytes(lim.tmpfs_budget)} per tenant's running commands")
        net = (self.egress.describe() if os.geteuid() == 0 else
               "network=true is refused: its egress proxy needs a harness running as root (never the host's network)")
        if self.per_session:
            spawn = ("sandboxes: one per session, each command in pid, mount and IPC namespaces of its own inside it "
                     f"(the session's supervisor runs on {self.python})")
        else:
            spawn = "sandboxes: one per command" + ("" if self.python else " (no system python3 for a session's supervisor)")
        return [who, limits, disk, net, spawn]

    def probe(self, scratch: Path) -> str:
        """Whether sandboxed commands can run here ('' when they can; ``_probe_sandbox``), and whether each
        tenant's tree can be a volume of the quota's size (else ``warning`` says the quota is a check)."""
        if not (failure := self._probe_sandbox(scratch)) and self.volumes is not None and (why := self.volumes.probe()):
            self.warning = (f"{self.warning}; " if self.warning else "") + (
                f"the workspace quota is a check, not a bound: no filesystem per tenant ({why})")
        return failure

    def _probe_sandbox(self, scratch: Path) -> str:
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
        self.cgroups, self.cgroup_reason = Cgroups.find(self.cgroup_setting)
        failure = self._try(scratch)
        if failure and self.cgroups is not None:
            groups, self.cgroups = self.cgroups, None
            if self._try(scratch):
                self.cgroups = groups  # it fails without the groups too: not theirs to answer for
            else:
                self.cgroup_reason, failure = f"a command cannot join its tenant's group ({failure})", ""
        if failure and self.host_uid is not None:
            dropped_uid, uids, self.host_uid, self.uids = self.host_uid, self.uids, None, None
            set_file_owner(None)
            if not self._try(scratch):
                self.warning = (f"sandboxed commands run as host uid 0 (in a user namespace, without capabilities): "
                                f"host uid {dropped_uid} cannot run them here ({failure}); every tenant shares uid 0, "
                                "and RLIMIT_NPROC counts every root process. Give the workspace root's parents o+x "
                                "to drop the uid.")
                return ""
            self.host_uid, self.uids = dropped_uid, uids
            self._set_file_owner()
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
            os.write(spawn.block_w, b"go")  # nothing to kill here: `true` may start at once
            proc = subprocess.run(spawn.argv, capture_output=True, timeout=30, pass_fds=spawn.fds, env={})
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bubblewrap ({self.bwrap}) cannot run: {e}"
        finally:
            spawn.close()
            spawn.close_ours()
        if proc.returncode != 0:
            err = proc.stderr.decode(errors="replace").strip()
            as_uid = f" as host uid {self.host_uid}" if self.host_uid is not None else ""
            return f"bubblewrap cannot create a sandbox here{as_uid} (exit {proc.returncode}: {err})"
        return ""

    def _prepare(self, workspace: Path, command: str, *, network: bool, control: int = -1) -> _Spawn:
        """The argv ([cgroup join,] setpriv, prlimit, then bwrap) and the descriptors it reads:
        workspace, seccomp program, the files of /etc, bwrap's info and block pipes. The caller
        closes them once the process started. ``control`` (a socket): the sandbox runs a session's
        supervisor (``sandbox_supervisor``) on it instead of ``command``; the supervisor keeps the
        two capabilities it needs to make each command's namespaces and hands each command the
        seccomp program to load, with every capability dropped, before it runs."""
        spawn = _Spawn([])
        try:
            ws_fd, ws = open_workspace(workspace)  # ToolInputError for "/", system dirs, links
            spawn.fds.append(ws_fd)
            spawn.workspace = ws
            uid, tree = self.tenant_access(ws)
            if uid is not None and tree is not None:
                tenant_uids.claim(tree, ws, uid)  # the tenant's tree: 0700, its uid's
            elif uid is not None and os.stat(ws, follow_symlinks=False).st_uid == 0:
                os.chown(ws, uid, uid, follow_symlinks=False)  # a workspace the harness made before the uid drop
            filter_fd = seccomp.program_fd()
            spawn.fds.append(filter_fd)
            args = [self.prlimit, *self.limits.prlimit_args(), self.bwrap]
            if uid is not None:
                args[:0] = [self.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                            "--inh-caps=-all", "--"]
            if self.cgroups is not None:
                procs = self.cgroups.procs_file(str(uid) if uid is not None else "shared", self.limits.processes,
                                                self.limits.memory, self.limits.cpus)
                args[:0] = [self.sh, "-c", _JOIN_CGROUP, "sh", procs]
            for d in _SYSTEM_DIRS:
                if os.path.islink(d):
                    args += ["--symlink", os.readlink(d), d]
                elif os.path.isdir(d):
                    args += ["--ro-bind", d, d]
            args += ["--dev", "/dev", "--size", str(self.limits.tmp_size), "--tmpfs", "/dev/shm",
                     "--proc", "/proc", "--remount-ro", "/proc",
                     "--size", str(self.limits.tmp_size), "--tmpfs", "/tmp"]
            args += self._etc(spawn, ws)
            args += ["--bind-fd", str(ws_fd), ws, "--chdir", ws, "--remount-ro", "/"]
            # Always a network namespace of its own: never the host's, whose loopback has the mesh's ports.
            args += ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID),
                     "--hostname", "sandbox", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
            if control < 0:
                args += ["--seccomp", str(filter_fd)]
            else:
                args += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"]
            args.append("--clearenv")
            for name, value in command_env(ws).items():
                args += ["--setenv", name, value]
            spawn.info_r, info_w = os.pipe()
            spawn.fds.append(info_w)
            block_r, spawn.block_w = os.pipe()
            spawn.fds.append(block_r)
            args += ["--info-fd", str(info_w), "--block-fd", str(block_r)]
            if network:
                args += egress.proxy_env()
            if control < 0:
                spawn.argv = [*args, "bash", "-c", command]
            else:
                spawn.fds.append(control)
                spawn.argv = [*args, self.python, "-I", "-S", "-B", "-c", _supervisor_source(), str(control),
                              str(filter_fd), str(self.limits.tmp_size)]
        except BaseException:
            spawn.close()
            spawn.close_ours()
            raise
        return spawn

    def _etc(self, spawn: _Spawn, home: str) -> list[str]:
        """A tmpfs /etc holding only generated account and name-service files plus harmless
        host configuration, then made read-only. No resolv.conf: a command resolves nothing
        itself; the egress proxy resolves the names it is asked for."""
        files = {
            "passwd": f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:{SANDBOX_USER}:{home}:/bin/bash\n"
                      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
            "group": f"{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n".encode(),
            "hosts": b"127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
            "hostname": b"sandbox\n",
            "nsswitch.conf": _NSSWITCH,
        }
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

    async def start(self, workspace: Path, command: str, *, network: bool = False, stdin: bool = False,
                    buffer: HeadTailBuffer | None = None) -> SandboxedProcess:
        """Start ``command``; ``stdin``: a pipe the caller writes (an interactive program), else
        /dev/null; ``buffer``: where its output goes (a head-and-tail buffer of output_limit)."""
        if self.unavailable_reason:
            raise SandboxUnavailable(self.unavailable_reason)
        if network and os.geteuid() != 0:
            raise SandboxUnavailable("network=true needs a harness running as root (its egress proxy listens inside "
                                     "the command's own network namespace); the host's network is never shared")
        release = await self.admit(workspace)
        try:
            process = await self._launch(self._prepare(workspace, command, network=network), network=network,
                                         stdin=stdin, buffer=buffer)
        except BaseException:
            release()
            raise
        process.releases.append(release)
        return process

    def tenant_tree(self, workspace: str | os.PathLike[str]) -> str:
        """The tenant's tree holding ``workspace`` ('' outside every tenant's tree)."""
        return tenant_uids.tenant_tree(check_workspace_path(workspace), self.workspace_root) or ""

    def prepare_tenant(self, tenant: str) -> None:
        """Mount ``tenant``'s volume before anything is made in its tree (a session's start), so that even
        the files the harness's tools write before its first command are bound by it."""
        if self.volumes is not None and self.volumes.enabled and self.workspace_root is not None:
            self.bounded(os.path.join(os.path.realpath(self.workspace_root), tenant_dir_name(tenant)))

    def release_volumes(self) -> None:
        """The harness stops: detach the tenants' volumes, so its workspace root can be removed (a
        temporary one, as a replay's); a restart mounts the images again."""
        if self.volumes is not None and self.volumes.enabled:
            unmount_below(self.volumes.root)

    def bounded(self, tree: str) -> bool:
        """Whether ``tree`` is a volume of the quota's size (mounted now if it can be; blocks a moment then)."""
        return bool(tree) and self.volumes is not None and self.volumes.bounded(tree)

    async def admit(self, workspace: str | os.PathLike[str]) -> Callable[[], None]:
        """Let a command of ``workspace``'s tenant start, or say why not (``ResourceExhausted``): its /tmp and
        /dev/shm fit the tenant's tmpfs budget. The function given back returns them to the budget (when the
        command ends). The tenant's volume is mounted first, if it can be and is not yet: what the command
        writes is bound by it from its first byte. (Full, it still starts: deleting files needs a command.)"""
        tree = self.tenant_tree(workspace)
        if self.volumes is not None and self.volumes.enabled and tree:
            await asyncio.to_thread(self.bounded, tree)
        try:
            return self.tmpfs.take(tree, 2 * self.limits.tmp_size)
        except TmpfsExhausted as e:
            raise ResourceExhausted(str(e)) from None

    async def _launch(self, spawn: _Spawn, *, network: bool, stdin: bool,
                      buffer: HeadTailBuffer | None, quota: bool = True) -> SandboxedProcess:
        """Run a prepared bwrap: its pid known, its pidfd held, then "go". ``quota``: watch the
        workspace's size for it (not for a session's supervisor: its commands are watched)."""
        try:
            # The descriptors are closed once the spawn is over, never before: a number closed
            # early could be reused by another thread and passed into the sandbox instead.
            starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
                *spawn.argv,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=spawn.fds,
                env={},  # bwrap's own environment is /proc/1/environ inside: nothing of the harness
                start_new_session=True,  # its own process group, so a kill takes every child with it
            ))
        except BaseException:
            spawn.close()
            spawn.close_ours()
            raise
        starting.add_done_callback(lambda _: spawn.close())
        try:
            proc = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # Cancelled while spawning: the process may exist a moment later; reap it then.
            starting.add_done_callback(functools.partial(_reap_spawned, spawn))
            raise
        process = SandboxedProcess(proc, buffer or HeadTailBuffer(self.output_limit), self.limits.largest_file,
                                   group=proc.pid)
        told = asyncio.ensure_future(_child_pid(spawn.info_r))
        try:
            pid = await asyncio.shield(told)
        except BaseException:
            _keep(_reap(spawn, proc, told))  # kills the sandbox once its pid is known, then bwrap
            raise
        try:
            process.adopt(pid)
            if network:
                process.proxy = await self._connect(pid, process)
            os.write(spawn.block_w, b"go")
            if quota:
                self.watch_quota(process, spawn.workspace)
        except BaseException:
            process.kill()
            raise
        finally:
            spawn.close_ours()
        return process

    def watch_quota(self, process: SandboxedProcess, workspace: str) -> None:
        """Check the workspace's size while ``process`` runs, and kill it past the quota (nothing to check on
        a tenant's volume: it refuses a write past the quota itself)."""
        tree = self.tenant_tree(workspace)
        if self.volumes is not None and self.bounded(tree):
            process.quota = VolumeQuota(self.volumes, tree)
        elif self.limits.workspace_quota > 0:
            ws_fd, _ = open_workspace(workspace)
            process.quota = QuotaWatch(ws_fd, self.limits.workspace_quota, self.limits.quota_interval, process.kill,
                                       self._usage.get(workspace), functools.partial(self._usage.__setitem__, workspace))

    async def _connect(self, pid: int, process: SandboxedProcess) -> egress.Proxy:
        """Start the command's egress proxy inside its network namespace, before it runs."""
        try:
            return await self.egress.serve(pid)
        except (OSError, ValueError, TimeoutError) as e:
            process.kill()
            await process.wait(5)
            said = process.buffer.result().text.strip()
            raise SandboxUnavailable(f"the command's network namespace could not be set up ({e})"
                                     + (f": {said}" if said else "")) from None

    async def run(self, workspace: Path, command: str, *, timeout: float, network: bool = False) -> ShellResult:
        process = await self.start(workspace, command, network=network)
        try:
            return await process.result(timeout)
        finally:
            process.kill()


_REAPERS: set[asyncio.Task[None]] = set()


def _keep(coro: Coroutine[None, None, None]) -> None:
    task = asyncio.ensure_future(coro)
    _REAPERS.add(task)
    task.add_done_callback(_REAPERS.discard)


def _reap_spawned(spawn: _Spawn, starting: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if starting.cancelled() or starting.exception() is not None:
        spawn.close_ours()
    else:
        _keep(_reap(spawn, starting.result(), asyncio.ensure_future(_child_pid(spawn.info_r))))


async def _reap(spawn: _Spawn, proc: asyncio.subprocess.Process, told: asyncio.Future[int]) -> None:
    """Kill a sandbox whose start was abandoned. Its command waits for "go", so there is time
    to learn its pid; killing bwrap first could orphan a child that has not yet asked to die
    with its parent, and that child would run the command once the block pipe closes."""
    try:
        with contextlib.suppress(OSError, ValueError, TimeoutError):
            pid = await told
            _kill_init(_open_pid(pid))
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    finally:
        spawn.close_ours()


async def _child_pid(fd: int) -> int:
    """The pid (on the host) of the sandbox's init, from bwrap's --info-fd JSON."""
    data = b""
    async with asyncio.timeout(30):
        while True:
            chunk = await _read_when_ready(fd)
            if not chunk:
                raise OSError("bubblewrap ended before it started the sandbox")
            data += chunk
            with contextlib.suppress(ValueError):
                return int(json.loads(data)["child-pid"])


async def _read_when_ready(fd: int) -> bytes:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, resolve, ready)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return os.read(fd, 65536)


def _open_pid(pid: int) -> int:
    """A pidfd of the sandbox's init (-1 when it is gone): bwrap is its parent and has not
    reaped it, so the pid still names it; through the pidfd a later kill cannot hit a reuse."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -1


def _kill_init(pidfd: int) -> None:
    """SIGKILL to a pid namespace's init ends every process in it, whatever process groups or
    sessions (``--new-session``) they made."""
    if pidfd >= 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)


class Proc(Protocol):
    """What a sandboxed command's process offers: bwrap's own, or a session supervisor's command."""

    @property
    def stdout(self) -> asyncio.StreamReader | None: ...

    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class SandboxedProcess:
    """A running sandboxed command whose output is collected in bounded memory."""

    def __init__(self, proc: Proc, buffer: HeadTailBuffer, largest_file: int = 0, *, group: int = 0) -> None:
        """``group``: a process group to kill with the sandbox's init (bwrap's own; 0: none)."""
        self.proc = proc
        self.group = group
        self.buffer = buffer
        self.started_at_us = now_us()
        # A session's command pumps its output pipe into the buffer from a reader callback (no task, no
        # transport, no copy through a StreamReader); bwrap's own process is read through its stream.
        pump = getattr(proc, "pump", None)
        self._reader: asyncio.Future[None] = pump(buffer) if pump is not None else asyncio.ensure_future(self._read())
        self._finishing: asyncio.Future[None] | None = None  # _finish, run once whoever waits for it
        self.timed_out = False
        self.largest_file = largest_file
        self.proxy: egress.Proxy | None = None
        self.quota: QuotaWatch | CommandQuota | VolumeQuota | None = None
        self.releases: list[Callable[[], None]] = []  # what the command holds of its tenant's budgets, given back
        self._init = -1  # pidfd of the sandbox's init, once bwrap told its pid
        self._noted = False

    def adopt(self, pid: int) -> None:
        self._init = _open_pid(pid)

    def adopt_pidfd(self, pidfd: int) -> None:
        """Hold ``pidfd`` (of the command's init, made by a session's supervisor) as its kill."""
        self._init = pidfd

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(65536):
            self.buffer.feed(chunk)
        mark("output closed")

    def _finished(self) -> asyncio.Future[None]:
        if self._finishing is None:
            self._finishing = asyncio.ensure_future(self._finish())
        return self._finishing

    async def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the command to exit; True when it did."""
        finishing = self._finished()
        if finishing.done():
            finishing.result()
            return True
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(finishing)
            return True
        except TimeoutError:
            return False

    async def _finish(self) -> None:
        await self._reader
        await self.proc.wait()
        mark("exit seen")
        self._release()
        if self.quota is not None:
            await self.quota.done  # its last check of the workspace
            mark("quota checked")

    def _release(self) -> None:
        if self._init >= 0:
            os.close(self._init)
            self._init = -1
        if self.proxy is not None:
            self.proxy.close()
        if self.quota is not None:
            self.quota.stop()
        while self.releases:
            self.releases.pop()()

    def _note_limits(self) -> None:
        """Say in the output why a limit stopped the command (once)."""
        if self._noted:
            return
        self._noted = True
        notes = []
        if self.proc.returncode in (128 + signal.SIGXFSZ, -signal.SIGXFSZ):
            notes.append(f"[a file reached the size limit of {megabytes(self.largest_file)} per file "
                         "(RLIMIT_FSIZE, at most the workspace quota)]")
        if self.quota is not None and (note := self.quota.note()):
            notes.append(note)
        if notes:
            self.buffer.feed(("\n" + "\n".join(notes) + "\n").encode())

    async def result(self, timeout: float | None = None) -> ShellResult:
        """Wait for exit, killing the whole process group at ``timeout``."""
        if not await self.wait(timeout):
            self.timed_out = True
            self.kill()
            await self._finished()
        self._note_limits()
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
        _kill_init(self._init)
        self._init = -1
        if self.proc.returncode is None and self.group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.group, signal.SIGKILL)
        self._release()
