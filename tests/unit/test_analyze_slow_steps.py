"""`loopwire analyze`: the slowest tool calls with what the model said before each, and the lints.

The references are the raw JSON of the traces, read here directly: a mini-swe-agent call took its
tool message's timestamp minus the assistant message's before it; a SWE-agent step its
trajectory entry's execution_time."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from rich.console import Console

from loopwire import analyze
from loopwire.analyze_lints import LINTS, shorten
from loopwire.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
MINI = ROOT / "tests" / "fixtures" / "mini-swe-agent" / "pvlib__pvlib-python-1854.head.traj.json"
SWE_AGENT = ROOT / "data" / "sessions" / "swe-agent" / "marshmallow-1867.function_calling_replace.traj"
THOUGHT_ACTION = ROOT / "tests" / "fixtures" / "swe-agent" / "thought_action_simple.traj"


def run(capsys, monkeypatch, *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    analyze.add_arguments(parser)
    monkeypatch.setattr(analyze, "wide_console", lambda: Console(width=1000))  # no wrapped cells
    rc = analyze.main(parser.parse_args([str(a) for a in argv]))
    return rc, capsys.readouterr().out


def run_json(capsys, monkeypatch, *argv: str) -> list[dict]:
    rc, out = run(capsys, monkeypatch, *argv, "--json")
    assert rc == 0
    return [json.loads(line) for line in out.splitlines()]


def mini_reference(path: Path) -> list[dict]:
    """Every answered tool call of a mini-swe-agent file, from its raw messages."""
    messages = json.loads(path.read_text())["messages"]
    calls, prev, asked = [], None, {}
    for i, m in enumerate(messages):
        ts = (m.get("extra") or {}).get("timestamp")
        if m["role"] == "assistant":
            for tc in m.get("tool_calls") or []:
                asked[tc["id"]] = (i, json.loads(tc["function"]["arguments"])["command"], m["content"])
            prev = ts
        elif m["role"] == "tool":
            i_asked, command, content = asked[m["tool_call_id"]]
            calls.append({"where": f"messages[{i_asked}]", "command": command, "reasoning": content,
                          "seconds": ts - prev, "output_chars": len(m["content"])})
            prev = ts
    return calls


def table_rows(out: str, title: str) -> list[list[str]]:
    lines = out[out.index(title):].splitlines()
    end = next(k for k, line in enumerate(lines) if line.lstrip().startswith("└"))
    return [[c.strip() for c in line.split("│")[1:-1]] for line in lines[:end] if line.lstrip().startswith("│")]


def test_the_slowest_calls_come_out_longest_first_with_the_text_before_them(capsys, monkeypatch):
    reference = sorted(mini_reference(MINI), key=lambda c: -c["seconds"])[:5]
    assert reference[0]["command"] == "pip install pandas scipy -q"  # the fixture is what it says
    (session,) = run_json(capsys, monkeypatch, MINI, "--slowest", "5")
    got = session["slowest"]
    assert [c["command"] for c in got] == [c["command"] for c in reference]
    assert [c["where"] for c in got] == [c["where"] for c in reference]
    assert [c["reasoning"] for c in got] == [c["reasoning"] for c in reference]
    assert [c["output_chars"] for c in got] == [c["output_chars"] for c in reference]
    assert [c["seconds"] for c in got] == pytest.approx([c["seconds"] for c in reference], abs=1e-6)
    assert session["timing"] == {"tool_calls": 15, "timed": 15, "note": None}


def test_swe_agent_steps_are_timed_from_the_trajectory(capsys, monkeypatch):
    raw = json.loads(SWE_AGENT.read_text())
    turns = [(i, m) for i, m in enumerate(raw["history"]) if m["role"] == "assistant"]
    reference = sorted(
        ({"seconds": float(t["execution_time"]), "reasoning": m["content"], "where": f"history[{i}]"}
         for (i, m), t in zip(turns, raw["trajectory"], strict=True)),
        key=lambda c: -c["seconds"])[:3]
    (session,) = run_json(capsys, monkeypatch, SWE_AGENT, "--slowest", "3")
    got = session["slowest"]
    assert [c["where"] for c in got] == [c["where"] for c in reference]
    assert [c["reasoning"] for c in got] == [c["reasoning"] for c in reference]
    assert [c["seconds"] for c in got] == pytest.approx([c["seconds"] for c in reference])
    assert all(c["model_seconds"] is None for c in got)  # a .traj records no model time


def test_json_matches_the_tables(capsys, monkeypatch):
    (session,) = run_json(capsys, monkeypatch, MINI, "--slowest", "4")
    rc, out = run(capsys, monkeypatch, MINI, "--slowest", "4")
    assert rc == 0
    rows = table_rows(out, "slowest tool calls")
    assert len(rows) == 4 == len(session["slowest"])
    for k, (row, c) in enumerate(zip(rows, session["slowest"], strict=True), 1):
        assert row == [str(k), f"{c['seconds']:.2f}", f"{c['model_seconds']:.2f}",
                       f"{MINI.name} turn {c['turn']} ({c['where']})", shorten(c["command"], 100),
                       shorten(c["reasoning"])]
    lints = {row[0]: row[1] for row in table_rows(out, "red flags") if row[0]}
    assert lints == {lint["name"]: str(lint["count"]) for lint in session["lints"]}
    assert list(lints) == list(LINTS)


def test_the_fixture_flags_its_large_output_and_repeats(capsys, monkeypatch):
    (session,) = run_json(capsys, monkeypatch, MINI)
    calls = mini_reference(MINI)
    lints = {lint["name"]: lint for lint in session["lints"]}
    big = [c for c in calls if c["output_chars"] > 10_000]
    assert lints["large-output"]["count"] == len(big) == session["large_outputs"] == 1
    assert lints["large-output"]["example"]["where"] == big[0]["where"]
    commands = [c["command"] for c in calls]
    repeats = len(commands) - len(set(commands))
    assert lints["repeated-command"]["count"] == repeats == session["repeated_commands"] == 3
    assert lints["repeated-command"]["example"]["command"] == "python reproduce_issue.py"
    assert lints["sleep-poll"]["count"] == lints["process-storm"]["count"] == lints["shell-rc"]["count"] == 0
    (low,) = run_json(capsys, monkeypatch, MINI, "--large-output", "2000")
    assert {lint["name"]: lint["count"] for lint in low["lints"]}["large-output"] == sum(
        c["output_chars"] > 2000 for c in calls)


def write_mini(path: Path, steps: list[tuple[str, str, float]]) -> Path:
    """A mini-swe-agent file: one timed call per (command, output, seconds), then a final answer."""
    messages: list[dict] = [{"role": "system", "content": "You are a helpful assistant."},
                            {"role": "user", "content": "fix the bug"}]
    t = 1_775_000_000.0
    for k, (command, output, seconds) in enumerate(steps):
        t += 2.0
        messages.append({"role": "assistant", "content": f"THOUGHT: step {k}", "extra": {"timestamp": t},
                         "tool_calls": [{"id": f"call_{k}", "type": "function", "function": {
                             "name": "bash", "arguments": json.dumps({"command": command})}}]})
        t += seconds
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": output, "extra": {"timestamp": t}})
    messages.append({"role": "assistant", "content": "done"})
    path.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "messages": messages}))
    return path


FIRST = ("git status", "clean", 0.2)  # every crafted session starts with a clean call, so turn 2 is the first flag
CRAFTED = {
    "sleep-poll": (
        ["sleep 30", "until [ -f out.log ]; do sleep 2; done", "while true; do curl -s :8000 && break; done",
         "watch -n 1 nvidia-smi", "python server.py & tail -f server.log"],
        ["python -c 'import time'", "grep -rn watchdog src", "cat logs/tail.txt", "ls sleepy/"],
    ),
    "process-storm": (
        ["find . -name '*.py' -exec grep -l foo {} \\;", "ls *.txt | xargs -I{} cp {} /tmp/",
         "cat files | xargs -n 1 wc -l", "git ls-files | while read f; do wc -l \"$f\"; done"],
        ["find . -name '*.py' -exec grep -l foo {} +", "find . -name '*.py' | xargs grep -l foo",
         "grep -rl foo ."],
    ),
    "shell-rc": (
        ["source ~/.bashrc && pytest -q", "conda activate py311 && python -m pytest", ". ~/.profile; make"],
        ["pytest -q", "python -m pytest tests/", "make"],
    ),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_each_command_lint_fires_on_a_crafted_example_and_not_on_a_clean_one(tmp_path, capsys, monkeypatch, name):
    bad, clean = CRAFTED[name]
    flagged = write_mini(tmp_path / "bad.traj.json", [FIRST] + [(c, "ok", 0.3) for c in bad])
    fine = write_mini(tmp_path / "clean.traj.json", [FIRST] + [(c, "ok", 0.3) for c in clean])
    got_bad, got_clean = run_json(capsys, monkeypatch, flagged, fine)
    lint = next(lint for lint in got_bad["lints"] if lint["name"] == name)
    assert lint["count"] == len(bad)
    assert lint["example"] == {"turn": 2, "where": "messages[4]", "command": bad[0]}
    assert lint["seconds"] == pytest.approx(0.3 * len(bad))
    assert next(lint for lint in got_clean["lints"] if lint["name"] == name)["count"] == 0


def test_sleep_poll_adds_up_the_sleeps_and_agrees_with_the_profile(tmp_path, capsys, monkeypatch):
    path = write_mini(tmp_path / "poll.traj.json", [("sleep 5 && cat out", "x", 5.1), ("sleep 2.5", "", 2.5)])
    (session,) = run_json(capsys, monkeypatch, path)
    lint = session["lints"][list(LINTS).index("sleep-poll")]
    assert lint["count"] == session["sleep_poll_commands"] == 2
    assert lint["detail"] == "explicit sleeps add up to 7.5 s"


def test_large_output_fires_over_the_limit_only(tmp_path, capsys, monkeypatch):
    path = write_mini(tmp_path / "cat.traj.json", [FIRST, ("cat huge.log", "x" * 20_000, 0.4),
                                                    ("cat small.log", "x" * 9_000, 0.2)])
    (session,) = run_json(capsys, monkeypatch, path)
    lint = session["lints"][list(LINTS).index("large-output")]
    assert (lint["count"], lint["example"]["command"]) == (1, "cat huge.log")
    assert lint["detail"] == "largest 20000 chars, over 10000"
    clean = write_mini(tmp_path / "small.traj.json", [FIRST, ("cat small.log", "x" * 9_000, 0.2)])
    (session,) = run_json(capsys, monkeypatch, clean)
    assert session["lints"][list(LINTS).index("large-output")]["count"] == 0


def test_repeated_command_counts_each_rerun_and_those_that_changed_nothing(tmp_path, capsys, monkeypatch):
    path = write_mini(tmp_path / "rep.traj.json", [FIRST, ("pytest -q", "1 failed", 1.0), ("pytest -q", "1 failed", 1.0),
                                                    ("sed -i s/a/b/ x.py", "", 0.1), ("pytest -q", "1 passed", 1.0)])
    (session,) = run_json(capsys, monkeypatch, path)
    lint = session["lints"][list(LINTS).index("repeated-command")]
    assert (lint["count"], lint["example"]["where"]) == (2, "messages[6]")  # the first rerun
    assert lint["detail"] == "1 of them got the same output as the time before"
    clean = write_mini(tmp_path / "once.traj.json", [FIRST, ("pytest -q", "1 failed", 1.0), ("pytest -x", "", 1.0)])
    (session,) = run_json(capsys, monkeypatch, clean)
    assert session["lints"][list(LINTS).index("repeated-command")]["count"] == 0


def test_a_slow_shell_start_shows_in_trivial_commands(tmp_path, capsys, monkeypatch):
    trivial = ["ls", "pwd", "echo hi", "cat setup.cfg", "cd /testbed && ls -la"]
    slow = write_mini(tmp_path / "slow.traj.json", [("pip install -e .", "ok", 9.0)] + [(c, "ok", 1.4) for c in trivial])
    fast = write_mini(tmp_path / "fast.traj.json", [("pip install -e .", "ok", 9.0)] + [(c, "ok", 0.1) for c in trivial])
    got_slow, got_fast = run_json(capsys, monkeypatch, slow, fast)
    lint = got_slow["lints"][list(LINTS).index("shell-rc")]
    assert (lint["count"], lint["example"]["command"]) == (len(trivial), "ls")
    assert "median 1.40 s" in lint["detail"]
    assert got_fast["lints"][list(LINTS).index("shell-rc")]["count"] == 0


def test_a_trace_without_timing_says_so(tmp_path, capsys, monkeypatch):
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps([
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "assistant", "content": "One file."},
    ]))
    by_source = {s["source"]: s for s in run_json(capsys, monkeypatch, chat, THOUGHT_ACTION)}
    assert by_source["chat.json"]["slowest"] == [] == by_source[THOUGHT_ACTION.name]["slowest"]
    assert by_source["chat.json"]["timing"]["note"] == "no per-step timing: its messages carry no timestamps"
    assert "no trajectory with execution_time" in by_source[THOUGHT_ACTION.name]["timing"]["note"]
    rc, out = run(capsys, monkeypatch, chat, MINI)
    assert rc == 0
    assert "chat.json: no per-step timing: its messages carry no timestamps" in out
    assert all(row[3].startswith(MINI.name) for row in table_rows(out, "slowest tool calls"))


@pytest.mark.parametrize("argv, message", [
    (["--slowest", "-1"], "argument --slowest: must be a whole number of at least 0, not '-1'"),
    (["--slowest", "ten"], "argument --slowest: must be a whole number of at least 0, not 'ten'"),
    (["--large-output", "0"], "argument --large-output: must be a whole number of at least 1, not '0'"),
])
def test_a_wrong_flag_is_one_line(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["analyze", str(MINI), *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"loopwire analyze: error: {message}" and "Traceback" not in err
