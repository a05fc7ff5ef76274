"""A recorded session that calls `tool_search`, an MCP tool it found and `exec_js`, replayed with
its tools running (`run_tools`): with the servers configured the harness's context tools answer
for real; without them the recorded outputs come back, as for any tool the harness lacks."""

from __future__ import annotations

import json

import pytest
from harness_testkit import REPO, harness_env, kinds, of
from mcp_testkit import memory_server, servers_installed

from loopwire.common.recorded import RecordedSession, load_session
from loopwire.harness import mcp_client
from loopwire.v1 import harness_pb2

pytestmark = [pytest.mark.timeout(180), pytest.mark.e2e]

SESSION = REPO / "tests" / "fixtures" / "replay" / "context_tools.openai.json"


_servers_installed = pytest.fixture(autouse=True)(servers_installed)



def recorded_outputs(session: RecordedSession) -> dict[str, str]:
    return {o.call_id: o.output for t in session.turns for o in t.tool_outputs}


def replay_start(session: RecordedSession, run_tools: bool) -> harness_pb2.RunRequest:
    return harness_pb2.RunRequest(start=harness_pb2.StartTask(
        task=session.task, instructions=session.instructions, replay=session.replay_script(run_tools=run_tools)))


def test_the_fixture_is_a_session_of_context_tool_calls():
    session = load_session(SESSION)
    assert session.format == "openai-chat"
    assert [c.name for t in session.turns for c in t.calls] == [
        "tool_search", "memory__create_entities", "tool_search", "memory__search_nodes", "exec_js", "open_file"]
    assert all(out.startswith("RECORDED") for out in recorded_outputs(session).values())


async def test_replayed_context_tools_run_for_real_with_their_servers(tmp_path):
    session = load_session(SESSION)
    async with harness_env(tmp_path, mcp_servers=[memory_server(tmp_path)], code_mode=True) as h:
        events = await h.run(replay_start(session, run_tools=True), timeout=150)
        assert kinds(events)[-1] == "completed"
        ended = {e.call_id: e for e in of(events, "tool_call_ended")}
        assert set(ended) == set(recorded_outputs(session))  # every recorded call, nothing else
        recorded = recorded_outputs(session)
        # `open_file` is the recording's own tool, which the harness lacks: its recorded output.
        assert ended.pop("call_open_1").output == recorded["call_open_1"]
        assert all(ended[c].output != recorded[c] for c in ended)  # every other output is the real one
        # The real search over the memory server's catalog, naming what it found.
        assert "memory__create_entities" in ended["call_search_1"].output
        assert "memory__search_nodes" in ended["call_search_2"].output
        # The MCP server's own answers: the entity created, then found by the search.
        assert not ended["call_create_1"].is_error and "Ada" in ended["call_create_1"].output
        assert not ended["call_nodes_1"].is_error and "wrote the first program" in ended["call_nodes_1"].output
        assert "Ada" in (tmp_path / "memory.jsonl").read_text()
        # The script ran: its returned value, not the recorded one.
        assert not ended["call_js_1"].is_error
        assert json.loads(ended["call_js_1"].output) == {"sum": 14, "product": 64}
        # Found schemas joined the transcript as in a live session; the tool list stayed the recording's.
        stored = await h.session(of(events, "started")[0].session_id)
        found = [t.name for i in stored.items if i.WhichOneof("item") == "tool_search_output"
                 for t in i.tool_search_output.tools]
        assert "memory__create_entities" in found and "memory__search_nodes" in found
        assert [t.name for t in stored.tools] == sorted(t.name for t in session.tools)


async def test_without_the_servers_the_recorded_outputs_come_back(tmp_path):
    session = load_session(SESSION)
    async with harness_env(tmp_path) as h:  # no MCP server, no code mode
        events = await h.run(replay_start(session, run_tools=True), timeout=60)
        assert kinds(events)[-1] == "completed"
        ended = of(events, "tool_call_ended")
        assert {e.call_id: e.output for e in ended} == recorded_outputs(session)
        assert not any(e.is_error for e in ended)


async def test_code_mode_alone_runs_exec_js_and_keeps_the_rest_recorded(tmp_path):
    session = load_session(SESSION)
    async with harness_env(tmp_path, code_mode=True) as h:  # exec_js, but no catalog to search
        events = await h.run(replay_start(session, run_tools=True), timeout=60)
        assert kinds(events)[-1] == "completed"
        ended = {e.call_id: e.output for e in of(events, "tool_call_ended")}
        recorded = recorded_outputs(session)
        assert json.loads(ended.pop("call_js_1")) == {"sum": 14, "product": 64}
        assert ended == {c: o for c, o in recorded.items() if c != "call_js_1"}


async def test_a_replay_that_does_not_run_tools_never_calls_the_servers(tmp_path):
    session = load_session(SESSION)
    async with harness_env(tmp_path, mcp_servers=[memory_server(tmp_path)], code_mode=True) as h:
        events = await h.run(replay_start(session, run_tools=False), timeout=60)
        assert kinds(events)[-1] == "completed"
        assert {e.call_id: e.output for e in of(events, "tool_call_ended")} == recorded_outputs(session)
        assert not mcp_client.pool().connections and not (tmp_path / "memory.jsonl").exists()
