"""The harness: the agent loop, its durable sessions and its sandboxed tools (DESIGN §6).

server.py (flags, startup) → service.py (Run streams, GetSession, ListSessions) →
loop.py (one session's turns) → conversation.py (the Converse stream to the gateway);
store.py (SQLite), tools.py + sandbox.py + workspace_files.py + file_edit.py (tools),
background.py (detached commands), approvals.py (policy), replay.py (recorded sessions).
"""
