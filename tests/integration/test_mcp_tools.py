"""Real MCP servers (npm, pinned by tests/mcp_servers/package-lock.json) over stdio as deferred
tools of real sessions; and servers that crash, hang or speak malformed JSON-RPC."""

from __future__ import annotations

import json
import sys

import pytest
from harness_testkit import REPO, TENANT_KEYS, answer, call, harness_env, kinds, of
from mcp_testkit import BIN, memory_server, npm_server, servers_installed

from loopwire.common.grpc_server import service_channel
from loopwire.harness import mcp_client
from loopwire.harness.mcp_client import McpServer
from loopwire.v1 import harness_pb2, harness_pb2_grpc

pytestmark = [pytest.mark.timeout(180), pytest.mark.e2e]

BAD = REPO / "tests" / "mcp_servers" / "bad_server.py"


_servers_installed = pytest.fixture(autouse=True)(servers_installed)




def bad_server(mode: str) -> McpServer:
    return McpServer(mode, command=sys.executable, args=(str(BAD), mode), connect_timeout=5, call_timeout=3)


def search(query: str, call_id: str) -> object:
    return call("tool_search", json.dumps({"query": query}), call_id)


async def test_npm_servers_tools_are_found_and_called_through_the_loop(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("the secret word is pelican\n")
    servers = [npm_server("fs", "mcp-server-filesystem", str(shared)),
               memory_server(tmp_path),
               npm_server("everything", "mcp-server-everything", "stdio")]
    entities = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}]}
    async with harness_env(tmp_path, mcp_servers=servers) as h:
        h.gateway.script = [
            answer("", search("read the text contents of a file", "s1"),
                   search("create entities in the knowledge graph memory", "s2")),
            answer("", call("fs__read_text_file", json.dumps({"path": str(shared / "notes.txt")}), "c1"),
                   call("memory__create_entities", json.dumps(entities), "c2")),
            answer("", search("search nodes of the knowledge graph", "s3"), search("add two numbers sum", "s4")),
            answer("", call("memory__search_nodes", json.dumps({"query": "Ada"}), "c3"),
                   call("everything__get-sum", json.dumps({"a": 2, "b": 40}), "c4"),
                   call("fs__read_text_file", json.dumps({"path": "/etc/passwd"}), "c5")),
            answer("done"),
        ]
        events = await h.start("use the servers")
        assert kinds(events)[-1] == "completed"
        ended = {e.call_id: e for e in of(events, "tool_call_ended")}
        assert "fs__read_text_file" in ended["s1"].output and "memory__create_entities" in ended["s2"].output
        assert ended["c1"].output.strip() == "the secret word is pelican" and not ended["c1"].is_error
        assert "Ada" in ended["c2"].output and not ended["c2"].is_error
        assert "wrote the first program" in ended["c3"].output
        assert "42" in ended["c4"].output and not ended["c4"].is_error
        # The filesystem server's own access control answers as a tool error, readable by the model.
        assert ended["c5"].is_error and "denied" in ended["c5"].output.lower()
        names = [t.name for t in h.gateway.requests[0].tools]
        assert not any("__" in n for n in names)  # MCP tools never enter the tool list


async def test_mcp_calls_go_through_the_approval_policy(tmp_path):
    mode = harness_pb2.ApprovalMode
    policy = harness_pb2.ApprovalPolicy(per_tool={"memory__read_graph": mode.APPROVAL_MODE_ALWAYS})
    async with harness_env(tmp_path, mcp_servers=[memory_server(tmp_path)]) as h:
        h.gateway.script = [answer("", search("read the whole knowledge graph", "s1")),
                            answer("", call("memory__read_graph", "{}", "c1")), answer("ok")]
        events = await h.start("x", approval_policy=policy)
        assert kinds(events)[-1] == "approval_requested"
        approval = of(events, "approval_requested")[0]
        events = await h.run(harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(
            approval_id=approval.approval_id, approved=False, reason="not now")))
        out = h.gateway.requests[-1].input[0].function_call_output
        assert out.is_error and "not now" in out.output and kinds(events)[-1] == "completed"


async def test_bad_servers_give_clear_results_and_the_session_goes_on(tmp_path):
    servers = [bad_server(m) for m in ("crash", "hang", "garbage", "ok", "hang_at_start", "exit_at_start")]
    async with harness_env(tmp_path, mcp_servers=servers) as h:
        h.gateway.script = [
            answer("", call("tool_search", json.dumps({"query": "fragile", "limit": 10}), "s1")),
            answer("", *(call(f"{m}__fragile", json.dumps({"x": m}), f"c_{m}") for m in ("crash", "hang", "garbage", "ok"))),
            answer("", call("ok__fragile", json.dumps({"x": "again"}), "c_again"),
                   call("crash__fragile", json.dumps({"x": "again"}), "c_crash2")),
            answer("still here"),
        ]
        events = await h.start("x")
        assert kinds(events)[-1] == "completed"
        assert of(events, "completed")[0].final_text == "still here"
        ended = {e.call_id: e for e in of(events, "tool_call_ended")}
        found = ended["s1"].output
        assert all(f"{m}__fragile" in found for m in ("crash", "hang", "garbage", "ok")), found
        assert "'hang_at_start' did not finish the MCP handshake" in found
        assert "'exit_at_start'" in found and "unavailable" in found
        assert ended["c_ok"].output == '{"x": "ok"}' and not ended["c_ok"].is_error
        assert ended["c_crash"].is_error and "MCP server 'crash' exited" in ended["c_crash"].output
        assert ended["c_hang"].is_error and "MCP server 'hang' did not answer within 3s" in ended["c_hang"].output
        assert ended["c_garbage"].is_error and "MCP server 'garbage' sent malformed JSON-RPC" in ended["c_garbage"].output
        # The crashed server was started again for the next call (and crashed again, clearly).
        assert ended["c_again"].output == '{"x": "again"}'
        assert ended["c_crash2"].is_error and "exited" in ended["c_crash2"].output


async def test_a_tool_schema_over_the_bounds_is_left_out_and_the_servers_other_tools_stay(tmp_path):
    async with harness_env(tmp_path, mcp_servers=[bad_server("big_schemas")]) as h:
        h.gateway.script = [answer("", call("tool_search", json.dumps({"query": "fragile deep huge", "limit": 10}),
                                            "s1")), answer("done")]
        events = await h.start("x")
        assert kinds(events)[-1] == "completed"
        found = next(e.output for e in of(events, "tool_call_ended") if e.call_id == "s1")
        assert "big_schemas__fragile" in found and "big_schemas__deep" not in found
        assert "tool 'deep' left out: its schema is nested deeper than 64 levels" in found
        assert "tool 'huge' left out: its schema is 100" in found and "(--max-tool-schema-bytes)" in found


async def test_a_session_picks_servers_by_configured_name_only(tmp_path):
    servers = [bad_server("ok"), memory_server(tmp_path)]
    async with harness_env(tmp_path, mcp_servers=servers) as h:
        h.gateway.script = [answer("", search("fragile knowledge graph", "s1")), answer("ok")]
        events = await h.start("x", mcp_servers=["ok", "rm -rf /"])
        out = {e.call_id: e for e in of(events, "tool_call_ended")}["s1"].output
        assert "ok__fragile" in out and "memory__" not in out
        assert "no MCP server named 'rm -rf /' is configured" in out


async def test_a_servers_state_never_crosses_tenants(tmp_path):
    per_tenant = npm_server("memory", "mcp-server-memory", env=(("MEMORY_FILE_PATH", str(tmp_path / "{tenant}.jsonl")),))
    entity = {"entities": [{"name": "Ada", "entityType": "person", "observations": ["t1's secret"]}]}
    async with harness_env(tmp_path, mcp_servers=[per_tenant]) as h:
        h.gateway.script = [answer("", search("create entities read graph", "s1")),
                            answer("", call("memory__create_entities", json.dumps(entity), "c1")), answer("ok"),
                            answer("", search("read the knowledge graph", "s2")),
                            answer("", call("memory__read_graph", "{}", "c2")), answer("ok")]
        await h.start("t1 writes")  # as tenant t1
        async with service_channel(h.address, TENANT_KEYS["t2"]) as channel:
            stub = harness_pb2_grpc.HarnessServiceStub(channel)
            events = [e async for e in stub.Run(iter([harness_pb2.RunRequest(
                start=harness_pb2.StartTask(task="t2 reads"))]), timeout=60)]
        read = {e.call_id: e for e in of(events, "tool_call_ended")}["c2"]
        assert not read.is_error and "Ada" not in read.output  # t2 has its own server process
        assert len(mcp_client.pool().connections) == 2
        assert (tmp_path / "t1.jsonl").exists() and not (tmp_path / "t2.jsonl").exists()  # t2 only read


def test_server_specs_parse_and_bad_ones_are_refused():
    s = mcp_client.parse_spec("fs=npx -y server /tmp/a dir")
    assert (s.name, s.command, s.args) == ("fs", "npx", ("-y", "server", "/tmp/a", "dir"))
    assert mcp_client.parse_spec("web=http://127.0.0.1:3001/mcp").url == "http://127.0.0.1:3001/mcp"
    for bad in ("noequals", "=cmd", "a b=cmd", "name=", "x/y=cmd"):
        with pytest.raises(ValueError):
            mcp_client.parse_spec(bad)


async def test_streamable_http_server_tools_are_found_and_called(tmp_path):
    import asyncio
    import os
    import subprocess

    from loopwire.mesh import free_port

    port = free_port()
    proc = subprocess.Popen([str(BIN / "mcp-server-everything"), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), 60)  # type: ignore[union-attr]
        assert f"listening on port {port}" in line, line
        server = McpServer("web", url=f"http://127.0.0.1:{port}/mcp", connect_timeout=60)
        async with harness_env(tmp_path, mcp_servers=[server]) as h:
            h.gateway.script = [answer("", search("echo back a message", "s1")),
                                answer("", call("web__echo", json.dumps({"message": "over http"}), "c1")),
                                answer("ok")]
            events = await h.start("x")
            ended = {e.call_id: e for e in of(events, "tool_call_ended")}
            assert "web__echo" in ended["s1"].output
            assert ended["c1"].output == "Echo: over http" and not ended["c1"].is_error
    finally:
        await mcp_client.close_all()
        proc.terminate()
        proc.wait(10)


async def test_compacted_mcp_schemas_accept_and_reject_the_same_arguments(tmp_path):
    import random

    from schema_instances import generate, same_verdicts

    from loopwire.harness import schema_compaction

    servers = [npm_server("fs", "mcp-server-filesystem", str(tmp_path)), memory_server(tmp_path),
               npm_server("everything", "mcp-server-everything", "stdio")]
    tools, notes = await mcp_client.catalog_tools(servers, [])
    assert not notes and len(tools) >= 30
    rng = random.Random(3)
    valid = invalid = 0
    for t in tools:
        schema = json.loads(t.tool.parameters)
        instances = [generate(schema, rng) for _ in range(60)]
        for level in range(1, schema_compaction.LEVELS + 1):
            v, i = same_verdicts(schema, schema_compaction.compact_schema(schema, level), instances)
            valid, invalid = valid + v, invalid + i
    assert valid > 1000 and invalid > 1000
    before = schema_compaction.tokens([t.tool for t in tools])
    after = schema_compaction.tokens([schema_compaction.compact_tool(t.tool, 3) for t in tools])
    assert after < 0.8 * before


async def test_the_schema_fixture_is_what_the_servers_list(tmp_path):
    """The constrained-decoding property test draws from tests/fixtures/mcp: it must be these servers'."""
    servers = [npm_server("fs", "mcp-server-filesystem", str(tmp_path)), memory_server(tmp_path),
               npm_server("everything", "mcp-server-everything", "stdio")]
    tools, notes = await mcp_client.catalog_tools(servers, [])
    assert not notes
    listed = [{"name": t.tool.name, "parameters": json.loads(t.tool.parameters)} for t in tools]
    fixture = json.loads((REPO / "tests" / "fixtures" / "mcp" / "tool_schemas.json").read_text())
    assert listed == fixture
