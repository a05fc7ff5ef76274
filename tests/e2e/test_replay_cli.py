"""`loopwire replay` starts its own mesh per mode and prints the side-by-side table."""

from __future__ import annotations

import subprocess
import sys

import pytest
from session_files import session_path

pytestmark = pytest.mark.e2e


def test_replay_both_modes_prints_ratios_and_writes_plots(tmp_path):
    path = session_path("function_calling_simple")
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "replay", str(path), "--mode", "both", "--plots", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=600, env={"COLUMNS": "200", "PATH": ""},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = out.stdout
    assert "stateless/stateful" in table
    row = next(line for line in table.splitlines() if "tokens tokenized" in line)
    ratio = float(row.split("│")[-2].strip().rstrip("×"))
    assert ratio > 2  # the naive way tokenizes the growing transcript again every turn
    for name in ("ttft", "tokenized", "bytes"):
        png = tmp_path / f"r_{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_of_an_unreadable_file_fails_clearly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "replay", str(bad)],
        capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": ""},
    )
    assert out.returncode == 1
    assert "not a readable JSON session" in out.stdout
