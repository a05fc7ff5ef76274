"""The SQLite engine (the default): one file in WAL mode, synchronous=FULL, one process."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from loopwire.harness.store.base import DEFAULT_LEASE_S, SequenceTaken, SessionStore, Statement

SCHEMA = """
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
    tenant TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    heartbeat_ms INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0
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
CREATE TABLE IF NOT EXISTS started_calls (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    call BLOB NOT NULL,
    started_at_ns INTEGER NOT NULL,
    PRIMARY KEY (session_id, call_id)
);
CREATE TRIGGER IF NOT EXISTS items_append_only BEFORE UPDATE ON items
BEGIN SELECT RAISE(ABORT, 'items are append-only'); END;
"""

# Columns added after the first release, for files written before them.
_ADDED = {
    "tenant": "TEXT NOT NULL DEFAULT ''",
    "owner": "TEXT NOT NULL DEFAULT ''",
    "heartbeat_ms": "INTEGER NOT NULL DEFAULT 0",
    "cancel_requested": "INTEGER NOT NULL DEFAULT 0",
}


class SqliteSessionStore(SessionStore):
    """One SQLite file; safe to call from worker threads (one connection behind a lock)."""

    def __init__(self, path: str | Path, lease_s: float = DEFAULT_LEASE_S) -> None:
        super().__init__(lease_s)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
            for name, decl in _ADDED.items():
                if name not in columns:  # a file from before this column
                    self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {decl}")

    def describe(self) -> str:
        return f"sqlite:///{self.path}"

    def _close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, statements: list[Statement], recheck: Callable[[], bool] | None = None) -> list[int]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            counts = []
            try:
                for sql, params in statements:
                    counts.append(self._db.execute(sql, params).rowcount)
            except sqlite3.IntegrityError as e:
                self._db.execute("ROLLBACK")
                if "UNIQUE" in str(e) and "items" in str(e):
                    raise SequenceTaken(f"transcript slot already written ({e})") from e
                raise
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return counts

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()
