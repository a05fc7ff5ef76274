"""Every sandbox limit of a tenant is a bound, not a periodic check (real bwrap sandbox, as root).

1. The workspace quota: each tenant's tree is a filesystem of the quota's size (``tenant_volumes``),
   so no sequence of commands -- bursts shorter than any check, ``fallocate``, sparse files,
   parallel commands, the harness's own file tools -- takes the tenant's usage past the quota
   (plus one command's RLIMIT_FSIZE, the property the quota promises); deleting files makes room.
2. /tmp and /dev/shm: tmpfs of a small size each, counted against a per-tenant budget while a
   command or exec session runs; one past the budget is refused, and admitted once another ended.

Every wait is on a condition, never on a sleep.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness_testkit import answer, call, harness_env, kinds, of, until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.harness import exec_sessions, file_edit, file_pool, tenant_volumes, tools, workspace_files
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_limits import SandboxLimits
from loopwire.harness.session_sandbox import SessionSandbox
from loopwire.harness.tenant_limits import disk_usage
from loopwire.v1 import common_pb2

sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))  # the benchmarks' modules run as scripts
from isolation_sandbox_loads import workspace_loads  # noqa: E402

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="a uid and a volume per tenant need a harness running as root")]
_RUNNING = re.compile(r"\[exec session (\d+) still running")


@pytest.fixture
def root() -> Iterator[Path]:
    """A workspace root every uid can traverse; its tenants' volumes unmounted at the end."""
    path = Path(tempfile.mkdtemp(prefix="loopwire-bounds-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        tenant_volumes.unmount_below(path)
        shutil.rmtree(path, ignore_errors=True)


def make_box(root: Path, **limits: object) -> Sandbox:
    box = Sandbox(output_limit=1 << 16, limits=SandboxLimits(**limits),  # type: ignore[arg-type]
                  workspace_root=root, uid_state=root / ".tenant-uids.json")
    if reason := box.probe(root / ".probe"):
        pytest.fail(f"bubblewrap sandbox unavailable: {reason}", pytrace=False)
    return box


def volumes_or_skip(box: Sandbox) -> None:
    assert box.volumes is not None
    if box.volumes.reason:
        pytest.skip(f"no loop-mounted volume per tenant here: {box.volumes.reason}")


def tenant_usage(box: Sandbox, ws: Path) -> int:
    """What the tenant's tree holds, walked (st_blocks of everything, as the quota's check counts it)."""
    fd = os.open(box.tenant_tree(ws), os.O_RDONLY | os.O_DIRECTORY)
    try:
        return disk_usage(fd)
    finally:
        os.close(fd)


async def end(session: SessionSandbox) -> None:
    """Kill the session's sandbox and wait for its bwrap, while the test's loop still runs."""
    running = session._supervisor.process if session._supervisor is not None else None
    session.close()
    if running is not None:
        await running.wait(30)


async def shell(ss: SessionSandbox, command: str) -> str:
    process = await ss.start(command)
    result = await process.result(120)
    return result.output.text


# --- 1. the workspace quota ---------------------------------------------------------------------


async def test_short_bursts_and_fallocate_stay_within_the_quota(root):
    """The issue's load: four short commands of 320 MiB each and 25 fallocate of 40 MB on a 50 MiB quota
    (1,281 MiB and 20x the quota with the check), then deleting makes room again."""
    box = make_box(root, workspace_quota=50 << 20)
    volumes_or_skip(box)
    quota = box.limits.workspace_quota
    ws = workspace_files.tenant_workspace(root, "A", "", "s1")
    ss = SessionSandbox(box, ws)
    try:
        used = await workspace_loads(box, ws, session=ss)
        assert used <= quota, f"{used / 2**20:.1f} MiB on a {quota >> 20} MiB quota"
        full = await shell(ss, "head -c 1M /dev/zero > one-more; echo rc=$?")
        assert "No space left on device" in full and "rc=1" in full, full
        assert "all their quota of 50.00 MiB allows" in full and "delete files to make room" in full, full
        # Deleting needs a command: it runs, and the room is back.
        assert "freed" in await shell(ss, "rm -f burst* falloc* one-more; echo freed")
        assert tenant_usage(box, ws) < 1 << 20
        ok = await shell(ss, "head -c 10M /dev/zero > again; echo rc=$?")
        assert "rc=0" in ok and "quota" not in ok, ok
    finally:
        await end(ss)


async def test_the_harness_file_tools_write_into_the_same_bound(root):
    box = make_box(root, workspace_quota=16 << 20)
    volumes_or_skip(box)
    ws = workspace_files.tenant_workspace(root, "A", "", "s1")
    ss = SessionSandbox(box, ws)
    try:
        await shell(ss, "head -c 40M /dev/zero > fill || true")
        with pytest.raises(OSError, match="No space left on device"):
            await file_pool.run_tool(box, ws, file_edit.search_replace, "notes.txt", "", "x" * (4 << 20))
        assert tenant_usage(box, ws) <= box.limits.workspace_quota
    finally:
        await end(ss)


async def test_a_tenants_volume_is_made_before_its_first_workspace(root):
    """A session's start mounts it before anything is made in the tree, so nothing lies hidden under it."""
    box = make_box(root, workspace_quota=16 << 20)
    volumes_or_skip(box)
    box.prepare_tenant("A")
    tree = root / workspace_files.tenant_dir_name("A")
    assert os.path.ismount(tree) and not os.listdir(tree)
    ws = workspace_files.tenant_workspace(root, "A", "", "s1")
    (ws / "made-before-any-command").write_text("kept\n")
    out = await box.run(ws, "cat made-before-any-command", timeout=60)
    assert out.output.text.startswith("kept"), out.output.text
    # A tree that already holds files (made before volumes) is never mounted over: its files stay visible.
    legacy = workspace_files.tenant_workspace(root, "B", "", "s1")
    (legacy / "old").write_text("old\n")
    out = await box.run(legacy, "cat old", timeout=60)
    assert out.output.text.startswith("old") and not os.path.ismount(box.tenant_tree(legacy)), out.output.text


_NAMES = itertools.count()
_Op = tuple[str, int, int]  # (kind, MiB, file number)
_OPS = st.one_of(
    st.tuples(st.just("write"), st.integers(1, 24), st.integers(0, 5)),  # one file, written at once
    st.tuples(st.just("fallocate"), st.integers(1, 24), st.integers(0, 5)),
    st.tuples(st.just("sparse"), st.integers(1, 4096), st.integers(0, 5)),  # a hole, then a little data
    st.tuples(st.just("many"), st.integers(1, 12), st.integers(1, 40)),  # many small files
    st.tuples(st.just("parallel"), st.integers(1, 24), st.integers(2, 4)),  # commands at once
    st.tuples(st.just("rm"), st.just(0), st.integers(0, 5)),
)


def _command(op: _Op, step: int) -> list[str]:
    kind, mib, n = op
    if kind == "write":
        return [f"head -c {mib}M /dev/zero > w{n}"]
    if kind == "fallocate":
        return [f"fallocate -l {mib}MiB f{n}"]
    if kind == "sparse":
        return [f"truncate -s {mib}M s{n} && head -c 1M /dev/zero | dd of=s{n} bs=1M seek={mib // 2} conv=notrunc "
                "status=none"]
    if kind == "many":
        return [f"mkdir -p d{step} && for i in $(seq {n}); do head -c {mib}00K /dev/zero > d{step}/m$i; done"]
    if kind == "parallel":
        return [f"head -c {mib}M /dev/zero > p{step}-{i}" for i in range(n)]
    return [f"rm -rf w{n} f{n} s{n} d*"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(_OPS, min_size=1, max_size=8))
async def test_no_sequence_of_commands_takes_a_tenant_past_its_quota(root, ops):
    """Property: after every step -- and across every workspace of the tenant -- its usage is at most the
    quota plus one command's RLIMIT_FSIZE (the volume keeps it at the quota itself)."""
    box = make_box(root, workspace_quota=32 << 20, file_size=16 << 20)
    volumes_or_skip(box)
    bound = box.limits.workspace_quota + box.limits.largest_file
    tenant = f"P{next(_NAMES)}"
    sessions = [SessionSandbox(box, workspace_files.tenant_workspace(root, tenant, "", name)) for name in ("s1", "s2")]
    try:
        for step, op in enumerate(ops):
            commands = _command(op, step)
            # Parallel commands go through both of the tenant's sessions (each its own sandbox) at once.
            await asyncio.gather(*(shell(sessions[i % 2], c) for i, c in enumerate(commands)))
            used = tenant_usage(box, sessions[0].workspace)
            assert used <= bound, f"step {step} {op}: {used / 2**20:.1f} MiB past {bound / 2**20:.0f} MiB"
            assert used <= box.limits.workspace_quota  # the volume's own, stricter bound
    finally:
        for ss in sessions:
            await end(ss)


# --- 2. /tmp and /dev/shm -----------------------------------------------------------------------


@pytest.mark.parametrize("per_session", [True, False], ids=["session-sandbox", "own-sandbox"])
async def test_tmp_and_dev_shm_are_small_by_default_and_full_is_enospc(root, per_session):
    box = make_box(root)  # the default: 64 MiB each (1 GiB before)
    box.per_session = box.per_session and per_session
    ws = workspace_files.tenant_workspace(root, "A", "", "s1")
    ss = SessionSandbox(box, ws)
    try:
        for target in ("/tmp", "/dev/shm"):
            out = await shell(ss, f"head -c 100M /dev/zero > {target}/big; echo rc=$?; du -m {target}/big")
            assert "No space left on device" in out and "rc=1" in out, out
            assert re.search(r"^(6[0-4]|[1-5]?\d)\s", out.split("rc=1", 1)[1].strip(), re.M), out
    finally:
        await end(ss)


async def tool(ctx: tools.ToolContext, name: str, **args: object) -> tools.ToolOutcome:
    return await tools.execute(common_pb2.FunctionCall(call_id="c", name=name, arguments=json.dumps(args)), ctx)


async def test_exec_sessions_past_the_tmpfs_budget_are_refused_until_one_ends(root):
    # Each command takes 2 x 8 MiB of the 40 MiB budget: two run, the third is refused.
    box = make_box(root, tmp_size=8 << 20, tmpfs_budget=40 << 20)
    exec_sessions.configure(box, 8)  # the exec session bound is not what stops it
    a = tools.ToolContext(workspace_files.tenant_workspace(root, "A", "", "s1"), box, BackgroundTasks(),
                          shell_timeout=30, background_after=20)
    b = tools.ToolContext(workspace_files.tenant_workspace(root, "B", "", "s1"), box, BackgroundTasks(),
                          shell_timeout=30, background_after=20)
    try:
        numbers = []
        for _ in range(2):
            out = await tool(a, "exec_command", cmd="cat", yield_time_ms=250)
            assert (m := _RUNNING.search(out.output)), out.output
            numbers.append(int(m.group(1)))
        refused = await tool(a, "exec_command", cmd="cat", yield_time_ms=250)
        assert refused.is_error and "RESOURCE_EXHAUSTED" in refused.output, refused.output
        assert "tmpfs budget of 40.00 MiB (--sandbox-tmpfs-budget-mb)" in refused.output, refused.output
        shell_refused = await tool(a, "shell", command="echo hi")
        assert shell_refused.is_error and "RESOURCE_EXHAUSTED" in shell_refused.output, shell_refused.output
        # Another tenant has a budget of its own.
        other = await tool(b, "shell", command="echo from-b")
        assert "from-b" in other.output and not other.is_error, other.output
        # One ends (Ctrl-D): its share is back, and a new one is admitted.
        await tool(a, "write_stdin", session_id=numbers[0], chars="\u0004", yield_time_ms=250)
        tree = box.tenant_tree(a.workspace)
        await until(lambda: box.tmpfs.held.get(tree, 0) == 16 << 20, "the ended session's tmpfs given back")
        again = await tool(a, "exec_command", cmd="echo admitted; cat", yield_time_ms=250)
        assert "admitted" in again.output and not again.is_error, again.output
    finally:
        for ctx in (a, b):
            if ctx.background.sandbox is not None:
                await end(ctx.background.sandbox)
            ctx.background.kill_all()
    await until(lambda: not box.tmpfs.held and not exec_sessions._bound(box).live, "every command reaped")


async def test_shell_commands_give_their_tmpfs_back_when_they_end(root):
    box = make_box(root, tmp_size=8 << 20, tmpfs_budget=16 << 20)  # one command at a time
    ws = workspace_files.tenant_workspace(root, "A", "", "s1")
    ss = SessionSandbox(box, ws)
    try:
        for i in range(5):  # more commands than the budget holds at once, one after another
            assert f"n{i}" in await shell(ss, f"echo n{i}")
        assert not box.tmpfs.held
        # Network commands (a sandbox of their own) and bwrap per command count the same way.
        box.per_session = False
        assert "solo" in (await box.run(ws, "echo solo", timeout=60)).output.text
        assert not box.tmpfs.held
    finally:
        await end(ss)


async def test_through_the_service_a_session_starts_on_its_tenants_volume(tmp_path):
    """StartTask mounts the tenant's volume before its workspace is made, so a file the model writes before
    any command is on it too; the model sees a write past the quota fail with ENOSPC in the shell's output."""
    async with harness_env(tmp_path, sandbox_workspace_quota_mb=16) as h:
        volumes_or_skip(h.service.sandbox)
        h.gateway.script = [answer("", call("edit_file", json.dumps({"path": "notes.txt", "search": "",
                                                                     "replace": "first\n"}))),
                            answer("", call("shell", json.dumps({"command": "head -c 40M /dev/zero > big"}))),
                            answer("done")]
        events = await h.start()
        assert kinds(events)[-1] == "completed", of(events, "failed")
        output = of(events, "tool_call_ended")[1].output
        assert "No space left on device" in output and "all their quota of 16.00 MiB allows" in output, output
        tree = h.config.workspace_root.resolve() / workspace_files.tenant_dir_name("t1")
        assert os.path.ismount(tree)
