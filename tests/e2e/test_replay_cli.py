"""`loopwire replay` starts its own mesh per mode and prints the side-by-side table."""

from __future__ import annotations

import subprocess
import sys

import pytest
from session_files import session_path

pytestmark = pytest.mark.e2e


def test_replay_three_ways_prints_ratios_and_writes_plots(tmp_path):
    path = session_path("function_calling_simple")
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "replay", str(path), "--mode", "all", "--plots", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=600, env={"COLUMNS": "200", "PATH": ""},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = out.stdout
    assert "÷ stateful" in table and "stateless-nocache" in table

    def ratios(metric: str) -> tuple[float, float]:
        row = next(line for line in table.splitlines() if line.startswith(f"│ {metric}"))
        cells = [c.strip().rstrip("×") for c in row.split("│")[-3:-1]]
        return float(cells[0]), float(cells[1])

    stateless, nocache = ratios("tokens tokenized")
    assert stateless > 2 and nocache > 2  # the naive way tokenizes the growing transcript again every turn
    stateless, nocache = ratios("prefill tokens computed")
    # The fair baseline resends everything but the engine's prefix cache still holds it.
    assert stateless < 1.5 < nocache
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
