"""Where the recorded sessions for tests are: the three examples, and every bundled trace."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "sessions"
# Every recorded session the project bundles (data/sessions, MIT, with their licenses).
TRACES = ROOT / "data" / "sessions"


def session_paths() -> list[Path]:
    return sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".json", ".traj"))


def trace_paths() -> list[Path]:
    return sorted(p for p in TRACES.rglob("*") if p.suffix in (".json", ".traj"))


def session_path(name_part: str) -> Path:
    """The bundled session whose file name contains ``name_part``."""
    return next(p for p in session_paths() if name_part in p.name)
