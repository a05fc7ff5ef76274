"""What a sandbox may use (``SandboxLimits``: rlimits, tmpfs sizes, the tenant's cgroup and quota), and
the errors that refuse a sandboxed command: no sandbox here, or a tenant limit reached."""

from __future__ import annotations

from dataclasses import dataclass


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

