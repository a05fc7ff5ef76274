"""`exec_command` and `write_stdin` return once the program's output has settled or it exited:
the yield window is the longest a call waits, not how long it waits while the program lives.

Each call here gets the largest window (30 s) and must come back well inside it, bounded by a
deadline far from any timing the machine could reach (no wall-clock assert decides an outcome:
a call that waits out its window is what fails)."""

from __future__ import annotations

import asyncio
import re

import pytest
from test_exec_sessions import box, context, ctx, root, run  # noqa: F401 - fixtures

from loopwire.harness import exec_sessions

pytestmark = pytest.mark.timeout(120)
WINDOW_MS = exec_sessions.MAX_YIELD_MS
BOUND_S = WINDOW_MS / 1000 / 2  # a call that waits out its window runs past this
_RUNNING = re.compile(r"\[exec session (\d+) still running")


async def call(ctx, name: str, **args: object) -> str:  # noqa: F811 - ctx is the fixture's
    async with asyncio.timeout(BOUND_S):
        out = await run(ctx, name, yield_time_ms=WINDOW_MS, **args)
    assert not out.is_error or "exited with code" in out.output or "[exit code" in out.output, out.output
    return out.output


async def test_a_repl_answer_comes_back_without_waiting_out_the_window(ctx):  # noqa: F811
    text = await call(ctx, "exec_command", cmd="python3 -q")
    while ">>> " not in text:  # the prompt, once the interpreter is up
        assert _RUNNING.search(text), text
        text += await call(ctx, "write_stdin", session_id=1, chars="")
    session = int(_RUNNING.findall(text)[-1])
    answer = await call(ctx, "write_stdin", session_id=session, chars="1+1\n")
    while "\n2\n" not in answer.replace("\r\n", "\n"):  # the echo may settle first
        assert _RUNNING.search(answer), answer
        answer += await call(ctx, "write_stdin", session_id=session, chars="")
    assert "(waited at most 30s)" in answer
    end = await call(ctx, "write_stdin", session_id=session, chars="exit(4)\n")
    while "exited with code" not in end:
        end += await call(ctx, "write_stdin", session_id=session, chars="")
    assert f"[exec session {session} exited with code 4]" in end


async def test_a_silent_program_that_exits_returns_its_exit_code(ctx):  # noqa: F811
    text = await call(ctx, "exec_command", cmd="sleep 0.2; exit 5")
    assert text.endswith("[exit code 5]"), text
