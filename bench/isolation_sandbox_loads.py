"""The sandbox loads of the isolation benchmark: one tenant's writes against its workspace quota.

``workspace_loads`` runs, in a tenant's workspace, four short commands that each write 320 MiB
(as 40 MiB files, each under a per-file RLIMIT_FSIZE of 50 MiB or more, so only the quota's total
can stop them), then one command of 25 ``fallocate`` of 40 MB, and returns the bytes the
tenant's tree holds after (st_blocks, walked as the quota's check counts them). With the quota a
bound (a volume per tenant) that is at most the quota; with a periodic check, commands shorter
than the check's interval are never stopped (1,281 MiB on a 50 MiB quota, measured). Loopback
only: no network is touched.

    used = await workspace_loads(sandbox, workspace)            # a sandbox per command
    used = await workspace_loads(sandbox, workspace, session=ss)  # through a session's sandbox
"""

from __future__ import annotations

import os
from pathlib import Path

from loopwire.harness.sandbox import Sandbox
from loopwire.harness.session_sandbox import SessionSandbox
from loopwire.harness.tenant_limits import disk_usage

BURSTS, BURST_MIB, FILE_MIB = 4, 320, 40
FALLOCATES, FALLOCATE_BYTES = 25, 40_000_000


def burst_command(n: int) -> str:
    """One short command writing BURST_MIB MiB as FILE_MIB MiB files (exit 0 whatever the writes said)."""
    return (f"for i in $(seq {BURST_MIB // FILE_MIB}); do head -c {FILE_MIB}M /dev/zero > burst{n}-$i 2>/dev/null; "
            "done; true")


def fallocate_command() -> str:
    return f"for i in $(seq {FALLOCATES}); do fallocate -l {FALLOCATE_BYTES} falloc$i 2>/dev/null; done; true"


async def workspace_loads(sandbox: Sandbox, workspace: Path, *, session: SessionSandbox | None = None,
                          timeout: float = 120.0) -> int:
    """Run the loads in ``workspace`` (a tenant's workspace under ``sandbox.workspace_root``), through
    ``session`` when given (a session's sandbox) else a sandbox per command; the tenant's usage after, bytes."""
    for command in [*(burst_command(n) for n in range(BURSTS)), fallocate_command()]:
        process = await (session.start(command) if session is not None else sandbox.start(workspace, command))
        try:
            await process.result(timeout)
        finally:
            process.kill()
    return tenant_usage(sandbox, workspace)


def tenant_usage(sandbox: Sandbox, workspace: Path) -> int:
    """Bytes below the tenant's tree holding ``workspace`` (the workspace itself outside every tenant's tree)."""
    fd = os.open(sandbox.tenant_tree(workspace) or workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return disk_usage(fd)
    finally:
        os.close(fd)
