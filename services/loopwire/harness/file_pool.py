"""The file tools (read_file, list, grep, edit_file) of each tenant on a bounded pool of its own.

They used to share asyncio's default executor with every session-store call: twelve slow
greps of one tenant filled it and another tenant's one-command session waited for them. Now a
tenant's file tools queue only behind that tenant's own (``WORKERS`` threads each), and the
default executor is left to the store. Inside the tenant's tree the threads also take the
tenant's uid as their filesystem identity (``tenant_uids.acting_as``), so the kernel checks
each access as the tenant's own commands would be checked.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from loopwire.harness import tenant_uids
from loopwire.harness.workspace_files import check_workspace_path

if TYPE_CHECKING:
    from loopwire.harness.sandbox import Sandbox

T = TypeVar("T")
WORKERS = 2  # threads per tenant: one tenant's pathological call leaves it one more, and no one else any less
MAX_POOLS = 256  # pools kept; the least recently used one is shut down (its running calls finish)

_pools: OrderedDict[str, ThreadPoolExecutor] = OrderedDict()
_lock = threading.Lock()


def pool(tenant: str) -> ThreadPoolExecutor:
    """The executor of one tenant (its directory's name; '' for workspaces outside every tree)."""
    with _lock:
        executor = _pools.pop(tenant, None)
        if executor is None:
            executor = ThreadPoolExecutor(WORKERS, thread_name_prefix=f"files-{tenant[:32]}")
        _pools[tenant] = executor
        while len(_pools) > MAX_POOLS:
            _, old = _pools.popitem(last=False)
            old.shutdown(wait=False)
        return executor


async def run_tool(sandbox: Sandbox, workspace: Path, fn: Callable[..., T], *args: object) -> T:
    """``fn(workspace, *args)`` on the pool of the tenant whose tree holds the workspace, as the
    tenant's uid where the sandbox gives it one."""
    uid, tree = sandbox.tenant_access(workspace)
    key = tenant_uids.tenant_tree(check_workspace_path(workspace), sandbox.workspace_root) or ""
    call = functools.partial(_as_tenant, uid, tree, str(workspace), fn, workspace, *args)
    return await asyncio.get_running_loop().run_in_executor(pool(os.path.basename(key)), call)


def _as_tenant(uid: int | None, tree: str | None, workspace: str, fn: Callable[..., T], *args: object) -> T:
    if uid is not None and tree is not None:
        tenant_uids.claim(tree, workspace, uid)  # as root, before the identity changes
    with tenant_uids.acting_as(uid, fs_identity=tree is not None):
        return fn(*args)
