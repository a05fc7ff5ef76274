"""Replay fidelity without a mesh: a SWE-agent thought/action trajectory imports as tool calls,
a replay cut short is an error naming its turn, and every command skips the same bad traces."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from session_files import ROOT, session_path

from loopwire import analyze, replay
from loopwire.client import RunResult
from loopwire.common.recorded import load_session
from loopwire.v1 import harness_pb2

THOUGHT_ACTION = ROOT / "tests" / "fixtures" / "swe-agent" / "thought_action_simple.traj"


def raw_turns(path: Path) -> list[tuple[dict, dict]]:
    """(assistant message, the observation after it), read from the file itself."""
    history = json.loads(path.read_text())["history"]
    return [(m, history[k + 1]) for k, m in enumerate(history) if m["role"] == "assistant"]


def test_thought_action_turns_become_one_shell_call_each_with_the_observation_as_output():
    raw = raw_turns(THOUGHT_ACTION)
    assert raw and all(not m.get("tool_calls") and m["action"] for m, _ in raw)  # the format under test
    s = load_session(THOUGHT_ACTION)
    assert s.format == "swe-agent" and len(s.turns) == len(raw)
    assert [t.name for t in s.tools] == ["bash"]
    for turn, (message, observation) in zip(s.turns, raw, strict=True):
        assert observation["role"] == "user" and observation["message_type"] == "observation"
        assert turn.text == message["thought"]
        [call] = turn.calls
        assert call.name == "bash" and json.loads(call.arguments) == {"command": message["action"]}
        [output] = turn.tool_outputs
        assert output.call_id == call.call_id and output.output == observation["content"]
        assert [i.WhichOneof("item") for i in turn.followups] == ["function_call_output"]
    script = s.replay_script()
    assert all(len(t.output.function_calls) == 1 for t in script.turns)


def test_function_calling_swe_agent_turns_keep_their_recorded_calls():
    """Both fields present: the recorded tool_calls win, the action is not added as a second call."""
    path = session_path("function_calling_simple")
    raw = raw_turns(path)
    s = load_session(path)
    for turn, (message, _) in zip(s.turns, raw, strict=True):
        assert [c.call_id for c in turn.calls] == [tc["id"] for tc in message["tool_calls"]]


def run(played: int) -> RunResult:
    return RunResult(completed=True, turns=[harness_pb2.TurnProfile(turn=i + 1) for i in range(played)])


def test_a_replay_that_ends_before_its_recording_is_one_error_line_per_session():
    s = load_session(THOUGHT_ACTION)
    s.turns[1].calls.clear()  # a text-only turn in the middle: the harness takes it as the answer
    whole, cut = replay.ModeResult("stateful", [run(5)]), replay.ModeResult("stateless", [run(2)])
    assert replay.early_ends([s], [whole]) == []
    cut2 = replay.ModeResult("stateless-nocache", [run(2)])
    [line] = replay.early_ends([s], [whole, cut, cut2])
    assert line.startswith("thought_action_simple.traj (swe-agent): the replay ended after turn 2 of 5 recorded")
    assert "(stateless, stateless-nocache)" in line and "recorded turn 2 has no tool call" in line
    failed = RunResult(completed=False, error="boom", turns=[harness_pb2.TurnProfile()])
    assert not replay.ended_early(s, failed)  # reported as a failure already, not twice


def write_bad(directory: Path) -> Path:
    """A SWE-agent trajectory with a system prompt and a task but no assistant turn."""
    directory.mkdir(parents=True, exist_ok=True)
    history = json.loads(THOUGHT_ACTION.read_text())["history"][:2]
    bad = directory / "no_turns.traj"
    bad.write_text(json.dumps({"history": history}))
    return bad


def skip_lines(text: str) -> list[str]:
    """The skip lines of an output, each whole on its line however long its path."""
    return [line.rstrip() for line in text.splitlines() if line.startswith("skipped ")]


def test_replay_analyze_and_bench_replay_skip_a_trace_without_turns_with_the_same_line(tmp_path, capsys,
                                                                                          monkeypatch):
    traces = tmp_path / "traces"
    bad = write_bad(traces)
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    assert analyze.main(parser.parse_args([str(traces), "--json"])) == 1
    analyzed = capsys.readouterr()
    assert analyzed.out == ""  # --json output stays pure JSON

    parser = argparse.ArgumentParser()
    replay.add_arguments(parser)
    assert replay.main(parser.parse_args([str(traces)])) == 1  # nothing left: no mesh is started
    replayed = capsys.readouterr().out
    assert "no sessions to replay" in replayed

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_replay

    monkeypatch.setattr(sys, "argv", ["bench_replay.py", "--traces", str(traces), "--out", str(tmp_path / "out")])
    assert bench_replay.main() == 1  # was: ValueError: no assistant turns
    benched = capsys.readouterr().out
    assert "no sessions to replay" in benched

    expected = [f"skipped {bad}: no assistant turns, nothing to replay"]
    assert skip_lines(analyzed.err) == skip_lines(replayed) == skip_lines(benched) == expected


def test_the_shared_loader_keeps_the_good_sessions_next_to_a_bad_one(tmp_path, capsys):
    traces = tmp_path / "traces"
    write_bad(traces)
    (traces / THOUGHT_ACTION.name).write_bytes(THOUGHT_ACTION.read_bytes())
    loaded = replay.load_for_replay([str(traces)], 2, replay.wide_console())
    assert [(p.name, len(s.turns)) for p, s in loaded] == [(THOUGHT_ACTION.name, 2)]
    assert len(skip_lines(capsys.readouterr().out)) == 1
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    assert analyze.main(parser.parse_args([str(traces), "--json"])) == 0
    out = capsys.readouterr()
    assert [json.loads(line)["source"] for line in out.out.splitlines()] == [THOUGHT_ACTION.name]
    assert len(skip_lines(out.err)) == 1


@pytest.mark.parametrize("history", [[1, 2], [{"role": "assistant", "tool_calls": [7]}], "text"])
def test_a_malformed_history_is_a_value_error_naming_the_file(tmp_path, history):
    path = tmp_path / "odd.traj"
    path.write_text(json.dumps({"history": history}))
    with pytest.raises(ValueError, match=r"odd\.traj: malformed swe-agent session"):
        load_session(path)
