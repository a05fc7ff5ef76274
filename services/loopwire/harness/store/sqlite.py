"""The SQLite engine (the default): one file in WAL mode, synchronous=FULL, one process.

A full disk or an I/O error is StoreFull / StoreUnavailable (nothing was written), never a bare
sqlite3 error: SQLite may have rolled the transaction back itself, and rolling back again would
fail and hide why.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from loopwire.harness.store.base import (
    DEFAULT_LEASE_S,
    SequenceTaken,
    SessionStore,
    Statement,
    StoreFull,
    StoreUnavailable,
)

log = logging.getLogger("loopwire.harness.store")

# Primary result codes of a store that cannot be used now (not of a wrong statement).
_FULL = 13  # SQLITE_FULL
_UNAVAILABLE = {5, 6, 7, 8, 10, 14, 15}  # BUSY, LOCKED, NOMEM, READONLY, IOERR, CANTOPEN, PROTOCOL

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
        with self._lock, _classified(self.path):
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            # A WAL grown by big writes (or by ones a full disk refused) shrinks back after each
            # checkpoint, so a freed disk has room for the database again.
            self._db.execute("PRAGMA journal_size_limit=4194304")
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
        with self._lock, _classified(self.path):
            self._rollback()  # one a failed ROLLBACK left open would refuse every BEGIN
            self._db.execute("BEGIN IMMEDIATE")
            try:
                counts = [self._db.execute(sql, params).rowcount for sql, params in statements]
                self._db.execute("COMMIT")  # inside: a full disk may fail the commit itself
            except sqlite3.IntegrityError as e:
                self._rollback()
                if "UNIQUE" in str(e) and "items" in str(e):
                    raise SequenceTaken(f"transcript slot already written ({e})") from e
                raise
            except BaseException:
                self._rollback()
                raise
            return counts

    def _rollback(self) -> None:
        """Roll back what is still open: after a full disk or an I/O error SQLite may already have."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as e:  # the error that led here is the one to report
                log.warning("session store %s: rollback failed: %s", self.path, e)

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock, _classified(self.path):
            return self._db.execute(sql, params).fetchall()


@contextlib.contextmanager
def _classified(path: Path) -> Iterator[None]:
    """sqlite3 errors of a store that cannot be used now as StoreFull / StoreUnavailable, naming the
    file and SQLite's reason; others (a wrong statement) as they are."""
    try:
        yield
    except sqlite3.OperationalError as e:
        code = getattr(e, "sqlite_errorcode", 0) & 0xFF
        cause = f"{path}: {e} ({getattr(e, 'sqlite_errorname', 'SQLITE_ERROR')})"
        if code == _FULL:
            raise StoreFull(cause) from e
        if code in _UNAVAILABLE:
            raise StoreUnavailable(cause) from e
        raise
