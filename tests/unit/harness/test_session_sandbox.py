"""A sandbox that starts once per session: the same guarantees as a sandbox per command.

The escape and sandbox tests of the per-command path run here again on the session path
(imported below with a ``sandbox`` fixture whose ``run`` goes through a session's sandbox).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from pathlib import Path

import processes
import pytest
import test_sandbox
import test_sandbox_escapes
from harness_testkit import until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_sandbox_testkit import SessionRuns, children, end, host_pid, probed

from loopwire.harness import workspace_files
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.session_sandbox import SessionSandbox

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def box(tmp_path):
    return probed(tmp_path)


@pytest.fixture
async def sandbox(box):
    runs = SessionRuns(box)
    yield runs
    await runs.close()


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


# The per-command path's guarantees, on the session path.
test_writes_land_in_the_workspace_and_nowhere_else = test_sandbox.test_writes_land_in_the_workspace_and_nowhere_else
test_timeout_kills_the_whole_process_tree = test_sandbox.test_timeout_kills_the_whole_process_tree
test_a_kill_as_soon_as_it_starts_leaves_nothing_running = \
    test_sandbox.test_a_kill_as_soon_as_it_starts_leaves_nothing_running
test_remounting_opt_and_writing_etc_do_not_reach_the_host = \
    test_sandbox_escapes.test_remounting_opt_and_writing_etc_do_not_reach_the_host
test_the_shell_has_no_capabilities_and_an_unprivileged_uid = \
    test_sandbox_escapes.test_the_shell_has_no_capabilities_and_an_unprivileged_uid
test_kernel_knobs_in_proc_are_read_only = test_sandbox_escapes.test_kernel_knobs_in_proc_are_read_only
test_seccomp_denies_namespace_tracing_and_key_syscalls = \
    test_sandbox_escapes.test_seccomp_denies_namespace_tracing_and_key_syscalls
test_etc_is_minimal_without_shadow = test_sandbox_escapes.test_etc_is_minimal_without_shadow
test_no_environment_of_the_harness_is_visible_anywhere = \
    test_sandbox_escapes.test_no_environment_of_the_harness_is_visible_anywhere


# --- the same outputs as a sandbox per command ---------------------------------------------

SAME = [
    "echo hi; echo err >&2; exit 3",
    "echo $$; echo $PPID; id; hostname; pwd; umask",
    "env | sort",
    "grep -E '^(Cap|NoNewPrivs|Seccomp:|SigIgn|SigBlk)' /proc/self/status",
    "ls -a /tmp /dev/shm; stat -c '%a %U' /tmp /dev/shm",
    "ulimit -a",
    "yes | head -2; echo ${PIPESTATUS[@]}",
    "kill -9 $$",
    "kill -TERM $$",
    "cat; echo read:$?",
    "printf '\\xff\\xfe\\x00x'; head -c 70000 /dev/zero | tr '\\0' a",
    "(setsid sleep 0.01 &); sleep 0 & wait; echo done",
    "cd /tmp && export LEAK=1 && echo here > /tmp/left && touch $HOME/made; pwd",
    "pwd; echo ${LEAK:-unset}; ls /tmp; ls; rm -f made",
    "python3 -c 'import os, sys; print(os.getuid(), os.getgid(), sys.stdin.read() == \"\")'",
]


async def outcome(run, workspace: Path, command: str) -> tuple[str, int, bool]:
    r = await run(workspace, command, timeout=30)
    return r.output.text, r.exit_code, r.output.truncated


async def test_commands_give_the_same_output_and_exit_code_as_a_sandbox_of_their_own(sandbox, box, workspace):
    # In order, all on one path then all on the other: the cd/export/tmp file of one command never
    # reaches the next (its file in the workspace does), and the last one tidies up.
    per_session = [await outcome(sandbox.run, workspace, command) for command in SAME]
    per_command = [await outcome(box.run, workspace, command) for command in SAME]
    for command, ours, theirs in zip(SAME, per_session, per_command, strict=True):
        assert ours == theirs, command
    assert "unset" in per_session[SAME.index("pwd; echo ${LEAK:-unset}; ls /tmp; ls; rm -f made")][0]


async def test_output_is_capped_as_on_a_sandbox_of_its_own(tmp_path, workspace):
    small = Sandbox(output_limit=4096)
    assert small.probe(tmp_path / "probe") == ""
    runs = SessionRuns(small)
    try:
        r = await runs.run(workspace, "head -c 100000 /dev/urandom; exit 3", timeout=30)
        assert r.exit_code == 3 and r.output.truncated and "cut from the middle of 100000 bytes" in r.output.text
    finally:
        await runs.close()


async def test_output_written_right_before_the_end_is_all_read(sandbox, workspace):
    """Output written just before bash exits, by bash and by a child it waits for, is all in the
    result: the end is reported only after the pipe has ended."""
    command = "head -c 40000 /dev/zero | tr '\\0' a; (head -c 20000 /dev/zero | tr '\\0' b) & wait; exit 7"
    for _ in range(5):
        text, code, truncated = await outcome(sandbox.run, workspace, command)
        assert (text, code, truncated) == ("a" * 40000 + "b" * 20000, 7, False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, exclude_characters="\\"),
                              max_size=20), min_size=1, max_size=4),
       code=st.integers(0, 255))
async def test_any_printed_text_and_exit_code_match(sandbox, box, workspace, words, code):
    import shlex

    command = "; ".join(f"printf '%s\\n' {shlex.quote(w)}" for w in words) + f"; exit {code}"
    assert await outcome(sandbox.run, workspace, command) == await outcome(box.run, workspace, command)


# --- kills ---------------------------------------------------------------------------------


async def test_a_kill_ends_the_commands_tree_and_nothing_runs_after_it(sandbox, workspace):
    tag = uuid.uuid4().int % 1000
    command = (f"(setsid sleep 987.51{tag}; touch setsid.txt) & (setsid sh -c 'sleep 987.52{tag}; touch double.txt' &) ; "
               f"sleep 987.53{tag}; touch late.txt")
    process = await sandbox.start(workspace, command)
    await until(lambda: all(processes.running(f"987.5{n}{tag}") for n in (1, 2, 3)), "the tree to start")
    process.kill()
    for n in (1, 2, 3):
        assert await processes.ended(f"987.5{n}{tag}"), n
    result = await process.result(5)
    assert result.exit_code == -signal.SIGKILL
    assert sorted(p.name for p in workspace.iterdir()) == []
    # The session's sandbox lives on for its next command.
    again = await sandbox.run(workspace, "echo alive", timeout=30)
    assert again.output.text == "alive\n" and again.exit_code == 0


async def start_and_cancel_at_each_step(session, command, **kwargs) -> None:
    """Start ``command(n)`` and cancel the start after n loop turns, for n 0-5 (each step of a start); a start
    that got through is killed."""
    for n in range(6):
        start = asyncio.ensure_future(session.start(command(n), **kwargs))
        for _ in range(n):
            await asyncio.sleep(0)  # one loop turn, not a wait: the start goes one step further
        start.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            (await start).kill()


async def test_a_start_cancelled_halfway_never_runs_the_command(sandbox, workspace):
    session = sandbox.session(workspace)
    await (await session.start("true")).result(30)  # the session's sandbox is up: only the command starts
    await start_and_cancel_at_each_step(session, lambda n: f"touch ran{n}; sleep 987.6{n}")
    for n in range(6):
        assert await processes.ended(f"987.6{n}")


@pytest.mark.parametrize("shell", [True, False], ids=["shell that stays", "spare of its own"])
async def test_a_start_with_stdin_cancelled_halfway_kills_the_command_and_closes_each_pipe_once(box, workspace, shell):
    box.shell_stays = shell
    runs = SessionRuns(box)
    session = runs.session(workspace)
    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
    try:
        await (await session.start("true")).result(30)
        await start_and_cancel_at_each_step(session, lambda n: f"sleep 986.5{n}", stdin=True)
        for n in range(6):
            assert await processes.ended(f"986.5{n}")
        again = await (await session.start("echo alive")).result(30)
        assert again.output.text == "alive\n" and again.exit_code == 0
    finally:
        await runs.close()
    assert errors == []  # a pipe closed twice (its transport's close after ours) is reported here


async def test_the_end_of_a_session_kills_its_sandbox_and_every_command_in_it(box, workspace):
    background = BackgroundTasks()
    tag = uuid.uuid4().int % 1000
    running = await background.start(box, workspace, f"sleep 987.71{tag}")
    assert background.sandbox is not None
    bwrap = background.sandbox.bwrap_pid
    assert bwrap is not None and os.path.exists(f"/proc/{bwrap}")
    background.kill_all()
    assert await processes.ended(f"987.71{tag}")
    await until(lambda: not os.path.exists(f"/proc/{bwrap}"), "the session's bwrap to end")
    assert (await running.result(5)).exit_code < 0


async def test_a_crashed_supervisor_is_replaced_for_the_next_command(sandbox, workspace):
    session = sandbox.session(workspace)
    tag = uuid.uuid4().int % 1000
    running = await session.start(f"sleep 987.81{tag}")
    bwrap = session.bwrap_pid
    assert bwrap is not None
    (init,) = children(bwrap)
    (supervisor,) = children(init)
    os.kill(supervisor, signal.SIGKILL)
    assert await processes.ended(f"987.81{tag}")  # its commands end with it
    assert (await running.result(10)).exit_code < 0
    await until(lambda: not os.path.exists(f"/proc/{bwrap}"), "the crashed sandbox to end")
    r = await sandbox.run(workspace, "echo again", timeout=30)
    assert r.output.text == "again\n" and r.exit_code == 0
    assert session.bwrap_pid not in (None, bwrap)


# --- tenants and commands apart ------------------------------------------------------------


async def test_two_tenants_sessions_see_neither_files_nor_processes_of_the_other(tmp_path):
    root = tmp_path / "workspaces"
    box = probed(tmp_path, workspace_root=root, uid_state=root / ".tenant-uids.json")
    ws_a = workspace_files.tenant_workspace(root, "tenant-a", "", "s1")
    ws_b = workspace_files.tenant_workspace(root, "tenant-b", "", "s1")
    a, b = SessionSandbox(box, ws_a), SessionSandbox(box, ws_b)
    tag = uuid.uuid4().int % 1000
    try:
        (await (await a.start("echo secret-of-a > secret.txt")).result(30))
        held = await a.start(f"sleep 987.91{tag}")
        await until(lambda: processes.running(f"987.91{tag}"), "tenant a's command to run")
        r = await (await b.start(f"cat {ws_a}/secret.txt; ls {ws_a}; cat /proc/[0-9]*/cmdline | tr '\\0' ' '; "
                                 "ls /proc | grep -c '^[0-9]'")).result(30)
        assert "secret-of-a" not in r.output.text and f"987.91{tag}" not in r.output.text, r.output.text
        held.kill()
        assert await processes.ended(f"987.91{tag}")
    finally:
        await end(a)
        await end(b)


async def test_a_commands_processes_are_out_of_reach_of_the_next_one(sandbox, workspace):
    tag = uuid.uuid4().int % 1000
    first = await sandbox.start(workspace, f"exec sleep 987.95{tag}")
    await until(lambda: processes.running(f"987.95{tag}"), "the first command to run")
    second = await sandbox.run(workspace, f"pkill -9 -f 987.95{tag}; kill -9 -1; echo $?", timeout=30)
    assert first.running, second.output.text  # a command signals only its own pid namespace
    first.kill()
    assert await processes.ended(f"987.95{tag}")


# --- the next command's init, made ahead; the end of a command ---------------------------------


def proc_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


async def test_the_next_commands_init_waits_confined_and_runs_the_next_command(sandbox, workspace):
    session = sandbox.session(workspace)
    await (await session.start("true")).result(30)
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: bool(supervisor._ready), "a spare made while the session is idle")
    spare = host_pid(supervisor._ready[0].pidfd)
    status = proc_status(spare)  # confined before any command exists: no capability, seccomp on
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000", status
    assert status["Seccomp"] == "2" and status["NoNewPrivs"] == "1", status
    assert status["NSpid"].split()[-1] == "1", status  # pid 1 of a namespace of its own
    with open(f"/proc/{spare}/mountinfo") as f:
        assert any(" /tmp " in line and "tmpfs" in line for line in f)
    (bash,) = children(spare)  # the command's bash, started ahead: as confined, before any script came
    status = proc_status(bash)
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000", status
    assert status["Seccomp"] == "2" and status["NoNewPrivs"] == "1", status
    assert status["NSpid"].split()[-1] == "2" and status["Name"] == "bash", status
    assert os.readlink(f"/proc/{bash}/fd/0") == "/dev/null"
    process = await session.start("echo $$; sleep 30")
    assert host_pid(process._init) == spare  # the command runs in that spare, in that bash
    await until(lambda: children(bash), "the command to run in the waiting bash")
    await until(lambda: process.buffer.result().text, "the command's first output")
    assert process.buffer.result().text == "2\n"
    process.kill()
    assert (await process.result(10)).exit_code == -signal.SIGKILL


async def test_the_waiting_bash_runs_a_script_as_bash_c_does(sandbox, box, workspace):
    """Scripts past a pipe's capacity, $BASH_EXECUTION_STRING, a syntax error's line, stdin, $SECONDS
    after an idle while: as a ``bash -c`` of its own gives them (a syntax error names `eval`, not `-c`)."""
    body = "\n".join(f"line {n} " + "x" * 90 for n in range(1000))  # ~100 kB (a pipe takes 64), under argv's 128
    big = f"cat > big.txt <<'EOF'\n{body}\nEOF\nwc -c < big.txt; echo ${{#BASH_EXECUTION_STRING}}; rm big.txt"
    for command in (big, "echo \"$BASH_EXECUTION_STRING\"; echo $0 $# $LINENO", "echo one\nif then fi"):
        text, code, cut = await outcome(sandbox.run, workspace, command)
        assert (text.replace("bash: eval: ", "bash: -c: "), code, cut) == await outcome(box.run, workspace, command)
    session = sandbox.session(workspace)
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: len(supervisor._ready) == 2 and supervisor._asked == 0, "two spares made while idle")
    await asyncio.sleep(1.2)
    r = await sandbox.run(workspace, "echo $SECONDS", timeout=30)
    assert r.output.text == "0\n"  # counted from the command's start, not its bash's
    process = await session.start("read -r line; echo got:$line; cat; [ -t 0 ] || echo not a tty", stdin=True)
    assert process.proc.stdin is not None
    process.proc.stdin.write(b"hello\nrest\n")
    process.proc.stdin.close()
    r = await process.result(30)
    assert (r.output.text, r.exit_code) == ("got:hello\nrest\nnot a tty\n", 0)


async def test_a_command_holding_a_nul_is_refused(sandbox, workspace):
    from loopwire.harness.workspace_files import ToolInputError

    with pytest.raises(ToolInputError, match="NUL"):
        await sandbox.start(workspace, "echo a\0b")
    assert (await sandbox.run(workspace, "echo fine", timeout=30)).output.text == "fine\n"


async def test_two_commands_back_to_back_after_idle_run_in_inits_made_ahead(sandbox, box, workspace):
    """Idle, the session keeps ``spares_ahead`` (2) inits ready; two commands one right after the other
    (the second sent as the first ends, before its replacement can be made) both run in one of them."""
    assert box.spares_ahead == 2
    box.shell_stays = False  # (a shell that stays serves both: test_session_shell)
    session = sandbox.session(workspace)
    await (await session.start("true")).result(30)
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: len(supervisor._ready) == 2 and supervisor._asked == 0, "two spares made while idle")
    ready = [host_pid(spare.pidfd) for spare in supervisor._ready]
    first = await session.start("until [ -e go1 ]; do sleep 0.01; done; echo one")  # alive until told
    ran = [host_pid(first._init)]
    (workspace / "go1").touch()
    assert (await first.result(30)).exit_code == 0
    second = await session.start("until [ -e go2 ]; do sleep 0.01; done; echo two")  # its replacement not made yet
    ran.append(host_pid(second._init))
    assert not supervisor._waiting  # neither command waited for a spare to be made
    assert ran == ready
    (workspace / "go2").touch()
    r = await second.result(30)
    assert r.exit_code == 0 and r.output.text == "two\n"


async def test_no_init_is_made_ahead_while_a_command_runs(sandbox, workspace):
    session = sandbox.session(workspace)
    await (await session.start("true")).result(30)
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: len(supervisor._ready) == 2 and supervisor._asked == 0, "two spares made while idle")
    running = await session.start("until [ -e go ]; do sleep 0.01; done")
    assert len(supervisor._ready) == 1 and supervisor._asked == 0  # taken one; none asked for while it runs
    (workspace / "go").touch()
    await running.result(30)
    await until(lambda: len(supervisor._ready) == 2 and supervisor._asked == 0, "the spare replaced once it ended")


def hogs(marker: str) -> list[int]:
    """The python3 processes (not the shells whose command line names them) running ``marker``."""
    found = []
    for pid in processes.running(marker):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            if f.read().startswith(b"python3\0"):
                found.append(pid)
    return found


async def test_nothing_of_a_command_runs_once_its_end_is_reported(sandbox, workspace):
    """bash exits while what it left runs on (setsid, double fork; its output closed), holding memory so that dying
    takes a while: all of it has ended by the time the command's end is reported."""
    import select

    session = sandbox.session(workspace)
    for n in range(3):
        tag = uuid.uuid4().int % 1000
        marker = f"987.4{n}{tag}"
        hog = f"python3 -c 'x = bytearray(256 << 20); import time; time.sleep({marker})' >/dev/null 2>&1"
        process = await session.start(f"(setsid {hog} &); ({hog} &); until [ -e go{n} ]; do sleep 0.01; done")
        await until(lambda marker=marker: len(hogs(marker)) == 2, "what the command leaves behind to run")
        left = [os.pidfd_open(pid) for pid in hogs(marker)]
        (workspace / f"go{n}").touch()
        r = await process.result(30)
        assert r.exit_code == 0, r.output.text
        ended, _, _ = select.select(left, [], [], 0)  # a pidfd is readable once its process has exited
        assert len(ended) == len(left), f"{len(left) - len(ended)} of the command's processes still ran"
        for fd in left:
            os.close(fd)


# --- the workspace quota of a session ---------------------------------------------------------


async def test_a_sessions_quota_walks_only_after_changes_and_sees_every_kind(tmp_path, monkeypatch):
    from loopwire.harness.sandbox_limits import SandboxLimits
    from loopwire.harness.workspace_quota import SessionQuota

    walks = []
    measure = SessionQuota.measure
    monkeypatch.setattr(SessionQuota, "measure", lambda self: walks.append(1) or measure(self))
    box = probed(tmp_path, limits=SandboxLimits(workspace_quota=8 << 20, quota_interval=60))
    ws = tmp_path / "quota"
    ws.mkdir()
    session = SessionSandbox(box, ws)

    async def run(command: str) -> str:
        r = await (await session.start(command)).result(60)
        return r.output.text

    try:
        assert "quota" not in await run("mkdir -p src && echo one > src/a")
        walked = len(walks)
        for command in ("cat src/a", "ls -la src", "grep -r one .", "true"):  # nothing changes: no walk
            assert "quota" not in await run(command)
        assert len(walks) == walked, "a command that changed nothing walked the workspace"
        # Growth in a new directory, in an existing file, and a delete are each seen at the command's end.
        assert "over its quota" in await run("mkdir -p d/e && for i in 1 2 3 4 5 6 7 8 9; do "
                                             "head -c 1000000 /dev/zero > d/e/f$i; done")
        assert "over its quota" in await run("true")  # still over: said again, without a walk
        assert "quota" not in await run("rm -r d")
        assert "quota" not in await run("head -c 7000000 /dev/zero > src/big")
        assert "over its quota" in await run("head -c 2000000 /dev/zero >> src/big")
        assert "quota" not in await run("truncate -s 0 src/big")
    finally:
        await end(session)


async def test_a_sessions_quota_kills_a_command_growing_past_it(tmp_path):
    from loopwire.harness.sandbox_limits import SandboxLimits

    box = probed(tmp_path, limits=SandboxLimits(workspace_quota=8 << 20, quota_interval=0.1))
    ws = tmp_path / "quota"
    ws.mkdir()
    session = SessionSandbox(box, ws)
    try:
        many = await (await session.start("for i in $(seq 500); do head -c 1000000 /dev/zero > f$i; sleep 0.02; "
                                          "done; echo finished")).result(120)
        assert many.exit_code != 0 and "finished" not in many.output.text, (many, sorted(os.listdir(ws)))
        assert "[killed: the workspace grew to" in many.output.text and "past its quota of 8.00 MiB" in many.output.text
        assert not (ws / "f500").exists()
    finally:
        await end(session)


async def test_a_spare_that_cannot_confine_itself_is_reported_and_the_supervisor_serves_on(sandbox, workspace):
    """The supervisor makes spares concurrently, each reporting "ready" on a pipe of its own: one that fails
    (its workspace gone) fails its command with the reason, and the next spare made serves the next command."""
    from loopwire.harness.sandbox_limits import SandboxUnavailable

    session = sandbox.session(workspace)
    await (await session.start("true")).result(30)
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: len(supervisor._ready) == 2 and supervisor._asked == 0, "two spares made while idle")
    while supervisor._ready:
        supervisor._ready.popleft().drop()
    good = dict(supervisor._spec)
    supervisor._spec = {**good, "cwd": str(workspace / "gone")}
    with pytest.raises(SandboxUnavailable, match="cannot make the command's init"):
        await session.start("echo never")
    assert supervisor.alive
    await until(lambda: supervisor._asked == 0, "the other spares asked for answered")
    while supervisor._ready:  # those made for the bad workspace before it was put back
        supervisor._ready.popleft().drop()
    supervisor._spec = good
    r = await sandbox.run(workspace, "echo served", timeout=30)
    assert (r.exit_code, r.output.text) == (0, "served\n")
    assert session._supervisor is supervisor  # the same sandbox: it survived its spare's failure


@contextlib.asynccontextmanager
async def session_with_spares(tmp_path, workspace, shell_stays: bool):
    """A session of a box of its own (``shell_stays`` as given) that has run one command, and a wait for the
    two spares its sandbox makes while idle."""
    box = probed(tmp_path)
    box.shell_stays = shell_stays
    runs = SessionRuns(box)
    try:
        session = runs.session(workspace)
        await (await session.start("true")).result(30)
        supervisor = session._supervisor
        assert supervisor is not None

        async def idle() -> None:
            await until(lambda: len(supervisor._ready) == 2 and supervisor._asked == 0, "two spares made while idle")
        yield session, idle
    finally:
        await runs.close()


@pytest.mark.parametrize("shell_stays", [False, True])  # a spare's bash, or a shell's runner
async def test_a_command_cannot_reach_its_inits_status_pipe(tmp_path, workspace, shell_stays):
    """The init's descriptors are out of reach (it is not dumpable): a command that writes a status into every
    descriptor of its init (its bash's parent; its shell's parent when a shell's runner runs it) it can open is told
    ended only when it ends (here: at its timeout), with nothing left. (The shell's own status pipe: its own test.)"""
    marker = f"987.95{uuid.uuid4().int % 1000}"
    async with session_with_spares(tmp_path, workspace, shell_stays) as (session, idle):
        init = 'read -r _ _ _ pp _ < /proc/self/stat; '  # its bash's parent: the init, or the shell of its runner
        if shell_stays:
            init += 'read -r _ _ _ pp _ < /proc/$pp/stat; '  # the shell's parent
        await idle()
        reached = await init_of_text(session, init + 'for fd in /proc/$pp/fd/*; do : 2>&1 >> $fd && echo "opened $fd"; '
                                                       'done')
        assert "Permission denied" in reached and "opened" not in reached, reached
        forge = init + f'for fd in /proc/$pp/fd/*; do printf "0\\n!0\\n0 1\\n" > $fd; done 2>/dev/null; exec sleep {marker}'
        await idle()
        process = await session.start(forge)
        await until(lambda: processes.running(marker), "the forging command to run on")
        r = await process.result(1)
        assert (r.exit_code, r.timed_out) == (-9, True)
        assert not processes.running(marker)


@pytest.mark.parametrize("shell_stays", [False, True])
async def test_a_command_can_open_no_descriptor_of_the_sessions_other_processes(tmp_path, workspace, shell_stays):
    """Every other process of the session's sandbox is out of reach through /proc/<pid>/fd: the inits, the
    supervisor (it holds capabilities) and the bash waiting in each spare or the shell that stays (they run a
    copy of bash they cannot read, so they are not dumpable either). Through a waiting bash's script pipe, a
    command could otherwise feed the next command's shell what it likes, to run after its own end is told.
    (bwrap's own pid 1 has /dev/null and its output pipe, which the harness keeps, bounded, as the supervisor's
    diagnostics: nothing there is run.)"""
    async with session_with_spares(tmp_path, workspace, shell_stays) as (session, idle):
        await idle()
        probe = ('read -r me _ < /proc/self/stat; for fd in /proc/[0-9]*/fd/*; do p=${fd#/proc/}; '
                 'case ${p%%/*} in "$me"|1) continue;; esac; { : >> "$fd"; } 2>/dev/null && echo "opened $fd" && '
                 'ls -l "$fd"; done; echo checked')
        reached = await init_of_text(session, probe)
        assert reached.endswith("checked\n") and "opened" not in reached, reached


async def init_of_text(session, command: str) -> str:
    return (await (await session.start(command)).result(30)).output.text
