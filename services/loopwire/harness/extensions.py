"""A session's tools beyond the built-in ones: `tool_search`, the deferred tools it finds, and
`exec_js` (code mode).

One object per session run, reached through `ToolContext.extra`: the loop only asks it
whether it handles a call, runs the call, and appends the items it produced
(`tool_search_output`) after the turn's outputs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from loopwire.harness import approvals, code_mode, schema_compaction, tool_catalog
from loopwire.harness.approvals import Verdict
from loopwire.harness.config import HarnessConfig
from loopwire.harness.tool_catalog import Catalog, Result
from loopwire.v1 import common_pb2, harness_pb2

if TYPE_CHECKING:
    from loopwire.harness.tools import ToolContext

EXEC_JS = common_pb2.Tool(name="exec_js", description=code_mode.EXEC_JS_DESCRIPTION,
                          parameters=code_mode.EXEC_JS_PARAMETERS)
_NOT_FROM_JS = ("exec_js", "tool_search")  # a search appends to the transcript; scripts do not nest

log = logging.getLogger("loopwire.harness")


def core_tools(config: HarnessConfig, start: harness_pb2.StartTask) -> list[common_pb2.Tool]:
    """The extra tools a new session shows the model (fixed for the session)."""
    return ([tool_catalog.TOOL_SEARCH] if has_catalog(config, start) else []) + ([EXEC_JS] if config.code_mode else [])


def wanted(config: HarnessConfig, start: harness_pb2.StartTask) -> bool:
    return has_catalog(config, start) or config.code_mode


def has_catalog(config: HarnessConfig, start: harness_pb2.StartTask) -> bool:
    return bool(config.deferred_tools or config.mcp_servers or start.mcp_servers)


class Extensions:
    """Per session: the catalog, the tools found so far, and items waiting to be appended."""

    def __init__(self, config: HarnessConfig, start: harness_pb2.StartTask,
                 items: Sequence[common_pb2.Item], tenant: str = "") -> None:
        self.config = config
        self.start = start
        self.tenant = tenant  # MCP server processes are never shared between tenants
        self.enabled = has_catalog(config, start)
        self.found = tool_catalog.discovered(items)
        self.catalog = Catalog()
        self.notes: list[str] = []  # catalog problems (a server that would not start), told on search
        self._ready: asyncio.Task[None] | None = None
        self._pending: list[common_pb2.Item] = []

    def handles(self, name: str) -> bool:
        if name == "exec_js":
            return self.config.code_mode
        return self.enabled and (name == "tool_search" or name in self.found)

    async def ready(self) -> None:
        """Fills the catalog once (MCP servers connect on first use)."""
        if self._ready is None:
            self._ready = asyncio.ensure_future(self._load())
        await asyncio.shield(self._ready)

    async def _load(self) -> None:
        try:
            self.notes += [f"tool name clash: {n} (kept the first)"
                           for n in self.catalog.add(f() for f in self.config.deferred_tools)]
            if self.config.mcp_servers or self.start.mcp_servers:
                from loopwire.harness import mcp_client  # the MCP SDK is imported only when used

                tools, notes = await mcp_client.catalog_tools(self.config.mcp_servers,
                                                              list(self.start.mcp_servers), self.tenant)
                self.notes += notes
                self.notes += [f"tool name clash: {n} (kept the first)" for n in self.catalog.add(tools)]
        except Exception as e:  # noqa: BLE001 - a broken catalog is told to the model, never crashes the run
            log.exception("loading the deferred tool catalog failed")
            self.notes.append(f"the tool catalog is incomplete: {type(e).__name__}: {e}")

    async def execute(self, name: str, args: dict, ctx: ToolContext) -> Result:
        if name == "exec_js":
            return await self._exec_js(args, ctx)
        await self.ready()
        if name == "tool_search":
            budget = self.config.tool_search_budget
            result, schemas = tool_catalog.run_search(
                self.catalog, self.found, args, lambda ts: schema_compaction.compact_to_budget(ts, budget))
            if schemas:
                self._pending.append(tool_catalog.search_item(schemas))
                self.found.update(t.name for t in schemas)
            if self.notes:
                result.output += "\nnote: " + "; ".join(self.notes)
            return result
        tool = self.catalog.tools.get(name)
        if tool is None:
            return Result(f"error: tool `{name}` is no longer offered by its server", True)
        try:
            return await tool.run(args)
        except Exception as e:  # noqa: BLE001 - a deferred tool's failure is the model's to read
            log.warning("deferred tool %s failed: %s", name, e)
            return Result(f"error: {name} failed: {type(e).__name__}: {e}", True)

    def take_items(self) -> list[common_pb2.Item]:
        """Items produced by this turn's calls, to append after its outputs (in call order)."""
        items, self._pending = self._pending, []
        return items

    async def _exec_js(self, args: dict, ctx: ToolContext) -> Result:
        code = args.get("code")
        if not isinstance(code, str) or not code.strip():
            return Result("error: `code` must be a non-empty string of JavaScript", True)
        from loopwire.harness import tools

        names = sorted(n for n in tools.TOOLS if n != tools.FINISH) + sorted(self.found) + list(_NOT_FROM_JS)  # the last two say why not

        async def call_tool(name: str, call_args: dict) -> Result:
            if name in _NOT_FROM_JS:
                return Result(f"error: {name} cannot be called from exec_js; call it directly", True)
            call = common_pb2.FunctionCall(call_id="exec_js", name=name, arguments=json.dumps(call_args))
            verdict = approvals.verdict(self.start.approval_policy, call)
            if verdict is Verdict.ASK:
                return Result(f"error: {name} with these arguments needs a human's approval, which a script cannot "
                              "wait for; call it directly instead", True)
            if verdict is Verdict.REFUSE:
                return Result(f"error: {name} with these arguments is refused by the approval policy", True)
            outcome = await tools.execute(call, ctx)
            return Result(outcome.output, outcome.is_error)

        run = await code_mode.run_js(code, names, call_tool, self.config.js_timeout, self.config.js_memory_mb << 20)
        return run.result
