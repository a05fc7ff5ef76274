"""What the tests need beyond Python (a binary, an installed package or model): when it is missing a
test skips on a developer's machine, but fails under CI (the environment variable CI set, as `.ci/run`
does), so a CI machine without a tool cannot pass by running fewer tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(why: str) -> NoReturn:
    """Skip with ``why``; under CI, fail with it."""
    if IN_CI:
        pytest.fail(f"{why} [CI is set: a missing tool fails the test instead of skipping it]", pytrace=False)
    pytest.skip(why)


def require_tool(name: str, *candidates: str | Path, why: str = "") -> str:
    """The path of the executable ``name`` (on PATH, else the first of ``candidates`` that exists);
    missing, the test skips (fails under CI) with ``why``."""
    found = shutil.which(name) or next((str(c) for c in candidates if Path(c).exists()), None)
    if found is None:
        missing(why or f"{name} is not installed (`make tools` installs it: scripts/install_tools.sh)")
    return found
