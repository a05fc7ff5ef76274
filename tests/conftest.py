"""Shared fixtures: a real mesh of the three services."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Test functions measured slow (scripts/slow_tests.py writes the list): marked `slow`, so
# `make test-fast` (-m "not slow") leaves them out; `make test` runs them with the rest.
SLOW = frozenset(line for line in (Path(__file__).parent / "slow_tests.txt").read_text().splitlines()
                 if line and not line.startswith("#"))


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The three real services as subprocesses on free loopback ports (the reference engine on the tiny
    dummy model: random weights, cl100k + ChatML; the real model's numpy speed would only slow the replays)."""
    from loopwire.mesh import start_mesh

    state = tmp_path_factory.mktemp("mesh")
    env = {}
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    m = start_mesh(state, env=env, extra_args={"inference": ["--model", "dummy:0"]})
    yield m
    m.stop()


@pytest.fixture(autouse=True)
def _tenant_volumes_unmounted(request: pytest.FixtureRequest) -> Iterator[None]:
    """The tenant volumes a test's harness mounted in its tmp_path (as root) go with it, not left mounted."""
    path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if path is not None:
        from loopwire.harness.tenant_volumes import unmount_below

        unmount_below(path)


@pytest.fixture(scope="session", autouse=True)
def _session_volumes_unmounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """And those of session-wide services (the mesh's harness), at the end."""
    yield
    from loopwire.harness.tenant_volumes import unmount_below

    unmount_below(tmp_path_factory.getbasetemp())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the listed slow tests; and tests that need Jaeger run last: on a cold machine its binary
    is still compiling in the background (scripts/install_tools.sh) while the rest of the suite runs."""
    for item in items:
        if item.nodeid.split("[", 1)[0] in SLOW:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: "jaeger" in getattr(item, "fixturenames", ()))
