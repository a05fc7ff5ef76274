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

Its parts: what a command may use (``sandbox_limits``), what it sees (``sandbox_mounts``: binds, /etc,
environment), a started command and its kill (``sandbox_process``); ``Sandbox`` here assembles them.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from loopwire.harness import egress, seccomp, tenant_uids
from loopwire.harness.output import HeadTailBuffer
from loopwire.harness.sandbox_limits import ResourceExhausted, SandboxLimits, SandboxUnavailable
from loopwire.harness.sandbox_mounts import (
    JOIN_CGROUP,
    SANDBOX_GID,
    SANDBOX_UID,
    SANDBOX_UID_BASE,
    SANDBOX_UID_COUNT,
    SYSTEM_DIRS,
    Spawn,
    command_env,
    etc_args,
    supervisor_source,
    system_python,
)
from loopwire.harness.sandbox_process import (
    SandboxedProcess,
    ShellResult,
    child_pid,
    keep,
    reap,
    reap_spawned,
)
from loopwire.harness.tenant_limits import Cgroups, QuotaWatch, TmpfsBudget, TmpfsExhausted, megabytes
from loopwire.harness.tenant_volumes import TenantVolumes, VolumeQuota, unmount_below
from loopwire.harness.workspace_files import (
    check_workspace_path,
    open_workspace,
    set_file_owner,
    tenant_dir_name,
)


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
        self.python = system_python()
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
        # subshell of its own forked before the command comes (``sandbox_supervisor.SHELL``), so back to back they
        # cost no spare, shell start or fork; off: each command gets a spare (and a bash) of its own.
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

    def _prepare(self, workspace: Path, command: str, *, network: bool, control: int = -1) -> Spawn:
        """The argv ([cgroup join,] setpriv, prlimit, then bwrap) and the descriptors it reads:
        workspace, seccomp program, the files of /etc, bwrap's info and block pipes. The caller
        closes them once the process started. ``control`` (a socket): the sandbox runs a session's
        supervisor (``sandbox_supervisor``) on it instead of ``command``; the supervisor keeps the
        two capabilities it needs to make each command's namespaces and hands each command the
        seccomp program to load, with every capability dropped, before it runs."""
        spawn = Spawn([])
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
                args[:0] = [self.sh, "-c", JOIN_CGROUP, "sh", procs]
            for d in SYSTEM_DIRS:
                if os.path.islink(d):
                    args += ["--symlink", os.readlink(d), d]
                elif os.path.isdir(d):
                    args += ["--ro-bind", d, d]
            args += ["--dev", "/dev", "--size", str(self.limits.tmp_size), "--tmpfs", "/dev/shm",
                     "--proc", "/proc", "--remount-ro", "/proc",
                     "--size", str(self.limits.tmp_size), "--tmpfs", "/tmp"]
            args += etc_args(spawn, ws)
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
                spawn.argv = [*args, self.python, "-I", "-S", "-B", "-c", supervisor_source(), str(control),
                              str(filter_fd), str(self.limits.tmp_size)]
        except BaseException:
            spawn.close()
            spawn.close_ours()
            raise
        return spawn

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

    async def _launch(self, spawn: Spawn, *, network: bool, stdin: bool,
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
            starting.add_done_callback(functools.partial(reap_spawned, spawn))
            raise
        process = SandboxedProcess(proc, buffer or HeadTailBuffer(self.output_limit), self.limits.largest_file,
                                   group=proc.pid)
        told = asyncio.ensure_future(child_pid(spawn.info_r))
        try:
            pid = await asyncio.shield(told)
        except BaseException:
            keep(reap(spawn, proc, told))  # kills the sandbox once its pid is known, then bwrap
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
