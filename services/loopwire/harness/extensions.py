"""A session's tools beyond the built-in ones: `tool_search`, the deferred tools it finds, and
`exec_js` (code mode).

One object per session run, reached through `ToolContext.extra`: the loop only asks it
whether it handles a call, runs the call, and appends the items it produced
(`tool_search_output`) after the turn's outputs.

`tool_search` pays off only for a large catalog: when the deferred tools' full schemas fit in
`tool_search_threshold` of the context window (cl100k tokens, the counter schema compaction
uses), a new session is offered them directly as tools instead (`direct_tools`). The window is
`--context-window`, else the gateway's (asked when the session starts); when neither is known,
when the threshold is 0, when MCP servers add tools (known only once they connect), or when a
deferred tool's name is a built-in one, the session gets `tool_search`. The decision is made
once, at the start, and kept in the session's stored tool list, which every later run (a
resume, a restarted harness) reads back.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from loopwire.harness import approvals, code_mode, schema_compaction, tool_catalog
from loopwire.harness.approvals import Verdict
from loopwire.harness.builtin_tools import BUILTINS, FINISH
from loopwire.harness.config import HarnessConfig
from loopwire.harness.tool_catalog import Catalog, Result
from loopwire.v1 import common_pb2, harness_pb2

if TYPE_CHECKING:
    from loopwire.harness.tool_registry import ToolContext

EXEC_JS = common_pb2.Tool(name="exec_js", description=code_mode.EXEC_JS_DESCRIPTION,
                          parameters=code_mode.EXEC_JS_PARAMETERS)
_NOT_FROM_JS = ("exec_js", "tool_search")  # a search appends to the transcript; scripts do not nest

log = logging.getLogger("loopwire.harness")


def core_tools(config: HarnessConfig, start: harness_pb2.StartTask, window: int = 0) -> list[common_pb2.Tool]:
    """The extra tools a new session shows the model (fixed for the session): `tool_search`, or the
    deferred tools themselves when they fit the threshold share of ``window`` (0: not known)."""
    direct = direct_tools(config, start, config.context_window or window)
    search = [tool_catalog.TOOL_SEARCH] if has_catalog(config, start) and not direct else []
    return direct + search + ([EXEC_JS] if config.code_mode else [])


@functools.lru_cache(maxsize=4096)
def _schema_tokens(name: str, description: str, parameters: str) -> int:
    return schema_compaction.tokens([common_pb2.Tool(name=name, description=description, parameters=parameters)])


def direct_possible(config: HarnessConfig, start: harness_pb2.StartTask) -> bool:
    """Whether the window could make the session's deferred tools direct (else no need to ask it)."""
    return config.tool_search_threshold > 0 and bool(config.deferred_tools) and not (config.mcp_servers
                                                                                     or start.mcp_servers)


def direct_tools(config: HarnessConfig, start: harness_pb2.StartTask, window: int) -> list[common_pb2.Tool]:
    """The deferred tools with their full schemas when a session is offered them directly instead of
    `tool_search` (the module docstring says when); [] when it gets `tool_search`."""
    if window <= 0 or not direct_possible(config, start):
        return []
    budget = config.tool_search_threshold * window
    taken = set(BUILTINS.tools) | set(_NOT_FROM_JS)
    out: dict[str, common_pb2.Tool] = {}
    total = 0
    try:
        for factory in config.deferred_tools:
            tool = factory().tool
            if tool.name in out:
                continue  # a clash: the first is kept, as in the catalog
            if tool.name in taken:
                return []  # beside the built-ins it would hide one: the session keeps tool_search
            total += _schema_tokens(tool.name, tool.description, tool.parameters)
            if total > budget:
                return []
            out[tool.name] = tool
    except Exception:  # noqa: BLE001 - a broken factory: tool_search, whose catalog load tells the model
        log.exception("building the deferred tools failed")
        return []
    return list(out.values())


def wanted(config: HarnessConfig, start: harness_pb2.StartTask) -> bool:
    return has_catalog(config, start) or config.code_mode


def has_catalog(config: HarnessConfig, start: harness_pb2.StartTask) -> bool:
    return bool(config.deferred_tools or config.mcp_servers or start.mcp_servers)


class Extensions:
    """Per session: the catalog, the tools found so far, and items waiting to be appended."""

    def __init__(self, config: HarnessConfig, start: harness_pb2.StartTask,
                 items: Sequence[common_pb2.Item], tenant: str = "", offered: Sequence[str] = ()) -> None:
        """``offered``: the names in the session's stored tool list (what its start decided)."""
        self.config = config
        self.start = start
        self.tenant = tenant  # MCP server processes are never shared between tenants
        self.has_catalog = has_catalog(config, start)
        self.found = tool_catalog.discovered(items)
        # The deferred tools this session was offered directly (not through tool_search). A replay's
        # tool list is the recording's, not a decision of this harness: its tools are found by search.
        builtin = {*BUILTINS.tools, *_NOT_FROM_JS}
        replay = bool(start.replay.turns)
        self._direct = (frozenset(n for n in offered if n not in builtin) if self.has_catalog and not replay
                        else frozenset())
        self.catalog = Catalog()
        self.notes: list[str] = []  # catalog problems (a server that would not start), told on search
        self._ready: asyncio.Task[None] | None = None
        self._pending: list[common_pb2.Item] = []

    def direct(self) -> frozenset[str]:
        """Names of the deferred tools the session was offered directly (`direct_tools`)."""
        return self._direct

    @property
    def enabled(self) -> bool:
        """Whether the session finds its deferred tools with tool_search (rather than having them)."""
        return self.has_catalog and not self.direct()

    def handles(self, name: str) -> bool:
        if name == "exec_js":
            return self.config.code_mode
        return self.has_catalog and (name == "tool_search" or name in self.found or name in self.direct())

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

                tools, notes = await mcp_client.catalog_tools(self.config.mcp_servers, list(self.start.mcp_servers),
                                                              self.tenant, self.config.max_tool_schema_bytes)
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
        names = (sorted(n for n in BUILTINS.tools if n != FINISH) + sorted(self.found | self.direct())
                 + list(_NOT_FROM_JS))  # the last two say why not

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
            outcome = await BUILTINS.dispatch(call, ctx)  # through ctx.extra: found tools too
            return Result(outcome.output, outcome.is_error)

        run = await code_mode.run_js(code, names, call_tool, self.config.js_timeout, self.config.js_memory_mb << 20)
        return run.result
