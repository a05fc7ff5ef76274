"""exec_js in a real session: the script calls the real tools (and found MCP-style deferred
tools), only its returned value enters the transcript, and the approval policy applies to
each call it makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_testkit import answer, call, harness_env, kinds, of

from loopwire.harness.tool_catalog import DeferredTool, Result
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = [pytest.mark.timeout(120)]

SCRIPT = """
const names = Array.from({length: 20}, (_, i) => `src/mod${i}.py`);
const texts = await Promise.all(names.map(path => tools.read_file({path})));
return names.filter((_, i) => /def target_symbol\\(/.test(texts[i]));
"""


def workspace(root: Path) -> Path:
    ws = root / "workspaces" / "tenant-t1" / "repo"
    (ws / "src").mkdir(parents=True)
    for i in range(20):
        body = "\n".join(f"def helper_{i}_{j}(x):\n    return x * {j}\n" for j in range(30))
        if i in (3, 11, 17):
            body += "\ndef target_symbol(a, b):\n    return a + b\n"
        (ws / "src" / f"mod{i}.py").write_text(body)
    return ws


def js(code: str, call_id: str) -> common_pb2.FunctionCall:
    return call("exec_js", json.dumps({"code": code}), call_id)


async def test_only_the_scripts_value_enters_the_transcript(tmp_path):
    workspace(tmp_path)
    async with harness_env(tmp_path, code_mode=True) as h:
        h.gateway.script = [answer("", js(SCRIPT, "j1")), answer("mod3, mod11 and mod17 define it.")]
        events = await h.start("which files define target_symbol?", workspace="repo")
        assert kinds(events)[-1] == "completed"
        assert "exec_js" in [t.name for t in h.gateway.requests[0].tools]
        stored = await h.session(of(events, "started")[0].session_id)
        outputs = [i.function_call_output for i in stored.items if i.WhichOneof("item") == "function_call_output"]
        assert len(outputs) == 1 and not outputs[0].is_error
        assert json.loads(outputs[0].output) == ["src/mod3.py", "src/mod11.py", "src/mod17.py"]
        # The 20 files were read (by the real read_file), but none of their text is in the transcript.
        assert "helper_0_0" not in stored.SerializeToString().decode("utf-8", "replace")
        assert len(h.gateway.requests) == 2


async def test_each_call_from_a_script_goes_through_the_approval_policy(tmp_path):
    mode = harness_pb2.ApprovalMode
    policy = harness_pb2.ApprovalPolicy(per_tool={"list": mode.APPROVAL_MODE_ALWAYS})
    code = """
    const out = {};
    try { await tools.list({}); out.list = 'ran'; } catch (e) { out.list = e.message; }
    try { await tools.shell({command: 'echo hi', network: true}); out.net = 'ran'; } catch (e) { out.net = e.message; }
    out.shell = await tools.shell({command: 'echo from-js'});
    try { await tools.exec_js({code: 'return 1'}); } catch (e) { out.nested = e.message; }
    return out;
    """
    async with harness_env(tmp_path, code_mode=True) as h:
        h.gateway.script = [answer("", js(code, "j1")), answer("ok")]
        events = await h.start("x", approval_policy=policy)
        assert kinds(events)[-1] == "completed"  # nothing suspended: a script cannot wait for a human
        out = json.loads(of(events, "tool_call_ended")[0].output)
        assert "needs a human's approval" in out["list"]
        assert "needs a human's approval" in out["net"]  # ON_REQUEST: network access asks
        assert "from-js" in out["shell"]
        assert "cannot be called from exec_js" in out["nested"]


async def test_found_deferred_tools_are_functions_in_the_script(tmp_path):
    async def weather(args: dict) -> Result:
        return Result(f"sunny in {args.get('city')}")

    tool = DeferredTool(common_pb2.Tool(name="get_weather", description="Current weather for a city.",
                                        parameters='{"type": "object"}'), weather)
    async with harness_env(tmp_path, code_mode=True, deferred_tools=[lambda: tool]) as h:
        h.gateway.script = [
            answer("", js("return typeof tools.get_weather", "j0")),
            answer("", call("tool_search", json.dumps({"query": "weather"}), "s1")),
            answer("", js("return await Promise.all(['Oslo', 'Lima'].map(city => tools.get_weather({city})))", "j1")),
            answer("done"),
        ]
        events = await h.start("x")
        ended = {e.call_id: e for e in of(events, "tool_call_ended")}
        assert ended["j0"].output == '"undefined"'  # not found yet: not callable
        assert json.loads(ended["j1"].output) == ["sunny in Oslo", "sunny in Lima"]
