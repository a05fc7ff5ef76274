"""Interactive exec sessions (exec_command / write_stdin): a real program on a pty inside the
sandbox, typed into across calls, bounded per tenant, confined to its session, and never left
running when the session is cancelled or ends.

Every wait is on a condition (output seen, an exit, a marked process gone); the yield window
only bounds how long one call may wait."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import processes
import pytest
from harness_testkit import answer, call, harness_env, kinds, of, until

from loopwire.harness import exec_sessions, tools, workspace_files
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.sandbox import Sandbox
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = pytest.mark.timeout(120)
_RUNNING = re.compile(r"\[exec session (\d+) still running")


def make_box(root: Path, output_limit: int = 4096) -> Sandbox:
    box = Sandbox(output_limit=output_limit, workspace_root=root, uid_state=root / ".tenant-uids.json")
    assert box.probe(root / ".probe") == "", box.unavailable_reason
    return box


def context(box: Sandbox, root: Path, tenant: str = "tenant-a", name: str = "s1") -> tools.ToolContext:
    ws = workspace_files.tenant_workspace(root, tenant, "", name)
    return tools.ToolContext(ws, box, BackgroundTasks(), shell_timeout=10, background_after=5)


@pytest.fixture
def root(tmp_path):
    return tmp_path / "workspaces"


@pytest.fixture
def box(root):
    return make_box(root)


async def reaped(box: Sandbox) -> None:
    """Every exec session's process has been waited for (its slot is back)."""
    await until(lambda: not exec_sessions._bound(box).live, "every exec session to be reaped")


@pytest.fixture
async def ctx(box, root):
    c = context(box, root)
    yield c
    c.background.kill_all()
    await reaped(box)


async def run(ctx, name: str, **args: object) -> tools.ToolOutcome:
    return await tools.execute(common_pb2.FunctionCall(call_id="c", name=name, arguments=json.dumps(args)), ctx)


async def started(ctx, cmd: str) -> tuple[int, str]:
    out = await run(ctx, "exec_command", cmd=cmd, yield_time_ms=250)
    m = _RUNNING.search(out.output)
    assert m and not out.is_error, out.output
    return int(m.group(1)), out.output


async def read_until(ctx, session: int, seen: str, chars: str = "", within: float = 30) -> str:
    """Type ``chars``, then keep reading (empty writes) until ``seen`` is in the output."""
    out = await run(ctx, "write_stdin", session_id=session, chars=chars, yield_time_ms=250)
    text = out.output
    deadline = time.monotonic() + within
    while seen not in text and "exited with code" not in text:
        assert time.monotonic() < deadline, f"{seen!r} never came: {text!r}"
        text += (await run(ctx, "write_stdin", session_id=session, yield_time_ms=250)).output
    assert seen in text, text
    return text


def test_tools_are_in_the_full_set_only():
    full = [t.name for t in tools.tool_list()]
    assert "exec_command" in full and "write_stdin" in full
    from loopwire.harness.config import HarnessConfig

    assert [t.name for t in tools.tool_list(HarnessConfig(tool_set="shell"), harness_pb2.StartTask())] == ["shell"]


async def test_a_python_repl_answers_typed_input_and_ends_with_its_exit_code(ctx):
    session, _ = await started(ctx, "python3 -q")
    assert "\n2\n" in await read_until(ctx, session, "\n2\n", "1+1\n")
    # Ctrl-C reaches the REPL as SIGINT through the pty (it lives on), `exit()` ends it.
    assert "KeyboardInterrupt" in await read_until(ctx, session, "KeyboardInterrupt", "\u0003")
    assert "[exec session 1 exited with code 0]" in await read_until(ctx, session, "exited", "exit(0)\n")
    out = await run(ctx, "write_stdin", session_id=session, chars="1\n")
    assert out.is_error and "no exec session 1" in out.output  # it ended: its id is gone


async def test_ctrl_c_ends_a_program_and_a_quick_command_returns_its_exit_code(ctx):
    session, _ = await started(ctx, "tty; sleep 987.501")
    text = await read_until(ctx, session, "exited", "\u0003")
    assert "exited with code 130" in text
    assert await processes.ended("987.501")
    # One that ends within the window answers its exit code and gets no session.
    out = await run(ctx, "exec_command", cmd="tty; echo made; exit 3", yield_time_ms=30000)
    assert out.is_error and out.exit_code == 3 and out.output.endswith("[exit code 3]")
    assert "/dev/pts/" in out.output and "made" in out.output and "exec session" not in out.output
    assert not ctx.background.exec.sessions


async def test_output_is_capped_per_read(root):
    box = make_box(root, output_limit=2048)
    ctx = context(box, root)
    try:
        session, first = await started(ctx, "python3 -c \"print('x' * 100000, flush=True); print('end-of-it', "
                                             "flush=True); import time; time.sleep(987.502)\"")
        text = first if "end-of-it" in first else await read_until(ctx, session, "end-of-it")
        assert "cut from the middle" in text
        # Each read holds at most the limit's bytes plus the notes, however much the program printed.
        assert len(text.encode()) < 2 * 2048 + 1024
        # A call returns once the output settles: a pause on a busy machine may split it over reads.
        reads = [await run(ctx, "exec_command", cmd="head -c 50000 /dev/zero | tr '\\0' y; exit 0", yield_time_ms=30000)]
        while m := _RUNNING.search(reads[-1].output):
            reads.append(await run(ctx, "write_stdin", session_id=int(m.group(1)), yield_time_ms=30000))
        assert any(r.truncated for r in reads) and reads[-1].exit_code == 0
        assert "cut from the middle" in "".join(r.output for r in reads)
    finally:
        ctx.background.kill_all()
    assert await processes.ended("987.502")
    await reaped(box)


async def test_sessions_are_bounded_per_tenant_and_confined_to_their_session(box, root):
    exec_sessions.configure(box, 2)
    a, a2 = context(box, root, "tenant-a", "s1"), context(box, root, "tenant-a", "s2")
    b = context(box, root, "tenant-b")
    try:
        first, _ = await started(a, "python3 -q")
        await started(a2, "sleep 987.511")  # the bound counts over all of a tenant's sessions
        out = await run(a, "exec_command", cmd="sleep 987.512")
        assert out.is_error and "at most 2" in out.output
        # Another session (of another tenant) cannot reach A's exec session: ids are its session's own.
        out = await run(b, "write_stdin", session_id=first, chars="print('from b')\n")
        assert out.is_error and f"no exec session {first} in this session" in out.output
        await started(b, "sleep 987.513")  # another tenant has its own bound
        text = await read_until(a, first, "from a", "print('from a')\n")
        assert "from b" not in text
        # An ended session gives its slot back.
        await read_until(a, first, "exited", "exit()\n")
        await until(lambda: exec_sessions._bound(box).live.get(exec_sessions.tenant_of(box, a.workspace)) == 1,
                    "the slot to come back")
        await started(a, "sleep 987.514")
    finally:
        for c in (a, a2, b):
            c.background.kill_all()
    for marker in ("987.511", "987.512", "987.513", "987.514"):
        assert await processes.ended(marker), marker
    await reaped(box)


async def test_unknown_and_lost_session_ids_explain_themselves(ctx):
    out = await run(ctx, "write_stdin", session_id=7, chars="x")
    assert out.is_error and "no exec session 7" in out.output
    # A restarted harness: the transcript names sessions nobody runs any more.
    texts = ["...\n[exec session 3 still running after 1s; write_stdin with session_id 3 to type into it]",
             "...\n[exec session 2 still running after 1s; ...]", "done\n[exec session 2 exited with code 0]"]
    assert ctx.background.adopt(texts) == ["exec session 3"]
    assert ctx.background.adopt(texts + ["[background command exec session 3 was lost: ...]"]) == []
    out = await run(ctx, "write_stdin", session_id=3, chars="x")
    assert out.is_error and "exec session 3 was lost when the harness restarted" in out.output
    session, _ = await started(ctx, "sleep 987.521")
    assert session == 4  # numbered after every id the transcript names
    ctx.background.kill_all()
    assert await processes.ended("987.521")


def exec_call(cmd: str, **extra: object) -> common_pb2.FunctionCall:
    return call("exec_command", json.dumps({"cmd": cmd, "yield_time_ms": 250, **extra}))


async def test_cancel_and_the_end_of_a_session_kill_its_exec_sessions(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", exec_call("sleep 987.531")),
                            answer("", call("shell", json.dumps({"command": "sleep 987.532"})))]
        requests: asyncio.Queue = asyncio.Queue()
        await requests.put(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="cancel me")))

        async def request_stream():
            while (r := await requests.get()) is not None:
                yield r

        events = []
        async for event in h.stub.Run(request_stream()):
            events.append(event)
            if event.WhichOneof("event") == "tool_call_began" and event.tool_call_began.call.name == "shell":
                await requests.put(harness_pb2.RunRequest(cancel=harness_pb2.CancelRun(session_id=event.session_id)))
                await requests.put(None)
        assert of(events, "failed")[0].error.code == common_pb2.ERROR_CODE_CANCELLED
        assert "exec session 1 still running" in of(events, "tool_call_ended")[0].output
        assert await processes.ended("987.531") and await processes.ended("987.532")

        h.gateway.script = [answer("", exec_call("sleep 987.533")), answer("all done")]
        events = await h.start("end me")
        assert kinds(events)[-1] == "completed"
        assert await processes.ended("987.533")
        await reaped(h.service.sandbox)


async def test_an_exec_session_outlives_an_approval_wait(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [
            answer("", exec_call("python3 -q")),
            answer("", call("edit_file", json.dumps({"path": "notes.txt", "search": "", "replace": "x"}))),
            answer("", call("write_stdin", json.dumps({"session_id": 1, "chars": "6*7\nexit()\n",
                                                       "yield_time_ms": 30000}))),
            answer("done"),
        ]
        events = await h.start("repl, edit, repl", approval_policy=harness_pb2.ApprovalPolicy(
            per_tool={"edit_file": harness_pb2.APPROVAL_MODE_ALWAYS}))
        assert kinds(events)[-1] == "approval_requested"
        assert any(p.exec.live for p in h.service.parked.values())  # parked with the session, still running
        events = await h.run(harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(
            approval_id=of(events, "approval_requested")[0].approval_id, approved=True)))
        assert kinds(events)[-1] == "completed"
        typed = [e.output for e in of(events, "tool_call_ended") if e.name == "write_stdin"]
        assert len(typed) == 1 and "42" in typed[0] and "exec session 1 exited with code 0" in typed[0], typed
        await reaped(h.service.sandbox)


def test_a_policy_on_shell_holds_for_the_pty_tools_unless_they_are_named():
    from loopwire.harness import approvals

    always = harness_pb2.ApprovalMode.APPROVAL_MODE_ALWAYS
    never = harness_pb2.ApprovalMode.APPROVAL_MODE_NEVER
    shell_always = harness_pb2.ApprovalPolicy(per_tool={"shell": always})
    for tool in ("exec_command", "write_stdin"):
        call = common_pb2.FunctionCall(name=tool, arguments="{}")
        assert approvals.verdict(shell_always, call) is approvals.Verdict.ASK
        named = harness_pb2.ApprovalPolicy(per_tool={"shell": always, tool: never})
        assert approvals.verdict(named, call) is approvals.Verdict.RUN
    assert approvals.verdict(shell_always, common_pb2.FunctionCall(name="read_file", arguments="{}")) \
        is approvals.Verdict.RUN
