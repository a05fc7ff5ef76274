"""200 concurrent agent sessions through the whole mesh (simulated engine, virtual time): zero failures.

Before the fixes this lost runs as `UNAVAILABLE: no healthy inference replica`: the servers
GOAWAYed the clients' keepalive pings (ending batches of streams at once) and two slow status
polls marked the busy but live replica down.
"""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest

from loopwire.common.recorded import load_session
from loopwire.mesh import start_mesh
from loopwire.replay import replay_sessions

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

DATA = Path(__file__).resolve().parents[2] / "data" / "sessions"
SESSIONS = 200
TURNS = 6


def _sessions() -> list:
    recorded = [load_session(p) for p in sorted(DATA.rglob("*")) if p.suffix in (".json", ".traj")]
    out = []
    for i in range(SESSIONS):
        s = copy.deepcopy(recorded[i % len(recorded)])
        s.turns = s.turns[:TURNS]
        out.append(s)
    return out


def test_two_hundred_concurrent_sessions_with_zero_failures(tmp_path):
    sessions = _sessions()
    mesh = start_mesh(tmp_path, extra_args={"inference": ["--engine", "simulated", "--time-scale", "0"]})
    try:
        result = asyncio.run(replay_sessions(mesh.harness, sessions, "stateful", SESSIONS, api_key=mesh.api_key))
        failures = [r.error for r in result.runs if not r.completed]
        assert failures == [], f"{len(failures)} of {SESSIONS} runs failed, e.g. {failures[:3]}"
        assert sum(len(r.turns) for r in result.runs) == sum(len(s.turns) for s in sessions)
        for proc in mesh.processes.values():
            assert proc.poll() is None  # every service is still up
    finally:
        mesh.stop()
