"""Escapes a security review found in the shell sandbox and the file tools, one test each.

Each test fails on the code the review looked at and passes now. Nothing is skipped: when
bubblewrap cannot run here, every sandbox test fails with one line saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest

from loopwire.harness import file_edit, tools, workspace_files, workspace_grep
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_limits import SandboxLimits
from loopwire.harness.workspace_files import ToolInputError
from loopwire.v1 import common_pb2

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def sandbox(tmp_path):
    box = Sandbox(output_limit=1 << 20)
    if reason := box.probe(tmp_path / "probe"):
        pytest.fail(f"bubblewrap sandbox unavailable, escapes cannot be checked: {reason}", pytrace=False)
    return box


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def ctx(workspace):
    return tools.ToolContext(workspace, Sandbox(output_limit=1 << 16), BackgroundTasks(), shell_timeout=10,
                             background_after=5)


async def call(ctx, name: str, **args: object) -> tools.ToolOutcome:
    return await tools.execute(common_pb2.FunctionCall(call_id="c", name=name, arguments=json.dumps(args)), ctx)


# --- the shell ------------------------------------------------------------------------------


async def test_remounting_opt_and_writing_etc_do_not_reach_the_host(sandbox, workspace):
    marker = f"loopwire-escape-{uuid.uuid4().hex}"
    targets = [Path("/opt") / marker, Path("/etc") / marker, Path("/usr") / marker]
    try:
        r = await sandbox.run(workspace, f"mount -o remount,rw,bind /opt; touch /opt/{marker}; "
                                         f"mount -o remount,rw,bind /etc; touch /etc/{marker}; "
                                         f"mount -o remount,rw,bind /usr; touch /usr/{marker}; echo done", timeout=20)
        assert "done" in r.output.text
        assert [t for t in targets if t.exists()] == []
    finally:
        for t in targets:
            with contextlib.suppress(FileNotFoundError):
                t.unlink()


async def test_the_shell_has_no_capabilities_and_an_unprivileged_uid(sandbox, workspace):
    r = await sandbox.run(workspace, "id -u; id -g; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):|^NoNewPrivs:|^Seccomp:' "
                                     "/proc/self/status", timeout=20)
    lines = r.output.text.splitlines()
    assert lines[0] != "0" and lines[1] != "0", r.output.text
    fields = dict(line.split(":\t") for line in lines[2:] if ":\t" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, r.output.text
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", r.output.text


async def test_kernel_knobs_in_proc_are_read_only(sandbox, workspace):
    probe = ("import os\nfor p in ['/proc/sys/kernel/core_pattern', '/proc/sys/vm/swappiness', '/proc/sysrq-trigger']:\n"
             "    try:\n        os.close(os.open(p, os.O_WRONLY)); print('WRITABLE', p)\n"
             "    except OSError as e:\n        print('refused', p, e.errno)\n")
    (workspace / "probe.py").write_text(probe)
    r = await sandbox.run(workspace, "python3 probe.py", timeout=20)
    assert "refused /proc/sys/kernel/core_pattern" in r.output.text and "WRITABLE" not in r.output.text, r.output.text


async def test_seccomp_denies_namespace_tracing_and_key_syscalls(sandbox, workspace):
    # Each of these succeeds (or fails otherwise than EPERM) for an unprivileged process
    # without the filter; the filter answers EPERM (ENOSYS for clone3).
    probe = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr, *a):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])
    return errno.errorcode.get(ctypes.get_errno(), 'OK') if rc < 0 else 'OK'
print('unshare', sc(272, 0x10000000))
print('ptrace', sc(101, 0, 0, 0, 0))
print('keyctl', sc(250, 0, -3, 0))
print('mount', sc(165, 0, 0, 0, 0, 0))
print('perf_event_open', sc(298, 0, 0, -1, -1, 0))
print('clone3', sc(435, 0, 0))
print('fsopen', sc(430, 0, 0))
"""
    (workspace / "probe.py").write_text(probe)
    r = await sandbox.run(workspace, "uname -m; python3 probe.py", timeout=20)
    lines = r.output.text.splitlines()
    if lines[0] != "x86_64":
        pytest.fail(f"this test uses x86-64 syscall numbers; the machine is {lines[0]}", pytrace=False)
    results = dict(line.split() for line in lines[1:] if len(line.split()) == 2)
    assert results == {"unshare": "EPERM", "ptrace": "EPERM", "keyctl": "EPERM", "mount": "EPERM",
                       "perf_event_open": "EPERM", "clone3": "ENOSYS", "fsopen": "EPERM"}, r.output.text


async def test_etc_is_minimal_without_shadow(sandbox, workspace):
    r = await sandbox.run(workspace, "cat /etc/shadow; echo rc=$?; ls /etc; echo ---; cat /etc/passwd", timeout=20)
    text = r.output.text
    assert "rc=0" not in text and "root:" not in text.split("---")[-1], text
    listing = text.split("---")[0].split()
    assert "shadow" not in listing and "gshadow" not in listing and "passwd" in listing, text
    assert "sandbox:x:" in text


async def test_no_environment_of_the_harness_is_visible_anywhere(sandbox, workspace, monkeypatch):
    marker = f"LOOPWIRE_ESCAPE_MARKER_{uuid.uuid4().hex}"
    monkeypatch.setenv(marker, "api-key-lookalike")
    # (a sleep of the command's own, so one process there is dumpable: its shell is not, and its environment is
    # then out of reach too)
    r = await sandbox.run(workspace, "sleep 30 & for f in /proc/[0-9]*/environ; do echo \"== $f\"; "
                          "tr '\\0' '\\n' < $f; done; kill $!", timeout=20)
    text = r.output.text
    assert "== /proc/1/environ" in text and "PATH=" in text, text  # the files were readable
    assert marker not in text and "api-key-lookalike" not in text, text


async def test_a_system_directory_is_never_a_workspace(sandbox):
    for bad in ("/", "/etc", "/usr/lib", "/proc/self"):
        with pytest.raises(ToolInputError, match="system directory"):
            await sandbox.start(Path(bad), "true")


# --- the workspace ---------------------------------------------------------------------------


def test_start_task_workspaces_stay_in_the_tenants_own_tree(tmp_path):
    root = tmp_path / "workspaces"
    outside = tmp_path / "outside"
    outside.mkdir()
    under = workspace_files.tenant_workspace
    mine = root / "tenant-alpha"
    assert under(root, "alpha", "", "s_1") == (mine / "s_1").resolve() and (mine / "s_1").is_dir()
    assert under(root, "alpha", "a/b", "s_1") == (mine / "a/b").resolve()
    assert under(root, "alpha", str(mine / "c"), "s_1") == (mine / "c").resolve()
    theirs = under(root, "beta", "", "s_2")  # another tenant's workspace, which exists
    (theirs / "secret.txt").write_text("beta's")
    os.symlink(outside, mine / "out")
    os.symlink(theirs, mine / "theirs")
    os.symlink("a", mine / "in")
    assert under(root, "alpha", "in/b", "s_1") == (mine / "a/b").resolve()  # a link that stays inside is fine
    # Every way out answers the same "not found", whether or not its target exists.
    for bad in ("/", str(outside), str(theirs), str(root / "tenant-beta" / "nothing-here"), str(root),
                "../tenant-beta/s_2", "../tenant-beta/missing", "a/../../tenant-beta", "out", "out/sub",
                "theirs", "theirs/sub"):
        with pytest.raises(workspace_files.WorkspaceNotFound, match=r"workspace .* not found$"):
            under(root, "alpha", bad, "s_1")
    for bad, message in [(".", "workspace root itself"), (str(mine), "workspace root itself"), ("a\0b", "NUL")]:
        with pytest.raises(ToolInputError, match=message):
            under(root, "alpha", bad, "s_1")
    assert list(outside.iterdir()) == [] and sorted(p.name for p in theirs.iterdir()) == ["secret.txt"]
    # Tenant names that are not plain words get a digest directory; none can reach another's.
    odd = under(root, "../beta", "", "s_3")
    assert odd.parent.parent == root.resolve() and odd.parent.name.startswith("tenant~")


async def test_run_refuses_a_workspace_outside_the_root(tmp_path):
    from harness_testkit import harness_env, of

    from loopwire.v1 import harness_pb2
    async with harness_env(tmp_path) as h:
        for bad in ("/", "../../..", str(tmp_path / "elsewhere")):
            events = await h.run(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="t", workspace=bad)))
            failed = of(events, "failed")
            assert failed and failed[0].error.field == "start.workspace", (bad, events)
        assert not (tmp_path / "elsewhere").exists()


def test_file_tools_refuse_the_host_root_as_workspace():
    with pytest.raises(ToolInputError, match="system directory"):
        workspace_files.read_file(Path("/"), "etc/shadow")
    with pytest.raises(ToolInputError, match="system directory"):
        workspace_grep.grep(Path("/"), "root", "etc")


# --- the file tools --------------------------------------------------------------------------


def test_a_symlink_swapped_during_reads_and_edits_never_leads_outside(tmp_path, workspace):
    outside = tmp_path / "secret.txt"
    outside.write_text("SECRET shared-token\n")
    before = outside.stat()
    stop = threading.Event()

    def swap() -> None:
        link, regular = workspace / ".swap-link", workspace / ".swap-file"
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError, FileExistsError):
                os.symlink(outside, link)
                os.replace(link, workspace / "target")
            with contextlib.suppress(FileNotFoundError):
                regular.write_text("inside shared-token\n")
                os.replace(regular, workspace / "target")

    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    reads = edits = 0
    try:
        deadline = time.monotonic() + 20
        for _ in range(3000):
            if time.monotonic() > deadline:
                break
            with contextlib.suppress(OSError, ToolInputError):  # as tools.execute: an error result
                text = workspace_files.read_file(workspace, "target")
                assert "SECRET" not in text
                reads += 1
            with contextlib.suppress(OSError, ToolInputError):
                file_edit.search_replace(workspace, "target", "shared-token", "shared-token edited")
                edits += 1
    finally:
        stop.set()
        swapper.join()
    assert outside.read_text() == "SECRET shared-token\n"
    assert outside.stat().st_mtime_ns == before.st_mtime_ns
    assert reads and edits  # the race really ran both ways


def test_grep_does_not_follow_a_link_out_of_the_workspace(tmp_path, workspace):
    (tmp_path / "secret.txt").write_text("TOPSECRET\n")
    os.symlink(tmp_path / "secret.txt", workspace / "leak.txt")
    (workspace / "mine.txt").write_text("no secret here\n")
    assert workspace_grep.grep(workspace, "TOPSECRET") == "no matches"


def _unblock(fifo: Path) -> None:
    """Give a reader blocked on ``fifo`` its EOF, so a failing run still ends."""
    for _ in range(50):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:
                return
        else:
            os.close(fd)
        time.sleep(0.01)


@pytest.mark.timeout(30)
async def test_fifos_are_refused_at_once(ctx, workspace):
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    (workspace / "a.txt").write_text("needle\n")
    try:
        out = await asyncio.wait_for(call(ctx, "read_file", path="pipe"), 5)
        assert out.is_error and "FIFO" in out.output
        out = await asyncio.wait_for(call(ctx, "grep", pattern="needle"), 5)
        assert out.output == "a.txt:1:needle"
        out = await asyncio.wait_for(call(ctx, "grep", pattern="needle", path="pipe"), 5)
        assert out.is_error and "FIFO" in out.output
        out = await asyncio.wait_for(call(ctx, "edit_file", path="pipe", search="a", replace="b"), 5)
        assert out.is_error and "FIFO" in out.output
    finally:
        _unblock(fifo)


@pytest.mark.timeout(60)
async def test_catastrophic_patterns_end_within_the_grep_limit(ctx, workspace):
    # 27 letters: seconds for a backtracking engine, so a failing run still ends.
    (workspace / "redos.txt").write_text("a" * 27 + "!\n")
    out = await call(ctx, "grep", pattern=r"^(a+)+$")
    assert not out.is_error and out.output == "no matches", out.output
    # A look-ahead, which RE2 refuses, falls back to the `regex` engine, which backtracks on this one
    # (2^60 paths: it would never end): the time limit ends it and says so. No wall-clock
    # assertion: the test's own timeout is the backstop.
    (workspace / "long.txt").write_text("a" * 60 + "!\n")
    text = await asyncio.to_thread(workspace_grep.grep, workspace, r"(?=(a|aa)+$)", "long.txt", time_limit=1.0)
    assert "too long" in text or "time limit" in text, text


@pytest.mark.timeout(60)
def test_a_huge_file_is_read_in_bounded_memory(workspace):
    big = workspace / "big.txt"
    with open(big, "wb") as f:
        f.write(b"".join(b"line %d\n" % n for n in range(1, 3001)))
        f.truncate(512 << 20)  # sparse: 512 MiB that take no disk
    tracemalloc.start()
    try:
        text = workspace_files.read_file(workspace, "big.txt", offset=10, limit=5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "    10\tline 10" in text and "    14\tline 14" in text and "line 15" not in text
    assert "read stopped" in text and str(512 << 20) in text, text[:2000]
    assert peak < 64 << 20, f"peak {peak} bytes"


@pytest.fixture
def open_workspace_root():
    """A workspace root every uid can traverse (/tmp is 1777), as a harness's state directory is."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="loopwire-uid-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the host-uid drop applies to a harness running as root")
async def test_a_root_harness_runs_commands_as_an_unprivileged_host_uid(open_workspace_root):
    box = Sandbox(output_limit=1 << 16, limits=SandboxLimits(processes=40))
    assert box.probe(open_workspace_root / ".probe") == "" and box.warning == "", box.warning
    ws = workspace_files.tenant_workspace(open_workspace_root, "t1", "", "session")
    ctx = tools.ToolContext(ws, box, BackgroundTasks(), shell_timeout=30, background_after=25)
    # The harness's own file tool writes a file; the command may change it afterwards.
    out = await call(ctx, "edit_file", path="notes.txt", search="", replace="from the harness\n")
    assert not out.is_error, out.output
    assert (ws / "notes.txt").stat().st_uid == box.host_uid
    out = await call(ctx, "shell", command="echo from the command >> notes.txt && id -u && touch made-inside")
    assert not out.is_error and out.output.split("\n")[0] == "1000", out.output
    assert (ws / "notes.txt").read_text() == "from the harness\nfrom the command\n"
    assert (ws / "made-inside").stat().st_uid == box.host_uid != 0  # uid 1000 inside is this uid on the host
    # RLIMIT_NPROC holds now that the host uid is not root: the 41st process cannot be forked. Each
    # child lives until the parent exits (EOF on a pipe), not for a fixed time: none ends early.
    fork_many = ("import os\nr, w = os.pipe()\nn = 0\nfor _ in range(80):\n    try:\n        if os.fork() == 0:\n"
                 "            os.close(w)\n            os.read(r, 1)\n            os._exit(0)\n        n += 1\n"
                 "    except BlockingIOError:\n        print('EAGAIN after', n)\n        break\n")
    (ws / "fork.py").write_text(fork_many)
    out = await call(ctx, "shell", command="python3 fork.py; pkill -u 1000 sleep; true")
    assert "EAGAIN after" in out.output, out.output
    assert int(out.output.split("EAGAIN after")[1].split()[0]) < 40
