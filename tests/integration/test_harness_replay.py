"""Real recorded sessions drive the real loop with real sandboxed tools (`run_tools`)."""

from __future__ import annotations

import pytest
from harness_testkit import REPO, harness_env, kinds, of

from loopwire.common.recorded import load_session
from loopwire.v1 import harness_pb2

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


async def test_mini_swe_agent_session_runs_its_commands_in_the_sandbox(tmp_path):
    recorded = load_session(REPO / "examples/sessions/sqlfluff__sqlfluff-2419.traj.json")
    workspace = tmp_path / "workspaces" / "tenant-t1" / "repo"  # under the harness's workspace root
    async with harness_env(tmp_path, shell_timeout=20, background_after=15) as h:
        start = harness_pb2.StartTask(task=recorded.task, instructions=recorded.instructions, workspace=str(workspace),
                                      replay=recorded.replay_script(run_tools=True))
        events = await h.run(harness_pb2.RunRequest(start=start), timeout=240)
        assert kinds(events)[-1] == "completed"
        assert of(events, "started")[0].replay_source.startswith("sqlfluff__sqlfluff-2419.traj.json")
        ended = of(events, "tool_call_ended")
        calls = sum(len(t.calls) for t in recorded.turns)
        assert len(ended) == calls and all("[exit code" in e.output or "[killed" in e.output for e in ended)
        # The recorded heredoc really wrote into the workspace, and nothing was written outside it.
        assert "ifnull" in (workspace / "test_l060.sql").read_text().lower()
        # Real outputs, not the recorded ones: this workspace has no sqlfluff checkout.
        recorded_outputs = [o.output for t in recorded.turns for o in t.tool_outputs]
        assert [e.output for e in ended] != recorded_outputs[: len(ended)]
        stored = await h.session(of(events, "started")[0].session_id)
        assert stored.session.turn_count == len(recorded.turns)
        assert [t.name for t in stored.tools] == ["bash"]  # the script's tools go to the model


async def test_swe_agent_session_mixes_real_shell_with_recorded_custom_tools(tmp_path):
    recorded = load_session(REPO / "examples/sessions/marshmallow-1867.function_calling_replace.traj")
    async with harness_env(tmp_path) as h:
        start = harness_pb2.StartTask(task=recorded.task, instructions=recorded.instructions,
                                      replay=recorded.replay_script(run_tools=True))
        events = await h.run(harness_pb2.RunRequest(start=start), timeout=240)
        assert kinds(events)[-1] == "completed"
        by_name: dict[str, list] = {}
        for e in of(events, "tool_call_ended"):
            by_name.setdefault(e.name, []).append(e)
        # `bash` ran for real (mapped to the sandboxed shell); `open`, `edit`... have no
        # harness counterpart, so their recorded outputs came back.
        assert all("[exit code" in e.output for e in by_name["bash"])
        recorded_edit = [o.output for t in recorded.turns for c, o in zip(t.calls, t.tool_outputs, strict=False)
                         if c.name == "edit"]
        assert [e.output for e in by_name["edit"]] == recorded_edit
