"""Configuration shared by every command: each flag also reads `LOOPWIRE_<FLAG>`."""

from __future__ import annotations

import os


def env(flag: str, default: str) -> str:
    """The value of `LOOPWIRE_<FLAG>` (dashes become underscores), or ``default``."""
    return os.environ.get("LOOPWIRE_" + flag.upper().replace("-", "_"), default)


def env_int(flag: str, default: int) -> int:
    return int(env(flag, str(default)))
