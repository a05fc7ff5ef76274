"""A shell that stays in a session's sandbox: back-to-back commands are sent to one waiting shell,
each run in a subshell of its own, with the guarantees of a spare of its own (nothing of a command
runs once its end is told, nothing it changed in its shell, /tmp or IPC reaches the next), and a
command that breaks the shell gets its result told as a sandbox of its own tells it."""

from __future__ import annotations

import asyncio
import signal

import pytest
from harness_testkit import until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from session_sandbox_testkit import SessionRuns, children, host_pid, probed

from loopwire.harness.sandbox import Sandbox

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def box(tmp_path):
    """One spare ahead: each command goes to the shell that stays (none other is made while it serves)."""
    box = probed(tmp_path)
    box.spares_ahead = 1
    return box


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


async def init_of(session, command: str) -> tuple[int, int, str]:
    process = await session.start(command)
    pid = host_pid(process._init)
    r = await process.result(30)
    return pid, r.exit_code, r.output.text


async def test_commands_back_to_back_go_to_the_shell_that_stays(sandbox, box, workspace):
    assert box.shell_stays
    session = sandbox.session(workspace)
    await (await session.start("true")).result(30)
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: supervisor._asked == 0, "the spares asked for to come")
    made = supervisor._ids
    ran = [await init_of(session, f"echo {n}; exit {n}") for n in range(5)]
    assert [(code, text) for _, code, text in ran] == [(n, f"{n}\n") for n in range(5)]
    assert len({pid for pid, _, _ in ran}) == 1  # one shell served them all
    assert supervisor._ids is made and not supervisor._waiting and supervisor._asked == 0  # no spare was made


STATE = ["cd /; export LEAK=1; alias ll=ls; f() { :; }; set -e -o pipefail; umask 077; ulimit -n 64; "
         "trap 'echo trapped' EXIT; shopt -s nullglob; LOCAL=2; echo set",
         "pwd; echo ${LEAK:-unset} ${LOCAL:-unset}; type ll f 2>&1 | head -2; echo $- $SHELLOPTS; umask; ulimit -n; "
         "trap; shopt nullglob; echo ${__lw_c:-no} ${__lw_n:-no}"]


async def test_what_a_command_changes_in_its_shell_never_reaches_the_next(sandbox, box, workspace):
    """cd, export, aliases, functions, options, umask, ulimit, traps: what a fresh `bash -c` gives the next."""
    session = sandbox.session(workspace)
    got = [await init_of(session, c) for c in STATE]
    assert got[0][0] == got[1][0]  # the same shell ran both
    own = [await box.run(workspace, c, timeout=30) for c in STATE]
    assert [(code, text) for _, code, text in got] == [(r.exit_code, r.output.text) for r in own]
    assert got[1][2].startswith(f"{workspace}\nunset unset\n")


BREAKERS = ["kill $$", "kill -9 $$", "kill -TERM $PPID; echo after", "exit 3", "exec echo replaced", "set -e; false; echo no",
            "echo 'unbalanced", "echo \"$(", "cat; echo read:$?", "exec >&- 2>&-; echo gone", "exec 3>&-; exec 0<&-; echo ok",
            "(sleep 30 &); exit 0",
            "ulimit -t 1; while :; do :; done"]


async def test_a_command_that_breaks_the_shell_is_told_as_on_a_sandbox_of_its_own(sandbox, box, workspace):
    session = sandbox.session(workspace)
    for command in BREAKERS:
        _, code, text = await init_of(session, command)
        own = await box.run(workspace, command, timeout=30)
        assert (text.replace("bash: eval: ", "bash: -c: "), code) == (own.output.text, own.exit_code), command
        _, code, text = await init_of(session, "echo next")  # the session goes on (a new shell if that one died)
        assert (code, text) == (0, "next\n"), command
    # The differences: $$ is the shell's, not the subshell's, so a command that ignores a signal and sends it to $$
    # ends with the shell, told as killed by it; and one that signals every process it can reaches its shell too (a
    # sandbox of its own has none). Either way the next command gets a new shell.
    for command, killed_by in (("trap '' TERM; kill $$; sleep 30", 143), ("kill -9 -1; sleep 30", 137)):
        assert (await init_of(session, command))[1] == killed_by
        assert (await init_of(session, "echo next"))[1:] == (0, "next\n")


async def test_tmp_shm_and_ipc_a_command_leaves_are_never_seen_by_the_next(sandbox, workspace):
    session = sandbox.session(workspace)
    pid, _, _ = await init_of(session, "true")
    for leave in ("touch /tmp/.x", "ln -s /nowhere /dev/shm/l", "ipcmk -M 4096 >/dev/null",
                  "python3 -c 'import os; os.mkfifo(\"/tmp/f\")'", f"mkdir -p {workspace}/../sibling-in-tmp || true"):
        await init_of(session, leave)
        _, code, text = await init_of(session, "ls -A /tmp /dev/shm; ipcs -m | grep -c '^0x' || true")
        assert (code, text) == (0, "/dev/shm:\n\n/tmp:\n" + _tmp_chain(workspace) + "0\n"), leave


def _tmp_chain(workspace) -> str:
    """What a fresh /tmp lists when the workspace is under /tmp: the directory leading to it."""
    parts = str(workspace).split("/")
    return f"{parts[2]}\n" if str(workspace).startswith("/tmp/") else ""


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=2048),
                      st.sampled_from([b"0 1\n", b"!137\n", b"0 1", b"\n0 0\n!9", b"\0" * 70000, b"x" * (1 << 20)]),
                      st.lists(st.sampled_from([b"0 1\n", b"!1\n", b"\xff\xfe", b"\0", b"\r\n", b"end"]),
                               max_size=40).map(b"".join)),
       code=st.integers(0, 255).filter(lambda code: code != 128 + signal.SIGXFSZ))
async def test_any_output_and_exit_code_come_back_whole(tmp_path_factory, data, code):
    """Output is never parsed (the end comes on a pipe of its own): any bytes, marker-like text, NULs, no
    trailing newline, more than a pipe holds; the shell serves on. (An exit of 128 + SIGXFSZ is told with a
    note on the file size limit after the output, as on a sandbox of its own.)"""
    root = tmp_path_factory.mktemp("any")
    box = Sandbox(output_limit=4 << 20)
    box.spares_ahead = 1  # (the shell that stays: see the box fixture)
    assert box.probe(root / "probe") == ""
    ws = root / "ws"
    ws.mkdir()
    (ws / "out.bin").write_bytes(data)
    runs = SessionRuns(box)
    try:
        session = runs.session(ws)
        pids = set()
        for _ in range(2):
            process = await session.start(f"cat out.bin; exit {code}")
            pids.add(host_pid(process._init))
            r = await process.result(30)
            assert r.exit_code == code
            assert bytes(process.buffer.head + process.buffer.tail) == data
        assert len(pids) == 1
    finally:
        await runs.close()


async def test_a_killed_command_ends_its_shell_and_the_next_gets_a_new_one(sandbox, workspace):
    session = sandbox.session(workspace)
    first, _, _ = await init_of(session, "true")
    process = await session.start("sleep 30")
    assert host_pid(process._init) == first
    r = await process.result(0.5)  # its timeout: the kill of its namespace, shell and all
    assert r.timed_out
    second, code, text = await init_of(session, "echo $$ $PPID")
    assert second != first and (code, text) == (0, "2 1\n")


async def test_a_killed_commands_end_is_told_once_nothing_of_it_runs(sandbox, workspace):
    """Its shell's status pipe ends with its init and its shell; the rest of its namespace dies after them."""
    import uuid

    import processes

    session = sandbox.session(workspace)
    await init_of(session, "true")
    for _ in range(10):
        marker = f"985.{uuid.uuid4().int % 100000}"
        process = await session.start(f"for i in $(seq 40); do sleep {marker} & done; echo go; exec sleep {marker}")
        await until(lambda process=process: b"go" in process.buffer.head, "the command to start its processes")
        process.kill()
        await process.result(30)
        assert not processes.running(marker)
    assert (await init_of(session, "echo next"))[1:] == (0, "next\n")


async def test_the_shell_sleeps_while_it_waits_for_a_commands_leftovers_to_be_reaped(sandbox, workspace):
    """Between its checks that nothing of the command is left, the shell sleeps (no process started for it):
    here its init, which reaps them, is stopped until the shell is seen asleep."""
    import os
    import signal

    session = sandbox.session(workspace)
    await init_of(session, "true")
    process = await session.start("sleep 1000 & until [ -e go ]; do sleep 0.01; done")
    init = host_pid(process._init)
    (shell,) = children(init)
    os.kill(init, signal.SIGSTOP)
    try:
        (workspace / "go").touch()
        await until(lambda: not children(shell), "the command's subshell to end")  # its leftovers are killed, unreaped

        def state() -> str:
            with open(f"/proc/{shell}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]

        await until(lambda: state() == "S", "the shell to sleep between its checks")
        assert process.running
    finally:
        os.kill(init, signal.SIGCONT)
    r = await process.result(30)
    assert r.exit_code == 0
    assert (await init_of(session, "echo next"))[1:] == (0, "next\n")


async def test_commands_at_once_each_get_a_shell(sandbox, workspace):
    session = sandbox.session(workspace)
    await init_of(session, "true")
    processes = [await session.start(f"until [ -e go ]; do sleep 0.01; done; echo {n}") for n in range(3)]
    assert len({host_pid(p._init) for p in processes}) == 3
    (workspace / "go").touch()
    results = await asyncio.gather(*(p.result(30) for p in processes))
    assert [(r.exit_code, r.output.text) for r in results] == [(0, f"{n}\n") for n in range(3)]


async def test_a_shell_that_died_idle_is_never_handed_a_command(sandbox, workspace):
    import os

    session = sandbox.session(workspace)
    first, _, _ = await init_of(session, "true")
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: any(host_pid(s.pidfd) == first for s in supervisor._ready), "the shell back among the ready")
    spare = next(s for s in supervisor._ready if host_pid(s.pidfd) == first)
    (shell,) = children(first)
    os.kill(shell, signal.SIGKILL)  # from outside, while it waits
    await until(lambda: not spare.alive(), "its init to tell the shell ended")
    second, code, text = await init_of(session, "echo ok")
    assert second != first and (code, text) == (0, "ok\n")


async def test_a_command_can_open_none_of_its_shells_pipes_to_forge_a_status_line(sandbox, workspace):
    """The shell runs a copy of bash it cannot read, so it is not dumpable: a command (same uid, no capability)
    opens none of its descriptors through /proc to write a status line, and the shell serves on. (Were one
    written, it would not be believed while the command runs: the runner must be gone first.)"""
    session = sandbox.session(workspace)
    first, _, _ = await init_of(session, "true")
    forge = ('read -r _ _ _ pp _ < /proc/self/stat; for fd in /proc/$pp/fd/*; do { printf "0\\n" > $fd; } '
             '2>/dev/null && echo "wrote $fd"; done; echo tried')
    assert (await init_of(session, forge))[1:] == (0, "tried\n")
    assert await init_of(session, "echo next") == (first, 0, "next\n")


@pytest.mark.parametrize(("said", "code", "reusable", "left"), [
    (b"0\n", 0, True, None), (b"3\n1\n", 3, True, b"1"),  # the next runner's line, read with it, is left for later
    (b"0\n!0\n", 0, True, b"!0"),  # a shell that serves once exits at its script's end: its init's line can follow
    (b"!7\n", 7, False, None), (b"", -9, False, None), (b"0 1\n", -9, False, None),
])
async def test_the_status_line_is_read_alone_even_when_the_inits_line_follows_it(said, code, reusable, left):
    import os

    from loopwire.harness.session_commands import ShellCommand, Spare

    loop = asyncio.get_running_loop()
    status_r, status_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(status_r, False)
    os.write(status_w, said)
    os.close(status_w)
    os.close(out_w)
    init = os.posix_spawn("/bin/true", ["true"], {})  # an init that exits (nothing said: the end waits for it)
    pidfd = os.pidfd_open(init)
    spare = Spare(pidfd, -1, out_r, status_r, -1)
    spare.command_gone = spare.namespace_ended = lambda: True  # no tree to look at: nothing runs beside the shell
    shell = ShellCommand(loop, spare, None, loop.create_future())
    try:
        assert await asyncio.wait_for(shell.wait(), 10) == code
        assert shell.reusable is reusable
        assert spare.line() == left
    finally:
        for fd in (status_r, out_r, pidfd):
            os.close(fd)
        os.waitpid(init, 0)


async def test_a_wakeup_of_the_output_reader_reads_once_and_the_status_reads_what_is_left():
    import fcntl
    import os

    from loopwire.harness.output import HeadTailBuffer
    from loopwire.harness.session_commands import ShellCommand, Spare

    loop = asyncio.get_running_loop()
    status_r, status_w = os.pipe()
    out_r, out_w = os.pipe()
    os.set_blocking(status_r, False)
    os.set_blocking(out_r, False)
    fcntl.fcntl(out_w, fcntl.F_SETPIPE_SZ, 1 << 20)  # as a command may make its output pipe
    chunk = 1 << 18  # one read's worth
    assert os.write(out_w, b"x" * 3 * chunk) == 3 * chunk
    spare = Spare(-1, -1, out_r, status_r, -1)
    spare.command_gone = lambda: True  # no init to look at: nothing runs beside the shell
    shell = ShellCommand(loop, spare, None, loop.create_future())
    buffer = HeadTailBuffer(1 << 22)
    try:
        closed = shell.pump(buffer)
        shell._drain()  # one wake-up of the reader: a writer keeping a big pipe full cannot hold the loop
        assert buffer.total == chunk
        os.write(status_w, b"0\n")
        assert await asyncio.wait_for(shell.wait(), 10) == 0
        assert closed.done() and buffer.total == 3 * chunk  # the end is told with all the command wrote
    finally:
        for fd in (status_r, status_w, out_r, out_w):
            os.close(fd)


async def test_the_next_commands_runner_is_forked_while_the_shell_waits(sandbox, workspace):
    """No fork between a command's arrival and its start: the idle shell's child, forked after the command before,
    reads and runs the next command."""
    session = sandbox.session(workspace)
    init, _, _ = await init_of(session, "true")
    supervisor = session._supervisor
    assert supervisor is not None
    await until(lambda: any(host_pid(s.pidfd) == init for s in supervisor._ready), "the shell back among the ready")
    (shell,) = children(init)
    (runner,) = children(shell)
    waiting = pid_in_its_namespace(runner)
    _, code, text = await init_of(session, "echo $BASHPID")
    assert (code, int(text)) == (0, waiting)


def pid_in_its_namespace(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("NSpid:")).split()[-1])


async def test_bytes_a_command_writes_into_its_shells_script_pipe_are_never_run(sandbox, workspace):
    """What a command writes into its shell's script pipe as if it were the next command never runs: the pipe is
    out of reach through /proc (the shell is not dumpable), and were bytes there after a command, the shell
    would end instead of reading them."""
    session = sandbox.session(workspace)
    first, _, _ = await init_of(session, "true")
    inject = ('read -r _ _ _ pp _ < /proc/self/stat; for fd in /proc/$pp/fd/*; do '  # its shell's read ends
              'flags=$(sed -n "s/^flags:\\s*//p" /proc/$pp/fdinfo/${fd##*/}); [ -n "$flags" ] && [ $((8#$flags & 3)) = 0 ] && '
              'printf -- "-%010dtouch injected" 14 > $fd; done 2>/dev/null; echo sent')
    assert (await init_of(session, inject))[1:] == (0, "sent\n")
    assert (await init_of(session, "echo next"))[1:] == (0, "next\n")
    assert not (workspace / "injected").exists()
