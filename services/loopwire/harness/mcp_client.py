"""MCP servers as sources of deferred tools (the official `mcp` SDK; stdio and streamable HTTP).

Servers are named in the harness configuration only (`--mcp-server NAME=COMMAND ARGS...` or
`NAME=http://...`); a StartTask may pick some by name but never names a command, since the
harness would run it. One connection per server, tenant and event loop, shared by that
tenant's sessions (a server's state, such as a memory graph, never crosses tenants) and
reopened on the next use after the server died. A server's tools are offered as
`<server>__<tool>` so they never clash with built-in tools or with another server's.

A misbehaving server never hangs or crashes a session: a failed start becomes a note in the
tool_search result, and a crash, a hang (per-call timeout) or malformed JSON-RPC during a
call becomes an error result naming the server and what went wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED

from loopwire.common import json_limits
from loopwire.harness.tool_catalog import DeferredTool, Result
from loopwire.v1 import common_pb2

log = logging.getLogger("loopwire.harness.mcp")

SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class McpServer:
    name: str
    command: str = ""  # stdio: the program and its arguments
    args: tuple[str, ...] = ()
    url: str = ""  # streamable HTTP endpoint
    env: tuple[tuple[str, str], ...] = ()
    connect_timeout: float = 30.0
    call_timeout: float = 60.0

    def for_tenant(self, tenant: str) -> McpServer:
        """`{tenant}` in arguments and environment values becomes the tenant's name, so each tenant's
        process can keep its state apart (e.g. MEMORY_FILE_PATH=/state/{tenant}/memory.jsonl)."""
        name = _UNSAFE.sub("_", tenant) or "default"
        return dataclasses.replace(self, args=tuple(a.replace("{tenant}", name) for a in self.args),
                                   env=tuple((k, v.replace("{tenant}", name)) for k, v in self.env))


def parse_spec(spec: str, **kwargs: Any) -> McpServer:
    """`NAME=COMMAND ARG...` (stdio) or `NAME=http(s)://...` (streamable HTTP)."""
    name, sep, rest = spec.partition("=")
    name = name.strip()
    if not sep or not name or _UNSAFE.search(name) or not rest.strip():
        raise ValueError(f"MCP server {spec!r}: expected NAME=COMMAND ARGS... or NAME=URL (NAME: letters, "
                         "digits, _ and -)")
    rest = rest.strip()
    if rest.startswith(("http://", "https://")):
        return McpServer(name, url=rest, **kwargs)
    argv = shlex.split(rest)
    return McpServer(name, command=argv[0], args=tuple(argv[1:]), **kwargs)


def tool_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"


class ServerError(Exception):
    """The server failed, not the tool: it crashed, hung or spoke malformed JSON-RPC."""


@dataclass
class Connection:
    """One live session with one server, owned by a task (the SDK's contexts are task-bound)."""

    server: McpServer
    tools: list[Any] = field(default_factory=list)
    session: Any = None
    problem: str = ""  # why the connection is unusable (set once it is)
    _task: asyncio.Task[None] | None = None
    _ready: asyncio.Future[None] | None = None
    _closing: asyncio.Event = field(default_factory=asyncio.Event)
    _broken: asyncio.Future[str] | None = None

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and not self.problem

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._ready, self._broken = loop.create_future(), loop.create_future()
        self._task = asyncio.create_task(self._main(), name=f"mcp:{self.server.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.server.connect_timeout)
        except TimeoutError:
            self._fail(f"did not finish the MCP handshake within {self.server.connect_timeout:g}s")
            await self.close(graceful=False)
            raise ServerError(self.problem) from None

    def _fail(self, why: str) -> None:
        if not self.problem:
            self.problem = why
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(ServerError(why))
            self._ready.exception()  # retrieved: no "never retrieved" warning when nobody waits
        if self._broken is not None and not self._broken.done():
            self._broken.set_result(why)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):  # a line that is not JSON-RPC
            self._fail(f"sent malformed JSON-RPC ({type(message).__name__}: {str(message)[:200]})")

    async def _main(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.server.url:
                    streams = await stack.enter_async_context(streamable_http_client(self.server.url))
                else:
                    params = StdioServerParameters(command=self.server.command, args=list(self.server.args),
                                                   env=dict(self.server.env) or None)
                    errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115 - closed by the stack
                    streams = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                session = await stack.enter_async_context(
                    ClientSession(streams[0], streams[1], message_handler=self._on_message))
                await session.initialize()
                listed = await session.list_tools()
                self.session, self.tools = session, list(listed.tools)
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(None)
                await self._closing.wait()
        except asyncio.CancelledError:
            self._fail("was stopped")
            raise
        except BaseException as e:  # noqa: BLE001 - anything the server or transport did
            self._fail(f"failed: {_describe(e)}")
        finally:
            self._fail("exited (the connection closed)")

    async def call(self, name: str, args: dict) -> Result:
        if not self.alive or self.session is None or self._broken is None:
            raise ServerError(self.problem or "is not connected")
        call = asyncio.ensure_future(self.session.call_tool(name, args))
        done, _ = await asyncio.wait({call, self._broken, self._task}, timeout=self.server.call_timeout,  # type: ignore[arg-type]
                                     return_when=asyncio.FIRST_COMPLETED)
        if call not in done:
            call.cancel()
            if not done:
                self._fail(f"did not answer within {self.server.call_timeout:g}s")
                await self.close(graceful=False)  # a hung server is restarted on the next use
            raise ServerError(self.problem)
        try:
            result = call.result()
        except Exception as e:  # noqa: BLE001 - a JSON-RPC error or a transport failure
            if getattr(getattr(e, "error", None), "code", None) == CONNECTION_CLOSED:
                self._fail("exited or closed its connection")
                await self.close(graceful=False)
            if self.problem:
                raise ServerError(self.problem) from None
            return Result(f"error: {_describe(e)}", True)
        return _result(result)

    async def close(self, graceful: bool = True) -> None:
        """Ends the session; the SDK stops the server (stdin closed, then its process tree killed)."""
        self._closing.set()
        if self._task is not None and not self._task.done():
            if graceful:
                await asyncio.wait({self._task}, timeout=10)
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"[:500]


def _result(result: Any) -> Result:
    """An MCP CallToolResult as text: text parts as they are, other parts described."""
    parts = []
    for c in getattr(result, "content", None) or []:
        kind = getattr(c, "type", "")
        if kind == "text":
            parts.append(c.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(c, 'mime_type', '')}, {len(getattr(c, 'data', '') or '') * 3 // 4} bytes]")
        elif kind == "resource":
            res = c.resource
            parts.append(getattr(res, "text", None) or f"[resource {res.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {c.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, sort_keys=True))
    is_error = bool(getattr(result, "is_error", False))
    text = "\n".join(parts) or "(no output)"
    return Result(f"error: {text}" if is_error else text, is_error)


class Pool:
    """One connection per (tenant, server), reopened on the next use after it broke."""

    def __init__(self) -> None:
        self.connections: dict[tuple[str, str], Connection] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def get(self, server: McpServer, tenant: str = "") -> Connection:
        key = (tenant, server.name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            server = server.for_tenant(tenant)
            conn = self.connections.get(key)
            if conn is None or not conn.alive or conn.server != server:
                if conn is not None:
                    await conn.close()
                conn = Connection(server)
                self.connections[key] = conn
                await conn.open()
            return conn

    async def close(self) -> None:
        for conn in list(self.connections.values()):
            await conn.close()
        self.connections.clear()


_POOLS: dict[int, Pool] = {}


def pool() -> Pool:
    """The pool of the running event loop (connections cannot cross loops)."""
    return _POOLS.setdefault(id(asyncio.get_running_loop()), Pool())


async def close_all() -> None:
    p = _POOLS.pop(id(asyncio.get_running_loop()), None)
    if p is not None:
        await p.close()


def selected(servers: list[McpServer], names: list[str]) -> tuple[list[McpServer], list[str]]:
    """The configured servers a session asked for (all when it named none), and unknown names."""
    if not names:
        return list(servers), []
    by_name = {s.name: s for s in servers}
    wanted = list(dict.fromkeys(names))  # each once, in the order asked
    return [by_name[n] for n in wanted if n in by_name], [n for n in wanted if n not in by_name][:10]


def _deferred(server: McpServer, tool: Any, tenant: str) -> DeferredTool:
    schema = tool.input_schema if isinstance(getattr(tool, "input_schema", None), dict) else {"type": "object"}
    description = tool.description or getattr(tool, "title", None) or tool.name

    async def run(args: dict) -> Result:
        try:
            conn = await pool().get(server, tenant)
            return await conn.call(tool.name, args)
        except ServerError as e:
            return Result(f"error: MCP server {server.name!r} {e} while running {tool.name!r}; the call's effect "
                          "is unknown. The server is restarted on the next call.", True)

    return DeferredTool(common_pb2.Tool(name=tool_name(server.name, tool.name), description=description,
                                        parameters=json.dumps(schema, sort_keys=True)), run,
                        source=f"mcp:{server.name}")


def _schema_problem(tool: Any, max_schema_bytes: int) -> str:
    """Why a listed tool's schema is left out ('' when it is not): nested past the JSON bound every
    tier shares, or larger than the harness takes from a client (--max-tool-schema-bytes)."""
    schema = getattr(tool, "input_schema", None)
    if json_limits.depth(schema) > json_limits.MAX_JSON_DEPTH:
        return f"its schema is nested deeper than {json_limits.MAX_JSON_DEPTH} levels"
    size = len(json.dumps(schema, sort_keys=True).encode()) if isinstance(schema, dict) else 0
    if size > max_schema_bytes:
        return f"its schema is {size} bytes, over the limit of {max_schema_bytes} (--max-tool-schema-bytes)"
    return ""


async def catalog_tools(servers: list[McpServer], names: list[str], tenant: str = "",
                        max_schema_bytes: int = 64 << 10) -> tuple[list[DeferredTool], list[str]]:
    """The deferred tools of the selected servers, connecting in parallel; notes say what failed
    (a server that did not start, a tool whose schema is over the bounds: left out, the rest kept)."""
    chosen, unknown = selected(servers, names)
    notes = [f"no MCP server named {n!r} is configured" for n in unknown]

    async def one(server: McpServer) -> list[DeferredTool]:
        try:
            conn = await pool().get(server, tenant)
        except ServerError as e:
            notes.append(f"MCP server {server.name!r} {e}; its tools are unavailable")
            return []
        kept = []
        for t in conn.tools:
            if problem := _schema_problem(t, max_schema_bytes):
                notes.append(f"MCP server {server.name!r}: tool {t.name!r} left out: {problem}")
            else:
                kept.append(_deferred(server, t, tenant))
        return kept

    found = await asyncio.gather(*(one(s) for s in chosen))
    return [t for ts in found for t in ts], notes
