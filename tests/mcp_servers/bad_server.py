"""A deliberately bad MCP server over stdio, for the harness's failure tests.

It answers the handshake and tools/list correctly, then misbehaves as argv[1] says:
  crash         exits on the first tools/call
  hang          never answers a tools/call
  garbage       answers a tools/call with a line that is not JSON
  hang_at_start never answers the handshake
  exit_at_start exits before reading anything
  ok            answers every tools/call with the arguments it got
  big_schemas   as ok, and also lists a tool whose schema is nested 80 levels deep and one of 100 KB
"""

import json
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
TOOL = {"name": "fragile", "description": "A tool whose server misbehaves.",
        "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}}


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if MODE == "exit_at_start":
    sys.exit(2)
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        continue  # a notification
    if method == "initialize":
        if MODE == "hang_at_start":
            time.sleep(3600)
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "bad", "version": "0"}}})
    elif method == "tools/list":
        tools = [TOOL]
        if MODE == "big_schemas":
            deep: dict = {"type": "string"}
            for _ in range(40):  # 80 levels: past 64, within what the MCP SDK parses
                deep = {"type": "object", "properties": {"a": deep}}
            tools += [{"name": "deep", "description": "Nested too deep.", "inputSchema": deep},
                      {"name": "huge", "description": "Too large.",
                       "inputSchema": {"type": "object", "description": "d" * 100_000}}]
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        if MODE == "crash":
            sys.exit(3)
        if MODE == "hang":
            time.sleep(3600)
        if MODE == "garbage":
            sys.stdout.write("this is {not json-rpc\n")
            sys.stdout.flush()
            continue
        args = msg["params"].get("arguments", {})
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": json.dumps(args)}]}})
    else:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"no method {method}"}})
