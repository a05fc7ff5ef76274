"""Tenants stay apart (security review): two tenants, A and B, on one harness.

1. A uid per tenant: B's command runs while A fork-floods; A cannot read B's workspace, not
   even where the workspace root is visible inside every sandbox; a write past the workspace
   quota is stopped with a clear message.
2. A's pathological greps (ReDoS) do not hold up B's file tools.
3. network=true is a namespace of the command's own: no route to the host's loopback, egress
   only through the harness's allow-listed proxy.

Timing is asserted by order (what had finished when), never by wall-clock thresholds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from harness_testkit import TENANT_KEYS, answer, harness_env, of
from harness_testkit import call as model_call

from loopwire.common.grpc_server import service_channel
from loopwire.harness import file_edit, file_pool, tenant_volumes, tools, workspace_files, workspace_grep
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_limits import SandboxLimits
from loopwire.v1 import common_pb2, harness_pb2, harness_pb2_grpc

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(os.geteuid() != 0, reason="a uid per tenant needs a harness running as root")]


def make_box(root: Path, volumes: bool = True, **limits: object) -> Sandbox:
    box = Sandbox(output_limit=1 << 16, limits=SandboxLimits(**limits),  # type: ignore[arg-type]
                  workspace_root=root, uid_state=root / ".tenant-uids.json", volumes=volumes)
    if reason := box.probe(root / ".probe"):
        pytest.fail(f"bubblewrap sandbox unavailable: {reason}", pytrace=False)
    assert box.warning == "", box.warning
    return box


def workspace(root: Path, tenant: str) -> Path:
    return workspace_files.tenant_workspace(root, tenant, "", "session")


@contextlib.contextmanager
def open_root(parent: str):
    """A workspace root every uid can traverse, as a harness's state directory is."""
    root = Path(tempfile.mkdtemp(prefix="loopwire-tenants-", dir=parent))
    root.chmod(0o755)
    try:
        yield root
    finally:
        tenant_volumes.unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def root():
    with open_root("/tmp") as r:
        yield r


@pytest.fixture
def opt_root():
    """A workspace root under /opt, which every sandbox mounts (read-only) as a system directory."""
    with open_root("/opt") as r:
        yield r


async def call(ctx: tools.ToolContext, name: str, **args: object) -> tools.ToolOutcome:
    return await tools.execute(common_pb2.FunctionCall(call_id="c", name=name, arguments=json.dumps(args)), ctx)


# --- 1. a uid per tenant ------------------------------------------------------------------------

FLOOD = """import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    n += 1
open("full", "w").write(str(n))
time.sleep(120)
"""


async def test_a_fork_flood_of_one_tenant_leaves_another_its_commands(root):
    box = make_box(root, processes=60)
    ws_a, ws_b = workspace(root, "A"), workspace(root, "B")
    (ws_a / "flood.py").write_text(FLOOD)
    flood = await box.start(ws_a, "python3 flood.py")
    try:
        while not (ws_a / "full").exists():  # A has every process its uid may have
            assert flood.running, flood.buffer.result().text
            await asyncio.sleep(0.05)
        assert int((ws_a / "full").read_text()) < 60
        b = await box.run(ws_b, "echo B runs; id -u", timeout=60)
        assert b.exit_code == 0 and "B runs" in b.output.text, b.output.text
        assert flood.running  # B ran while A's flood held its processes
    finally:
        flood.kill()
        await flood.result(10)


async def test_each_tenants_sessions_run_as_the_tenants_own_uid(root):
    """Through the service: the uid follows the tenant's tree, whatever starts the command."""
    async with harness_env(root) as h:
        owners = {}
        for tenant in ("t1", "t2"):
            h.gateway.script = [answer("", model_call("shell", '{"command": "echo made > by-command.txt"}')),
                                answer("done")]
            async with service_channel(h.address, TENANT_KEYS[tenant]) as channel:
                stub = harness_pb2_grpc.HarnessServiceStub(channel)
                start = harness_pb2.RunRequest(start=harness_pb2.StartTask(task="go"))
                events = [e async for e in stub.Run(iter([start]), timeout=60)]
            assert of(events, "completed"), events
            ws = Path(of(events, "started")[0].workspace)
            assert ws.parent.name == f"tenant-{tenant}" and stat.S_IMODE(ws.parent.stat().st_mode) == 0o700
            owners[tenant] = {ws.parent.stat().st_uid, (ws / "by-command.txt").stat().st_uid}
        assert len(owners["t1"]) == len(owners["t2"]) == 1 and owners["t1"] != owners["t2"], owners
        assert min(owners["t1"] | owners["t2"]) >= 61000


async def test_a_tenant_cannot_read_another_tenants_workspace(opt_root):
    box = make_box(opt_root)
    ws_a, ws_b = workspace(opt_root, "A"), workspace(opt_root, "B")
    wrote = await box.run(ws_b, "echo the secret of B > secret.txt", timeout=30)
    assert wrote.exit_code == 0, wrote.output.text
    # The root is under /opt, mounted in every sandbox: only the tenant uid keeps B's tree closed.
    looked = await box.run(ws_a, f"ls {opt_root}; cat {ws_b}/secret.txt; ls {ws_b.parent}", timeout=30)
    assert "tenant-A" in looked.output.text and "tenant-B" in looked.output.text, looked.output.text
    assert "the secret of B" not in looked.output.text
    assert looked.output.text.count("Permission denied") == 2, looked.output.text
    uid_a, uid_b = box.tenant_access(ws_a)[0], box.tenant_access(ws_b)[0]
    assert uid_a is not None and uid_b is not None and uid_a != uid_b
    tree = os.stat(ws_b.parent)
    assert stat.S_IMODE(tree.st_mode) == 0o700 and (tree.st_uid, tree.st_gid) == (uid_b, uid_b)
    assert (ws_b / "secret.txt").read_text() == "the secret of B\n"  # the harness (root) still reads it
    # A's file tools run as A's uid too: whatever path a bug let through, the kernel refuses B's file.
    with pytest.raises(PermissionError):
        await file_pool.run_tool(box, ws_a, lambda _ws: (ws_b / "secret.txt").read_text())
    # ... and what they create is A's, so A's commands can change it.
    await file_pool.run_tool(box, ws_a, file_edit.search_replace, "notes.txt", "", "from the file tool\n")
    assert (ws_a / "notes.txt").stat().st_uid == uid_a
    appended = await box.run(ws_a, "echo from the command >> notes.txt && cat notes.txt", timeout=30)
    assert appended.output.text.startswith("from the file tool\nfrom the command\n"), appended.output.text


async def test_without_volumes_a_write_past_the_workspace_quota_is_stopped(root):
    """The check that stands in where no volume per tenant can be mounted (the bound is test_tenant_bounds)."""
    box = make_box(root, volumes=False, workspace_quota=8 << 20, quota_interval=0.1)
    ws = workspace(root, "A")
    # One file: the kernel stops it at the quota (RLIMIT_FSIZE).
    one = await box.run(ws, "dd if=/dev/zero of=big bs=1M count=50 status=none", timeout=60)
    assert (ws / "big").stat().st_size == 8 << 20
    assert one.exit_code != 0 and "size limit of 8.00 MiB per file" in one.output.text, one.output.text
    await box.run(ws, "rm big", timeout=30)
    # Many files, each under the file limit: the check of the workspace's total kills the command.
    many = await box.run(ws, "for i in $(seq 500); do head -c 1000000 /dev/zero > f$i; sleep 0.02; done; "
                             "echo finished", timeout=120)
    assert not many.timed_out and many.exit_code != 0 and "finished" not in many.output.text, many.output.text
    assert "[killed: the workspace grew to" in many.output.text and "past its quota of 8.00 MiB" in many.output.text
    assert not (ws / "f500").exists()
    # Over the quota now: said after any command; a command that frees space is not stopped.
    after = await box.run(ws, "true", timeout=30)
    assert "over its quota of 8.00 MiB" in after.output.text, after.output.text
    freed = await box.run(ws, "rm -f f*; echo freed", timeout=30)
    assert freed.exit_code == 0 and "freed" in freed.output.text and "quota" not in freed.output.text


# --- 2. search and file tools -------------------------------------------------------------------

REDOS_FILE = ("x" * 40 + "\n") * 3000


async def test_grep_matches_a_redos_pattern_in_linear_time(root, monkeypatch):
    monkeypatch.setattr(workspace_grep, "GREP_TIME_LIMIT", 1.0)  # the backtracking engine needs seconds here
    box = make_box(root)
    ws = workspace(root, "A")
    (ws / "xs.txt").write_text(REDOS_FILE)
    ctx = tools.ToolContext(ws, box, BackgroundTasks(), shell_timeout=30, background_after=25)
    out = await call(ctx, "grep", pattern="(x+x+)+y")
    assert out.output == "no matches", out.output  # searched to the end: no time limit reached


async def test_one_tenants_slow_greps_do_not_hold_up_another_tenants_file_tools(root, monkeypatch):
    # A lookahead is beyond RE2: these greps take the backtracking engine, each until its deadline.
    monkeypatch.setattr(workspace_grep, "GREP_TIME_LIMIT", 2.0)
    box = make_box(root)
    ws_a, ws_b = workspace(root, "A"), workspace(root, "B")
    (ws_a / "xs.txt").write_text(REDOS_FILE)
    (ws_b / "hello.txt").write_text("hello from B\n")
    ctx_a = tools.ToolContext(ws_a, box, BackgroundTasks(), shell_timeout=30, background_after=25)
    ctx_b = tools.ToolContext(ws_b, box, BackgroundTasks(), shell_timeout=30, background_after=25)
    greps = [asyncio.ensure_future(call(ctx_a, "grep", pattern="(x+x+)+(?=y)")) for _ in range(12)]
    await asyncio.sleep(0)  # all twelve are handed to their executor
    found = await call(ctx_b, "grep", pattern="hello")
    assert not any(g.done() for g in greps), "B's grep waited for A's"
    assert found.output == "hello.txt:1:hello from B"
    for out in await asyncio.gather(*greps):
        assert "results are incomplete" in out.output  # A's own calls are bounded too


# --- 3. network ---------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def echo_server():
    """A TCP server on the host's loopback answering each line with 'pong <line>'; yields (port, seen)."""
    seen: list[str] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append("connection")
        while line := await reader.readline():
            writer.write(b"pong " + line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], seen
    finally:
        server.close()


async def test_network_true_has_no_route_to_the_hosts_loopback(root):
    box = make_box(root)
    ws = workspace(root, "A")
    async with echo_server() as (port, seen):
        direct = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        for network in (False, True):
            r = await box.run(ws, direct, timeout=30, network=network)
            assert r.exit_code != 0 and "connected" not in r.output.text, (network, r.output.text)
        assert seen == []


CONNECT = ("exec 3<>/dev/tcp/127.0.0.1/3128 || exit 9; "
           "printf 'CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n' >&3; "
           "read -r status <&3; echo \"{name}: $status\"; "
           "case $status in *' 200 '*) read -r _ <&3; echo ping >&3; read -r reply <&3; echo \"{name} says $reply\";; "
           "*) cat <&3;; esac")


async def test_network_true_egress_goes_only_through_the_allow_listed_proxy(root):
    async with echo_server() as (named, seen_named), echo_server() as (wild, seen_wild), \
            echo_server() as (other, seen_other):
        box = Sandbox(output_limit=1 << 16, workspace_root=root, uid_state=root / ".tenant-uids.json",
                      egress_allow=[f"127.0.0.1:{named}", f"*:{wild}"])
        assert box.probe(root / ".probe") == "" and box.warning == "", box.unavailable_reason or box.warning
        ws = workspace(root, "A")
        script = "; ".join([
            f"exec 4<>/dev/tcp/127.0.0.1/{named} && echo direct connected",  # the sandbox's own loopback
            "echo proxy=$https_proxy",
            CONNECT.format(target=f"127.0.0.1:{named}", name="named"),
            CONNECT.format(target=f"127.0.0.1:{wild}", name="wildcard"),
            CONNECT.format(target=f"127.0.0.1:{other}", name="other"),
            CONNECT.format(target=f"localhost:{named}", name="by-name"),
        ])
        r = await box.run(ws, script, timeout=60, network=True)
    text = r.output.text
    assert "direct connected" not in text and "proxy=http://127.0.0.1:3128" in text, text
    assert "named: HTTP/1.1 200" in text and "named says pong ping" in text, text
    assert "wildcard: HTTP/1.1 403" in text and "not a global address" in text, text
    assert "other: HTTP/1.1 403" in text and f"127.0.0.1:{other} is not in the harness's egress allow-list" in text
    assert "by-name: HTTP/1.1 403" in text, text
    assert (seen_named, seen_wild, seen_other) == (["connection"], [], [])


async def test_in_cgroup_mode_each_tenants_commands_join_the_tenants_group(root, tmp_path):
    """cgroup v2 is not available on every test machine: a stand-in directory shows the wiring (the
    command's shell writes itself into its tenant's cgroup.procs before the uid drop)."""
    fake = tmp_path / "delegated"
    fake.mkdir()
    (fake / "cgroup.controllers").write_text("cpu memory pids\n")
    (fake / "cgroup.subtree_control").write_text("")
    box = Sandbox(output_limit=1 << 16, limits=SandboxLimits(processes=99, memory=1 << 30, cpus=0.5),
                  workspace_root=root, cgroup=str(fake))
    assert box.probe(root / ".probe") == "" and box.cgroups is not None, box.cgroup_reason
    assert any(f"cgroup v2 {fake}/tenant-<uid> (pids.max=99" in line for line in box.describe())
    ws = workspace(root, "A")
    r = await box.run(ws, "echo in", timeout=30)
    assert r.exit_code == 0 and r.output.text == "in\n", r.output.text
    group = fake / f"tenant-{box.tenant_access(ws)[0]}"
    assert (group / "cgroup.procs").read_text() == "0\n"  # written by the command's own shell
    assert ((group / "pids.max").read_text(), (group / "cpu.max").read_text()) == ("99", "50000 100000")
