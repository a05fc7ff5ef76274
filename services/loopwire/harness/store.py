"""Durable sessions in SQLite (WAL): an append-only items table is the transcript.

Every item is committed (synchronous=FULL) before the next model call, so a harness
killed at any point resumes with exactly the transcript it had (invariant 7). Tool calls
of an unfinished turn (waiting for approval) live in `pending_calls` until resolved.
"""

from __future__ import annotations

import base64
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from loopwire.v1 import common_pb2, harness_pb2

Status = harness_pb2.SessionStatus

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    status INTEGER NOT NULL,
    task TEXT NOT NULL,
    workspace TEXT NOT NULL,
    instructions TEXT NOT NULL,
    tools BLOB NOT NULL,
    start BLOB NOT NULL,
    replay_source TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    item_count INTEGER NOT NULL DEFAULT 0,
    turn_count INTEGER NOT NULL DEFAULT 0,
    last_response_id TEXT NOT NULL DEFAULT '',
    held_items INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    tenant TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS sessions_newest ON sessions (created_at_ms DESC, session_id DESC);
CREATE TABLE IF NOT EXISTS items (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    item BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    profile BLOB NOT NULL,
    PRIMARY KEY (session_id, turn)
);
CREATE TABLE IF NOT EXISTS pending_calls (
    session_id TEXT NOT NULL,
    call_index INTEGER NOT NULL,
    call BLOB NOT NULL,
    approval_id TEXT NOT NULL DEFAULT '',
    decision INTEGER NOT NULL DEFAULT 0,
    result BLOB,
    PRIMARY KEY (session_id, call_index)
);
CREATE TRIGGER IF NOT EXISTS items_append_only BEFORE UPDATE ON items
BEGIN SELECT RAISE(ABORT, 'items are append-only'); END;
"""


class Decision:
    NONE = 0  # the call needs no approval (it ran, or waits behind another call)
    PENDING = 1
    APPROVED = 2
    DENIED = 3


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class PendingCall:
    index: int
    call: common_pb2.FunctionCall
    approval_id: str
    # A Decision value: PENDING until a human answers.
    decision: int
    # Set once the call ran (or was refused) while another call of its turn still waits.
    result: common_pb2.FunctionCallOutput | None


@dataclass
class StoredSession:
    session: harness_pb2.Session
    start: harness_pb2.StartTask
    instructions: str
    tools: list[common_pb2.Tool]
    items: list[common_pb2.Item]
    turns: list[harness_pb2.TurnProfile]
    last_response_id: str
    held_items: int
    pending: list[PendingCall] = field(default_factory=list)
    tenant: str = ""  # the tenant that owns the session: no other tenant sees or drives it


class SessionStore:
    """One SQLite file; safe to call from worker threads (one connection behind a lock)."""

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
            if "tenant" not in columns:  # a file from before sessions had owners
                self._db.execute("ALTER TABLE sessions ADD COLUMN tenant TEXT NOT NULL DEFAULT ''")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, statements: list[tuple[str, tuple]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    self._db.execute(sql, params)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # -- writes --------------------------------------------------------------------

    def create(
        self,
        session_id: str,
        start: harness_pb2.StartTask,
        instructions: str,
        tools: list[common_pb2.Tool],
        workspace: str,
        replay_source: str,
        tenant: str = "",
    ) -> None:
        t = now_ms()
        tools_blob = common_pb2.ToolSearchOutput(tools=tools).SerializeToString(deterministic=True)
        self._tx([(
            "INSERT INTO sessions (session_id, status, task, workspace, instructions, tools, start, replay_source,"
            " created_at_ms, updated_at_ms, tenant) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, Status.SESSION_STATUS_RUNNING, start.task, workspace, instructions, tools_blob,
             start.SerializeToString(deterministic=True), replay_source, t, t, tenant),
        )])

    def exists(self, session_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)))

    def append(self, session_id: str, items: list[common_pb2.Item], *, first_seq: int, new_turn: bool = False) -> None:
        """Append items at ``first_seq`` (the primary key refuses a second writer of a slot)."""
        t = now_ms()
        statements: list[tuple[str, tuple]] = [
            ("INSERT INTO items (session_id, seq, item, created_at_ms) VALUES (?, ?, ?, ?)",
             (session_id, first_seq + i, item.SerializeToString(deterministic=True), t))
            for i, item in enumerate(items)
        ]
        statements.append((
            "UPDATE sessions SET item_count = ?, turn_count = turn_count + ?, updated_at_ms = ? WHERE session_id = ?",
            (first_seq + len(items), int(new_turn), t, session_id),
        ))
        self._tx(statements)

    def set_conversation(self, session_id: str, last_response_id: str, held_items: int) -> None:
        self._tx([("UPDATE sessions SET last_response_id = ?, held_items = ? WHERE session_id = ?",
                   (last_response_id, held_items, session_id))])

    def add_turn(self, session_id: str, profile: harness_pb2.TurnProfile) -> None:
        self._tx([("INSERT OR REPLACE INTO turns (session_id, turn, profile) VALUES (?, ?, ?)",
                   (session_id, profile.turn, profile.SerializeToString(deterministic=True)))])

    def set_status(self, session_id: str, status: int, error: str = "") -> None:
        self._tx([("UPDATE sessions SET status = ?, error = ?, updated_at_ms = ? WHERE session_id = ?",
                   (status, error, now_ms(), session_id))])

    def save_pending(self, session_id: str, pending: list[PendingCall]) -> None:
        """Replace the unfinished turn's calls (and mark the session as awaiting approval)."""
        statements: list[tuple[str, tuple]] = [("DELETE FROM pending_calls WHERE session_id = ?", (session_id,))]
        for p in pending:
            statements.append((
                "INSERT INTO pending_calls (session_id, call_index, call, approval_id, decision, result)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, p.index, p.call.SerializeToString(deterministic=True), p.approval_id, p.decision,
                 p.result.SerializeToString(deterministic=True) if p.result is not None else None),
            ))
        if any(p.decision == Decision.PENDING for p in pending):
            statements.append(("UPDATE sessions SET status = ?, updated_at_ms = ? WHERE session_id = ?",
                               (Status.SESSION_STATUS_AWAITING_APPROVAL, now_ms(), session_id)))
        self._tx(statements)

    def decide(self, approval_id: str, approved: bool, denial: common_pb2.FunctionCallOutput | None) -> None:
        self._tx([("UPDATE pending_calls SET decision = ?, result = ? WHERE approval_id = ?",
                   (Decision.APPROVED if approved else Decision.DENIED,
                    denial.SerializeToString(deterministic=True) if denial is not None else None, approval_id))])

    def clear_pending(self, session_id: str) -> None:
        self._tx([("DELETE FROM pending_calls WHERE session_id = ?", (session_id,))])

    def mark_interrupted(self) -> int:
        """At startup: sessions left RUNNING by a dead process can be resumed."""
        with self._lock:
            cur = self._db.execute("UPDATE sessions SET status = ? WHERE status = ?",
                                   (Status.SESSION_STATUS_INTERRUPTED, Status.SESSION_STATUS_RUNNING))
            return cur.rowcount

    # -- reads ---------------------------------------------------------------------

    def session_of_approval(self, approval_id: str) -> str | None:
        rows = self._query("SELECT session_id FROM pending_calls WHERE approval_id = ?", (approval_id,))
        return rows[0][0] if rows else None

    def load(self, session_id: str) -> StoredSession | None:
        rows = self._query(
            "SELECT session_id, status, task, workspace, item_count, turn_count, created_at_ms, updated_at_ms,"
            " replay_source, instructions, tools, start, last_response_id, held_items, tenant FROM sessions"
            " WHERE session_id = ?", (session_id,))
        if not rows:
            return None
        row = rows[0]
        tools = common_pb2.ToolSearchOutput.FromString(row[10]).tools
        items = [common_pb2.Item.FromString(r[0]) for r in
                 self._query("SELECT item FROM items WHERE session_id = ? ORDER BY seq", (session_id,))]
        turns = [harness_pb2.TurnProfile.FromString(r[0]) for r in
                 self._query("SELECT profile FROM turns WHERE session_id = ? ORDER BY turn", (session_id,))]
        pending = [
            PendingCall(r[0], common_pb2.FunctionCall.FromString(r[1]), r[2], r[3],
                        common_pb2.FunctionCallOutput.FromString(r[4]) if r[4] is not None else None)
            for r in self._query("SELECT call_index, call, approval_id, decision, result FROM pending_calls"
                                 " WHERE session_id = ? ORDER BY call_index", (session_id,))
        ]
        return StoredSession(
            session=_session(row[:9]),
            start=harness_pb2.StartTask.FromString(row[11]),
            instructions=row[9],
            tools=list(tools),
            items=items,
            turns=turns,
            last_response_id=row[12],
            held_items=row[13],
            pending=pending,
            tenant=row[14],
        )

    def list(self, page_size: int, page_token: str, tenant: str = "") -> tuple[list[harness_pb2.Session], str]:
        """The tenant's sessions, newest first; the token is an opaque cursor (created_at_ms, session_id)."""
        sql = ("SELECT session_id, status, task, workspace, item_count, turn_count, created_at_ms, updated_at_ms,"
               " replay_source FROM sessions WHERE tenant = ?")
        params: tuple = (tenant,)
        if page_token:
            created, sid = decode_page_token(page_token)
            sql += " AND (created_at_ms, session_id) < (?, ?)"
            params = (tenant, created, sid)
        sql += " ORDER BY created_at_ms DESC, session_id DESC LIMIT ?"
        rows = self._query(sql, (*params, page_size + 1))
        sessions = [_session(r) for r in rows[:page_size]]
        next_token = ""
        if len(rows) > page_size:
            last = sessions[-1]
            next_token = base64.urlsafe_b64encode(f"{last.created_at_ms}:{last.session_id}".encode()).decode()
        return sessions, next_token


def decode_page_token(token: str) -> tuple[int, str]:
    """ValueError for anything that is not a token this store made."""
    try:
        created, sid = base64.urlsafe_b64decode(token.encode("ascii")).decode().split(":", 1)
        return int(created), sid
    except (ValueError, UnicodeError) as e:
        raise ValueError("not a page token from ListSessions") from e


def _session(row: tuple) -> harness_pb2.Session:
    return harness_pb2.Session(
        session_id=row[0], status=row[1], task=row[2], workspace=row[3], item_count=row[4], turn_count=row[5],
        created_at_ms=row[6], updated_at_ms=row[7], replay_source=row[8],
    )
