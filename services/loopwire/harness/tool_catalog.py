"""Deferred tools: in the session's catalog, not in its prompt, until `tool_search` finds them.

The prompt's tool list is fixed when a session starts (sorted by name), so the cached prefix
never changes. The schemas a search finds are appended at the end of the transcript as a
`tool_search_output` item and become callable from then on. Which tools a session has found is
read back from its transcript, so a restarted harness knows them without extra state.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from loopwire.harness.output import to_text
from loopwire.harness.tool_search import ToolDoc, ToolIndex
from loopwire.v1 import common_pb2

DEFAULT_K = 8
MAX_K = 20
MAX_QUERY_CHARS = 2000

TOOL_SEARCH = common_pb2.Tool(
    name="tool_search",
    description="Find more tools by what they do. Describe the task in plain words; the best matching tool "
    "schemas are added to the conversation and can be called from then on.",
    parameters=json.dumps({"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": MAX_K}},
        "required": ["query"], "additionalProperties": False}, sort_keys=True),
)


@dataclass
class Result:
    """What a deferred tool returned: text for the model, and whether it failed."""

    output: str
    is_error: bool = False


Runner = Callable[[dict], Awaitable[Result]]


@dataclass
class DeferredTool:
    tool: common_pb2.Tool
    run: Runner
    source: str = "local"  # "mcp:<server>" for MCP tools


@dataclass
class Catalog:
    """All deferred tools of a session, with a BM25 index built on first search."""

    tools: dict[str, DeferredTool] = field(default_factory=dict)
    _index: ToolIndex | None = None

    def add(self, more: Iterable[DeferredTool]) -> list[str]:
        """Adds tools; returns the names refused because another tool already has them."""
        clashes = []
        for t in more:
            if t.tool.name in self.tools:
                clashes.append(t.tool.name)
                continue
            self.tools[t.tool.name] = t
        self._index = None
        return clashes

    def search(self, query: str, k: int = DEFAULT_K) -> list[DeferredTool]:
        if self._index is None:
            names = sorted(self.tools)
            self._index = ToolIndex([ToolDoc(n, self.tools[n].tool.description, self.tools[n].tool.parameters)
                                     for n in names])
        return [self.tools[d.name] for d in self._index.search(query, k)]


def discovered(items: Sequence[common_pb2.Item]) -> set[str]:
    """Names of the tools that earlier searches of this transcript made callable."""
    return {t.name for i in items if i.WhichOneof("item") == "tool_search_output" for t in i.tool_search_output.tools}


def search_item(tools: Sequence[common_pb2.Tool]) -> common_pb2.Item:
    return common_pb2.Item(tool_search_output=common_pb2.ToolSearchOutput(tools=list(tools)))


def summary_line(tool: common_pb2.Tool) -> str:
    first = tool.description.strip().split("\n", 1)[0]
    return f"- {tool.name}: {first[:160]}"


def run_search(catalog: Catalog, found_before: set[str], args: dict,
               compact: Callable[[list[common_pb2.Tool]], list[common_pb2.Tool]] | None = None
               ) -> tuple[Result, list[common_pb2.Tool]]:
    """A `tool_search` call: the text result and the new schemas to append (never raises)."""
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return Result("error: `query` must be a non-empty string describing the tool you need", True), []
    limit = args.get("limit", DEFAULT_K)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_K:
        return Result(f"error: `limit` must be an integer from 1 to {MAX_K}", True), []
    note = ""
    if len(query) > MAX_QUERY_CHARS:
        query, note = query[:MAX_QUERY_CHARS], f" (query cut to its first {MAX_QUERY_CHARS} characters)"
    if not catalog.tools:
        return Result("no deferred tools are configured for this session", True), []
    hits = catalog.search(query, limit)
    if not hits:
        return Result(f"no tool matches {to_text(query[:200])!r}{note}; try other words"), []
    new = [h.tool for h in hits if h.tool.name not in found_before]
    old = [h.tool for h in hits if h.tool.name in found_before]
    appended = compact(new) if compact and new else new
    lines = [f"found {len(hits)} tool(s){note}; their schemas follow and they can be called now:"]
    lines += [summary_line(t) for t in new]
    if old:
        lines.append("already available from an earlier search: " + ", ".join(t.name for t in old))
    return Result("\n".join(lines)), appended
