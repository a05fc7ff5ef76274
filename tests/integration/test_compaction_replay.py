"""A long recorded session (mini-swe-agent, 176 turns, ~80k-token final prompt) replayed through
the real mesh with a 16k context window: compaction keeps every prompt under the window."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loopwire.client import run_task
from loopwire.common.recorded import load_session
from loopwire.mesh import start_mesh
from loopwire.replay import start_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
SESSION = REPO / "data" / "sessions" / "mini-swe-agent" / "pylint-dev__astroid-1333.traj.json"
WINDOW = 16384


async def test_a_replayed_long_session_stays_under_the_context_window(tmp_path):
    session = load_session(SESSION)
    events = []
    extra = {"inference": ["--engine", "simulated", "--model", "dummy:0", "--time-scale", "0"],
             "harness": ["--context-window", str(WINDOW)]}
    mesh = await asyncio.to_thread(start_mesh, tmp_path / "mesh", extra_args=extra)
    try:
        result = await run_task(mesh.harness, start_for(session, "stateful"), events.append, api_key=mesh.api_key)
    finally:
        await asyncio.to_thread(mesh.stop)
    assert events[-1].WhichOneof("event") == "completed"
    prompts = [t.usage.input_tokens for t in result.turns]
    assert len(prompts) == len(session.turns) == 176
    # Without compaction this session's last prompt is several windows long.
    assert sum(len(t.calls) for t in session.turns) > 100
    assert max(prompts) < WINDOW
    compactions = [e.compaction for e in events if e.WhichOneof("event") == "compaction"]
    assert len(compactions) >= 3 and not any(c.HasField("error") for c in compactions)
    for c in compactions:
        assert c.prompt_tokens_before >= c.threshold_tokens == int(WINDOW * 0.9)
        assert c.summary_input_tokens > 0 and c.summary_output_tokens > 0
        # The simulated model's summaries run to the output cap, so they are refused as degenerate
        # and old outputs are masked instead: smaller than the threshold, if not by half.
        assert c.prompt_tokens_after < c.threshold_tokens
        # The turn after a compaction really sent the smaller prompt (the gateway counted it).
        after = result.turns[c.turn - 1].usage.input_tokens
        assert after < c.prompt_tokens_before
