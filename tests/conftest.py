"""Shared fixtures: paths to the bundled and shared recorded sessions, and a real mesh."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "sessions"
# The recorded sessions shared beside the project (CI has them too); tests fall back to the bundled ones.
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def session_paths() -> list[Path]:
    return sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".json", ".traj"))


def trace_paths() -> list[Path]:
    if SHARED_TRACES.is_dir():
        return sorted(p for p in SHARED_TRACES.rglob("*") if p.suffix in (".json", ".traj"))
    return session_paths()


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The three real services as subprocesses on free loopback ports (embedded default)."""
    from loopwire.mesh import start_mesh

    state = tmp_path_factory.mktemp("mesh")
    env = {}
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    m = start_mesh(state, env=env)
    yield m
    m.stop()
