"""tool_search only for a catalog too large to show: deferred tools whose full schemas fit in
`tool_search_threshold` of the context window are offered directly as tools (counted with the
schema-compaction token counter); threshold 0, an unknown window or MCP servers keep tool_search."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from harness_testkit import answer, call, harness_env, kinds, of

from loopwire.harness import extensions, schema_compaction, tools
from loopwire.harness.config import HarnessConfig
from loopwire.harness.extensions import Extensions
from loopwire.harness.tool_catalog import DeferredTool, Result
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = [pytest.mark.timeout(120)]

BUILT_IN = ["edit_file", "exec_command", "grep", "list", "read_file", "shell", "wait", "write_stdin"]


def deferred(name: str, description: str = "Adds two numbers.") -> DeferredTool:
    async def run(args: dict) -> Result:
        return Result(f"{name} ran with {json.dumps(args, sort_keys=True)}")

    return DeferredTool(common_pb2.Tool(name=name, description=description, parameters=json.dumps(
        {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a"]})), run)


def small_catalog() -> list:
    return [lambda: deferred("math.add"), lambda: deferred("math.mul", "Multiplies two numbers.")]


def large_catalog(n: int = 300) -> list:
    return [lambda i=i: deferred(f"tool_{i}", f"Tool number {i}. " + "It does a very specific thing. " * 10)
            for i in range(n)]


def catalog_tokens(factories: list) -> int:
    return schema_compaction.tokens([f().tool for f in factories])


def names(config: HarnessConfig, start: harness_pb2.StartTask | None = None) -> list[str]:
    return [t.name for t in tools.tool_list(config, start or harness_pb2.StartTask(task="t"))]


def test_a_small_catalog_is_offered_directly_and_a_large_one_gets_tool_search():
    small = HarnessConfig(deferred_tools=small_catalog(), context_window=32_000)
    assert small.tool_search_threshold == 0.10  # the default
    assert names(small) == sorted([*BUILT_IN, "math.add", "math.mul"])
    listed = {t.name: t for t in tools.tool_list(small, harness_pb2.StartTask(task="t"))}
    assert listed["math.add"] == small_catalog()[0]().tool  # the full schema, not a compacted one

    large = HarnessConfig(deferred_tools=large_catalog(), context_window=32_000)
    assert catalog_tokens(large.deferred_tools) > 0.1 * 32_000
    assert names(large) == sorted([*BUILT_IN, "tool_search"])


def test_threshold_zero_an_unknown_window_or_mcp_servers_keep_tool_search():
    always = HarnessConfig(deferred_tools=small_catalog(), context_window=32_000, tool_search_threshold=0)
    assert names(always) == sorted([*BUILT_IN, "tool_search"])
    unknown = HarnessConfig(deferred_tools=small_catalog())  # no --context-window, nothing learnt yet
    assert names(unknown) == sorted([*BUILT_IN, "tool_search"])
    with_mcp = harness_pb2.StartTask(task="t", mcp_servers=["docs"])  # a configured MCP server it selects
    assert "tool_search" in names(HarnessConfig(deferred_tools=small_catalog(), context_window=32_000), with_mcp)
    configured_mcp = HarnessConfig(deferred_tools=small_catalog(), context_window=32_000, mcp_servers=[object()])
    assert names(configured_mcp) == sorted([*BUILT_IN, "tool_search"])  # its tools are known only once connected
    clash = HarnessConfig(deferred_tools=[lambda: deferred("shell")], context_window=32_000)
    assert names(clash) == sorted([*BUILT_IN, "tool_search"])  # never hides a built-in tool
    code = HarnessConfig(deferred_tools=small_catalog(), context_window=32_000, code_mode=True)
    assert names(code) == sorted([*BUILT_IN, "exec_js", "math.add", "math.mul"])


def test_the_line_is_the_threshold_share_of_the_window_in_compaction_tokens():
    factories = small_catalog()
    size = catalog_tokens(factories)
    start = harness_pb2.StartTask(task="t")
    config = HarnessConfig(deferred_tools=factories, tool_search_threshold=0.5)
    assert [t.name for t in extensions.direct_tools(config, start, 2 * size)] == ["math.add", "math.mul"]
    assert extensions.direct_tools(config, start, 2 * size - 2) == []  # one token over the share
    assert extensions.core_tools(config, start, 2 * size - 2) == [extensions.tool_catalog.TOOL_SEARCH]


def extensions_of(config: HarnessConfig) -> Extensions:
    """The session's extensions as a run builds them: from its stored tool list."""
    start = harness_pb2.StartTask(task="t")
    return Extensions(config, start, [], offered=[t.name for t in tools.tool_list(config, start)])


async def test_directly_offered_tools_run_and_need_no_search():
    config = HarnessConfig(deferred_tools=small_catalog(), context_window=32_000)
    ext = extensions_of(config)
    assert ext.handles("math.add") and ext.handles("math.mul") and not ext.handles("math.div")
    assert not ext.enabled  # the unknown-tool error does not point to tool_search
    result = await ext.execute("math.add", {"a": 1, "b": 2}, None)  # type: ignore[arg-type]
    assert result == Result('math.add ran with {"a": 1, "b": 2}')

    searching = extensions_of(HarnessConfig(deferred_tools=small_catalog(), context_window=32_000,
                                            tool_search_threshold=0))
    assert searching.enabled and searching.handles("tool_search") and not searching.handles("math.add")


async def test_a_script_can_call_directly_offered_tools():
    config = HarnessConfig(deferred_tools=small_catalog(), context_window=32_000, code_mode=True)
    ext = extensions_of(config)
    ctx = SimpleNamespace(extra=ext, sandbox=SimpleNamespace(output_limit=16384))
    result = await ext.execute("exec_js", {"code": "return await tools['math.mul']({a: 2, b: 4});"}, ctx)  # type: ignore[arg-type]
    assert result == Result('"math.mul ran with {\\"a\\": 2, \\"b\\": 4}"')


async def test_in_a_session_the_tools_are_in_the_list_and_callable(tmp_path):
    async with harness_env(tmp_path, deferred_tools=small_catalog(), context_window=32_000) as h:
        h.gateway.script = [answer("", call("math.add", json.dumps({"a": 2, "b": 3}), "c1")), answer("5")]
        events = await h.start("2 + 3?")
        assert kinds(events)[-1] == "completed"
        assert [t.name for t in h.gateway.requests[0].tools] == sorted([*BUILT_IN, "math.add", "math.mul"])
        ended = of(events, "tool_call_ended")[0]
        assert ended.output == 'math.add ran with {"a": 2, "b": 3}' and not ended.is_error


async def test_the_gateways_window_decides_at_the_sessions_start_and_the_flag_wins(tmp_path):
    for configured, direct in ((0, True), (400, False)):  # 10% of 400 tokens: too small for the two schemas
        (tmp_path / str(configured)).mkdir()
        async with harness_env(tmp_path / str(configured), deferred_tools=small_catalog(),
                               context_window=configured) as h:
            h.gateway.context_length = 32_000
            h.gateway.script = [answer("", call("math.add", json.dumps({"a": 1}), "c1")), answer("done")]
            events = await h.start("one")
            assert kinds(events)[-1] == "completed"
            offered = [t.name for t in h.gateway.requests[0].tools]
            if direct:  # the gateway's 32k window: the small catalog is shown, and stays so on resume
                assert offered == sorted([*BUILT_IN, "math.add", "math.mul"])
                assert not of(events, "tool_call_ended")[0].is_error
                stored = await h.session(of(events, "started")[0].session_id)
                assert [t.name for t in stored.tools] == offered
            else:
                assert "tool_search" in offered and "math.add" not in offered
