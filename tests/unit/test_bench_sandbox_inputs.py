"""bench_sandbox.py survives any recorded input: a file that is no session (no assistant turn, not JSON) is
skipped with a word why, SWE-agent's own tools are not taken for shell commands, and no temp folder is left."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
DATA = Path(__file__).resolve().parents[2] / "data" / "sessions"


@pytest.fixture(scope="module")
def bench_sandbox():
    sys.path.insert(0, str(BENCH))
    try:
        import bench_sandbox

        yield bench_sandbox
    finally:
        sys.path.remove(str(BENCH))


def odd_inputs(root: Path) -> Path:
    traces = root / "traces"
    traces.mkdir()
    (traces / "no-assistant.json").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    (traces / "broken.traj").write_text("{not json")
    for path in (DATA / "swe-agent").glob("*.traj"):
        shutil.copy(path, traces / path.name)
    return traces


def test_files_that_are_no_session_are_skipped_and_swe_agent_tools_are_no_commands(bench_sandbox, tmp_path, capsys):
    sessions = bench_sandbox.recorded_commands(bench_sandbox.provenance.session_files(odd_inputs(tmp_path)), 0)
    said = capsys.readouterr().out
    assert "no-assistant.json" in said and "broken.traj" in said
    assert {p.name for p, _, _ in sessions} == {p.name for p in (DATA / "swe-agent").glob("*.traj")}
    commands = [c for _, _, cs in sessions for c in cs]
    assert commands and "python reproduce.py" in commands
    assert not [c for c in commands if c.split()[0] in ("open", "edit", "create", "submit", "find_file", "insert")]


def test_no_session_at_all_leaves_no_temp_folder(bench_sandbox, tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "no-assistant.json").write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    before = set(Path(tempfile.gettempdir()).glob("bench-sandbox-*"))
    monkeypatch.setattr(sys, "argv", ["bench_sandbox.py", "--traces", str(traces), "--out", str(tmp_path / "out")])
    assert bench_sandbox.main() == 1
    assert set(Path(tempfile.gettempdir()).glob("bench-sandbox-*")) == before
