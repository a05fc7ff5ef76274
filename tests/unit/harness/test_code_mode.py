"""exec_js: isolation, limits, readable errors, and tool calls that run in parallel (shown by
overlapping call intervals, never by wall-clock time)."""

from __future__ import annotations

import asyncio
import json

import pytest

from loopwire.harness.code_mode import run_js
from loopwire.harness.config import HarnessConfig
from loopwire.harness.extensions import Extensions
from loopwire.harness.tool_catalog import Result
from loopwire.v1 import harness_pb2

pytestmark = pytest.mark.timeout(120)


async def echo(name: str, args: dict) -> Result:
    return Result(f"{name} {json.dumps(args, sort_keys=True)}")


async def test_the_returned_value_comes_back_as_json():
    run = await run_js("const a = await tools.t({x: 1}); return {a, n: [1, 2]};", ["t"], echo)
    assert not run.result.is_error
    assert json.loads(run.result.output) == {"a": 't {"x": 1}', "n": [1, 2]}


async def test_the_isolate_has_no_require_network_process_or_timers():
    code = ("return [typeof require, typeof fetch, typeof process, typeof setTimeout, typeof clearTimeout, "
            "typeof XMLHttpRequest, typeof import_, typeof Deno, typeof Bun, "
            "typeof (globalThis.Atomics && Atomics.waitAsync), typeof __timer_manager];")
    run = await run_js(code.replace("import_", "globalThis.importScripts"), [], echo)
    assert json.loads(run.result.output) == ["undefined"] * 11
    dynamic = await run_js("const m = await import('fs'); return 1;", [], echo)
    assert dynamic.result.is_error


async def test_nothing_survives_between_scripts():
    first = await run_js("globalThis.secret = 42; tools.extra = 1; return secret;", ["t"], echo)
    assert first.result.output == "42"
    second = await run_js("return [typeof secret, typeof tools.extra];", ["t"], echo)
    assert json.loads(second.result.output) == ["undefined", "undefined"]


async def test_an_endless_loop_is_stopped_at_the_time_limit():
    run = await run_js("while (true) {}", [], echo, timeout_s=1.0)
    assert run.result.is_error and "time limit of 1s" in run.result.output


async def test_a_script_that_hogs_memory_is_stopped_at_the_memory_limit():
    run = await run_js("const a = []; while (true) a.push(new Array(1e6).fill(1.5));", [], echo,
                       timeout_s=60, memory_bytes=64 << 20)
    assert run.result.is_error and "memory limit of 64 MiB" in run.result.output


async def test_the_configured_limits_are_the_ones_a_session_runs_scripts_under():
    """HarnessConfig.js_memory_mb / js_timeout (--js-memory-mb, --js-timeout-s) reach exec_js."""
    def exec_js(**limits: float) -> Extensions:
        return Extensions(HarnessConfig(code_mode=True, **limits), harness_pb2.StartTask(task="t"), [])  # type: ignore[arg-type]

    hog = {"code": "const a = []; while (true) a.push(new Array(1e6).fill(1.5));"}
    small = await exec_js(js_memory_mb=24).execute("exec_js", hog, None)  # type: ignore[arg-type]
    assert small.is_error and small.output == "error: the script went over its memory limit of 24 MiB and was stopped"
    endless = await exec_js(js_timeout=0.5).execute("exec_js", {"code": "while (true) {}"}, None)  # type: ignore[arg-type]
    assert endless.is_error and "time limit of 0.5s" in endless.output
    fits = await exec_js(js_memory_mb=24).execute("exec_js", {"code": "return new Array(1e5).fill(1).length;"},
                                                  None)  # type: ignore[arg-type]
    assert fits == Result("100000")  # under the limit a script runs


@pytest.mark.parametrize("code,expected", [
    ("throw new Error('kaput')", "Error: kaput"),
    ("return 10n", "not JSON-serializable"),
    ("const o = {}; o.self = o; return o", "not JSON-serializable"),
    ("this is not javascript (", "SyntaxError"),
    ("return await tools.missing({})", "tools.missing is not a function"),
    ("return await tools.fails({})", "error: it broke"),
])
async def test_bad_scripts_come_back_as_readable_errors(code, expected):
    async def tool(name: str, args: dict) -> Result:
        return Result("error: it broke", True)

    run = await run_js(code, ["fails"], tool)
    assert run.result.is_error and expected in run.result.output
    assert run.result.output.startswith("error: ")


async def test_undefined_and_console_output():
    run = await run_js("console.log('step', {n: 1}); return undefined;", [], echo)
    assert run.result.output == 'undefined (the script returned nothing)\n[console]\nstep {"n":1}'


async def test_a_failed_tool_call_can_be_caught_by_the_script():
    async def tool(name: str, args: dict) -> Result:
        return Result("error: no such file", True)

    run = await run_js("try { await tools.read({}); } catch (e) { return 'handled: ' + e.message; }", ["read"], tool)
    assert run.result.output == '"handled: error: no such file"'


async def _barrier_tool(n: int):  # noqa: ANN202
    """A tool whose calls each wait until `n` calls have started (or give up after 5 s)."""
    started = 0
    everyone = asyncio.Event()

    async def tool(name: str, args: dict) -> Result:
        nonlocal started
        started += 1
        if started == n:
            everyone.set()
        try:
            await asyncio.wait_for(everyone.wait(), 5)
        except TimeoutError:
            return Result("alone", False)
        return Result("together", False)

    return tool


async def test_promise_all_runs_tool_calls_in_parallel():
    tool = await _barrier_tool(5)
    run = await run_js("return await Promise.all([1,2,3,4,5].map(i => tools.wait({i})));", ["wait"], tool)
    assert json.loads(run.result.output) == ["together"] * 5
    starts, ends = [c[1] for c in run.calls], [c[2] for c in run.calls]
    assert len(run.calls) == 5 and max(starts) < min(ends)  # every interval overlaps every other


async def test_awaiting_one_call_after_another_runs_them_in_sequence():
    tool = await _barrier_tool(2)
    run = await run_js("const a = await tools.wait({}); const b = await tools.wait({}); return [a, b];",
                       ["wait"], tool)
    assert json.loads(run.result.output) == ["alone", "together"]
    (_, s1, e1), (_, s2, _e2) = run.calls
    assert e1 <= s2  # the second started after the first ended
