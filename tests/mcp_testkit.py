"""The real MCP servers the tests start over stdio (npm ci in tests/mcp_servers installs them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwire.harness import mcp_client
from loopwire.harness.mcp_client import McpServer

BIN = Path(__file__).resolve().parent / "mcp_servers" / "node_modules" / ".bin"


async def servers_installed():  # noqa: ANN201 - an async generator fixture's body
    """Fails the test when the servers are missing; closes the connections its event loop owns."""
    if not (BIN / "mcp-server-memory").exists():
        pytest.fail("the npm MCP servers are not installed: run `make tools` (npm ci in tests/mcp_servers)")
    yield
    await mcp_client.close_all()


def npm_server(name: str, binary: str, *args: str, env: tuple = ()) -> McpServer:
    return McpServer(name, command=str(BIN / binary), args=args, env=env, connect_timeout=60)


def memory_server(tmp: Path) -> McpServer:
    """The memory server keeps its graph in a file: one per test, never in node_modules."""
    return npm_server("memory", "mcp-server-memory", env=(("MEMORY_FILE_PATH", str(tmp / "memory.jsonl")),))
