"""Where the recorded sessions for tests are: bundled ones, and the shared traces when present."""

from __future__ import annotations

from pathlib import Path

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


def session_path(name_part: str) -> Path:
    """The bundled session whose file name contains ``name_part``."""
    return next(p for p in session_paths() if name_part in p.name)
