"""The SQLite engine (the default): one file in WAL mode, synchronous=FULL, one process.

A full disk or an I/O error is StoreFull / StoreUnavailable (nothing was written), never a bare
sqlite3 error: SQLite may have rolled the transaction back itself, and rolling back again would
fail and hide why.

The started-call journal (``try_record_call_started``) stays off a command's path: the event loop
writes a call's row itself when the store's lock is free (no worker thread, no fsync), else queues
it for whoever holds the lock, who writes it as soon as it lets go. Each flush is one transaction of
every row queued, committed with ``synchronous=NORMAL`` (WAL: the commit is written to the WAL, not
synced, and never checkpoints: the event loop does no fsync). Every other write is committed with
``synchronous=FULL`` as before, and a FULL commit's sync of the WAL makes every journal row
committed before it durable too. So:

- what is acknowledged to a client (items, statuses, approvals, turns: every write but the journal)
  is durable when its call returns, against a crash of the process and against power loss;
- a harness process that crashes (killed, OOM) loses only journal rows still queued (the rare case
  that a worker thread held the lock as the call started; each is written within that thread's one
  transaction): their calls are not reported lost after the restart. A row written inline
  (``try_record_call_started`` returned with the lock free) survives it;
- power loss (or an OS crash) may also lose journal rows committed since the last FULL commit or
  checkpoint, newest first (the WAL keeps a prefix of the commits): at most the calls of the turn
  that was running, whose turn is not stored either. Nothing else is lost.
"""

from __future__ import annotations

import collections
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
from loopwire.v1 import common_pb2

log = logging.getLogger("loopwire.harness.store")

# Primary result codes of a store that cannot be used now (not of a wrong statement).
_FULL = 13  # SQLITE_FULL
_UNAVAILABLE = {5, 6, 7, 8, 10, 14, 15}  # BUSY, LOCKED, NOMEM, READONLY, IOERR, CANTOPEN, PROTOCOL
_AUTOCHECKPOINT = 1000  # pages of WAL after which a commit checkpoints (SQLite's default)

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
        # Journal rows waiting for the lock (see the module's docstring), in the order they were made.
        self._queue: collections.deque[Statement] = collections.deque()
        self._queue_lock = threading.Lock()
        self._normal = False  # the connection is at synchronous=NORMAL (a journal flush is under way or failed)
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
            try:
                self._flush_journal()  # closing the last connection then checkpoints (and syncs) the WAL
            except (StoreFull, StoreUnavailable, sqlite3.Error) as e:
                log.warning("session store %s: %d started calls not journaled at close: %s", self.path,
                            len(self._queue), e)
            self._db.close()

    # -- the started-call journal ----------------------------------------------------

    def try_record_call_started(self, session_id: str, call: common_pb2.FunctionCall) -> bool:
        """Journal a call from the event loop without waiting: written now when the lock is free,
        else queued for the lock's holder (the module's docstring says what a crash can lose).
        StoreFull / StoreUnavailable when written now and refused (then it is not journaled)."""
        with self._queue_lock:
            statement = self._started_statement(session_id, call)
            self._queue.append(statement)
        if not self._lock.acquire(blocking=False):
            return True  # its holder writes it when it lets go
        try:
            self._flush_journal()
        except BaseException:
            with self._queue_lock, contextlib.suppress(ValueError):
                self._queue.remove(statement)  # this call fails: not journaled (earlier rows stay queued)
            raise
        finally:
            self._release()
        return True

    def _flush_journal(self) -> None:
        """Write every queued journal row in one transaction at synchronous=NORMAL (the lock held)."""
        with self._queue_lock:
            batch = list(self._queue)
            self._queue.clear()
        if not batch:
            return
        try:
            with _classified(self.path):
                self._rollback()
                self._db.execute("PRAGMA synchronous=NORMAL")
                # No checkpoint (its syncs) on the event loop: the next FULL commit, in a worker thread, does it.
                self._db.execute("PRAGMA wal_autocheckpoint=0")
                self._normal = True
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for sql, params in batch:
                        self._db.execute(sql, params)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
        except BaseException:
            with self._queue_lock:
                self._queue.extendleft(reversed(batch))  # first again, for the next flush
            raise
        with _classified(self.path):
            self._full()  # (if this fails, every later write first tries again: none commits at NORMAL)

    def _full(self) -> None:
        if self._normal:
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(f"PRAGMA wal_autocheckpoint={_AUTOCHECKPOINT}")
            self._normal = False

    def _release(self) -> None:
        """Let go of the lock, then write what was queued meanwhile (if no one else holds it by then:
        whoever does writes it as they let go, so no row waits for a later write)."""
        self._lock.release()
        while self._queue and self._lock.acquire(blocking=False):
            try:
                self._flush_journal()
            except (StoreFull, StoreUnavailable, sqlite3.Error) as e:  # it stays queued: the next write retries
                log.warning("session store %s: started calls not journaled yet: %s", self.path, e)
                return
            finally:
                self._lock.release()

    @contextlib.contextmanager
    def _locked(self, read: bool = False) -> Iterator[None]:
        """The connection, to use alone: queued journal rows written first (so every read sees them and
        every write comes after them), and those queued meanwhile as it is let go. A write whose
        queued rows cannot be written fails as they did (nothing of it written); a read goes on."""
        self._lock.acquire()
        try:
            try:
                with _classified(self.path):
                    self._flush_journal()
                    self._full()
            except (StoreFull, StoreUnavailable, sqlite3.Error) as e:
                if not read:
                    raise
                log.warning("session store %s: started calls not journaled yet: %s", self.path, e)
            yield
        finally:
            self._release()

    def _tx(self, statements: list[Statement], recheck: Callable[[], bool] | None = None) -> list[int]:
        with self._locked(), _classified(self.path):
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
        with self._locked(read=True), _classified(self.path):
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
