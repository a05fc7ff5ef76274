"""SWE-agent's own tools replay as what they are: not shell commands (a thought/action session records
them as `bash` calls), marked not runnable so they get their recorded output, and counted by the replay."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from loopwire import replay as replay_cli
from loopwire.common.recorded import load_session
from loopwire.harness import tools
from loopwire.harness.replay import SWE_AGENT_TOOLS, ReplayPlan, not_runnable
from loopwire.v1 import common_pb2, harness_pb2

DATA = Path(__file__).resolve().parents[3] / "data" / "sessions" / "swe-agent"


def bash(command: str) -> common_pb2.FunctionCall:
    return common_pb2.FunctionCall(call_id="c", name="bash", arguments=json.dumps({"command": command}))


def plan(run_tools: bool = True) -> ReplayPlan:
    return ReplayPlan(harness_pb2.ReplayScript(run_tools=run_tools))


def test_swe_agent_actions_in_bash_calls_are_not_run_as_shell_commands():
    for command in ('open "src/marshmallow/fields.py" 1474', "edit 'a' 'b'", "create reproduce.py", "submit",
                    "goto 10", "scroll_down", "search_dir TimeDelta src", "find_file fields.py src"):
        mapped = plan().map_call(bash(command))
        assert mapped.name == f"swe-agent {command.split()[0]}" and mapped.name not in tools.TOOLS, command
    for command in ("python reproduce.py", "ls -F", "rm reproduce.py", "opener x", "git diff"):
        assert plan().map_call(bash(command)).name == "shell", command


@given(st.sampled_from(sorted(SWE_AGENT_TOOLS)), st.dictionaries(st.text(max_size=5), st.text(max_size=5)))
def test_swe_agent_tool_calls_never_reach_a_harness_tool(tool, args):
    call = common_pb2.FunctionCall(call_id="c", name=tool, arguments=json.dumps(args))
    assert not_runnable(call) == tool
    assert plan().map_call(call).name not in tools.TOOLS
    assert plan(run_tools=False).map_call(call).name == tool  # recorded outputs only: names as recorded


def test_a_recorded_swe_agent_session_counts_its_own_tools():
    sessions = [load_session(p) for p in sorted(DATA.glob("*.traj"))]
    counts = replay_cli.swe_agent_calls(sessions)
    calls = [c for s in sessions for t in s.turns for c in t.calls]
    assert counts and sum(counts.values()) == sum(c.name != "bash" for c in calls)
    assert {"open", "edit", "submit", "find_file", "create"} <= set(counts)
