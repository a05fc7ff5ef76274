"""A newcomer's first command: the bundled real model answers through the whole mesh."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loopwire.mesh import start_mesh

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def real_mesh(tmp_path_factory):
    mesh = start_mesh(tmp_path_factory.mktemp("real"), extra_args={"inference": ["--model", "default"]})
    yield mesh
    mesh.stop()


def test_loopwire_run_answers_from_smollm2(real_mesh):
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "run", "--harness", real_mesh.harness,
         "--state-dir", str(real_mesh.state_dir), "What is the capital of France?"],
        capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Paris" in text  # greedy SmolLM2-135M-Instruct: "The capital of France is Paris."
    assert "ended by stop" in text and "completed after 1 turn" in text
    logs = (real_mesh.state_dir / "logs" / "inference.log").read_text()
    assert "serving Smollm2 135M" in logs and "KV cache" in logs
