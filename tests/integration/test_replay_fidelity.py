"""A SWE-agent thought/action trajectory replayed through the real mesh plays every recorded turn,
and `loopwire replay` of a session its harness ends early exits non-zero naming the turn."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from session_files import ROOT

from loopwire.common.recorded import load_session
from loopwire.replay import ModeResult, early_ends, replay_sessions

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow, pytest.mark.e2e]

THOUGHT_ACTION = ROOT / "tests" / "fixtures" / "swe-agent" / "thought_action_simple.traj"


@pytest.mark.parametrize("mode", ["stateful", "stateless"])
async def test_a_thought_action_trajectory_replays_every_turn(mesh, mode):
    history = json.loads(THOUGHT_ACTION.read_text())["history"]
    actions = [(m["action"], history[k + 1]["content"]) for k, m in enumerate(history) if m["role"] == "assistant"]
    session = load_session(THOUGHT_ACTION)
    events = []
    result = await replay_sessions(mesh.harness, [session], mode, 1, printer=events.append, api_key=mesh.api_key)
    [run] = result.runs
    assert run.completed, run.error
    assert len(run.turns) == len(actions) == 5
    assert [t.tool_calls for t in run.turns] == [1] * len(actions)
    ended = [e.tool_call_ended for e in events if e.WhichOneof("event") == "tool_call_ended"]
    assert [e.output for e in ended] == [observation for _, observation in actions]
    began = [e.tool_call_began.call for e in events if e.WhichOneof("event") == "tool_call_began"]
    assert [json.loads(c.arguments)["command"] for c in began] == [action for action, _ in actions]
    assert early_ends([session], [ModeResult(mode, [run])]) == []


def test_replay_cut_short_by_a_text_only_turn_exits_non_zero_naming_the_turn(tmp_path):
    doc = json.loads(THOUGHT_ACTION.read_text())
    second = [m for m in doc["history"] if m["role"] == "assistant"][1]
    second["action"] = ""  # no command: the harness takes turn 2 as the final answer
    cut = tmp_path / "cut.traj"
    cut.write_text(json.dumps(doc))
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "replay", str(cut), "--mode", "stateful"],
        capture_output=True, text=True, timeout=240, env={"COLUMNS": "200", "PATH": ""},
    )
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last == ("error: cut.traj (swe-agent): the replay ended after turn 2 of 5 recorded (stateful): "
                    "recorded turn 2 has no tool call, so the harness took it as the final answer")
