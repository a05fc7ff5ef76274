"""The PostgreSQL engine: several harness replicas share sessions through one database.

Same tables and keys as SQLite. A connection lost mid-transaction (a restart, a failover, a
dropped link) is retried with backoff for up to ``retry_s`` seconds on a fresh connection: every
write is either idempotent or, for the inserts, rechecked, so a commit whose answer was lost is
not written twice and not reported as a conflict. After the window, StoreUnavailable says which
database could not be reached; nothing was half-written. A full disk on the server is StoreFull
at once (retrying would not free it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors
from psycopg_pool import ConnectionPool

from loopwire.harness.store.base import (
    DEFAULT_LEASE_S,
    SequenceTaken,
    SessionStore,
    Statement,
    StoreFull,
    StoreUnavailable,
)

log = logging.getLogger("loopwire.harness.store")

DEFAULT_RETRY_S = 30.0

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    status INTEGER NOT NULL,
    task TEXT NOT NULL,
    workspace TEXT NOT NULL,
    instructions TEXT NOT NULL,
    tools BYTEA NOT NULL,
    start BYTEA NOT NULL,
    replay_source TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    item_count BIGINT NOT NULL DEFAULT 0,
    turn_count BIGINT NOT NULL DEFAULT 0,
    last_response_id TEXT NOT NULL DEFAULT '',
    held_items BIGINT NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    tenant TEXT NOT NULL DEFAULT '',
    owner TEXT NOT NULL DEFAULT '',
    heartbeat_ms BIGINT NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0
)""",
    "CREATE INDEX IF NOT EXISTS sessions_newest ON sessions (created_at_ms DESC, session_id DESC)",
    """CREATE TABLE IF NOT EXISTS items (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    item BYTEA NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
)""",
    """CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL,
    turn BIGINT NOT NULL,
    profile BYTEA NOT NULL,
    PRIMARY KEY (session_id, turn)
)""",
    """CREATE TABLE IF NOT EXISTS pending_calls (
    session_id TEXT NOT NULL,
    call_index BIGINT NOT NULL,
    call BYTEA NOT NULL,
    approval_id TEXT NOT NULL DEFAULT '',
    decision INTEGER NOT NULL DEFAULT 0,
    result BYTEA,
    PRIMARY KEY (session_id, call_index)
)""",
    "CREATE INDEX IF NOT EXISTS pending_calls_approval ON pending_calls (approval_id)",
    """CREATE TABLE IF NOT EXISTS started_calls (
    session_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    call BYTEA NOT NULL,
    started_at_ns BIGINT NOT NULL,
    PRIMARY KEY (session_id, call_id)
)""",
    """CREATE OR REPLACE FUNCTION loopwire_items_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'items are append-only'; END $$""",
    "DROP TRIGGER IF EXISTS items_append_only ON items",
    "CREATE TRIGGER items_append_only BEFORE UPDATE ON items FOR EACH ROW EXECUTE FUNCTION loopwire_items_append_only()",
]
# Replicas starting together create the schema one at a time (an arbitrary fixed lock key).
_SCHEMA_LOCK = 0x6C6F6F70


def redact(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresSessionStore(SessionStore):
    shared = True

    def __init__(self, url: str, lease_s: float = DEFAULT_LEASE_S, retry_s: float = DEFAULT_RETRY_S,
                 pool_size: int = 4) -> None:
        super().__init__(lease_s)
        self.url = url
        self.retry_s = retry_s
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=False, name="sessions",
                                    kwargs={"connect_timeout": 5})
        try:
            self._pool.open(wait=True, timeout=retry_s)
        except psycopg.OperationalError as e:
            self._pool.close()
            raise StoreUnavailable(f"session store {self.describe()}: cannot connect within {retry_s:.0f} s ({e})"
                                   ) from None
        self._tx([(sql, ()) for sql in [f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})", *SCHEMA]])

    def describe(self) -> str:
        return redact(self.url)

    def _close(self) -> None:
        self._pool.close()

    def _retrying(self, attempt: Callable[[psycopg.Connection], object],
                  recheck: Callable[[], bool] | None = None) -> object:
        """Run ``attempt`` on a pooled connection, retrying lost connections within the window.
        A unique violation after such a retry is checked with ``recheck``: True means the
        earlier try had committed (its answer was lost), so the write is done."""
        deadline = time.monotonic() + self.retry_s
        delay = 0.05
        uncertain = False
        while True:
            try:
                with self._pool.connection(timeout=max(0.1, deadline - time.monotonic())) as conn:
                    return attempt(conn)
            except errors.UniqueViolation:
                if uncertain and recheck is not None and recheck():
                    return []
                raise
            except errors.DiskFull as e:  # rolled back; waiting would not free the space
                raise StoreFull(f"{self.describe()}: {str(e).strip()}") from None
            except psycopg.OperationalError as e:
                if time.monotonic() + delay > deadline:
                    raise StoreUnavailable(f"session store {self.describe()} unavailable for {self.retry_s:.0f} s: "
                                           f"{type(e).__name__}: {str(e).strip()}") from None
                log.warning("session store %s: %s; retrying in %.2f s", self.describe(), str(e).strip(), delay)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                uncertain = True

    def _tx(self, statements: list[Statement], recheck: Callable[[], bool] | None = None) -> list[int]:
        def attempt(conn: psycopg.Connection) -> list[int]:
            with conn.transaction():
                return [conn.execute(_pg(sql), params).rowcount for sql, params in statements]

        try:
            return self._retrying(attempt, recheck)  # type: ignore[return-value]
        except errors.UniqueViolation as e:
            if e.diag.table_name == "items":
                raise SequenceTaken(f"transcript slot already written ({str(e).strip()})") from e
            raise

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        def attempt(conn: psycopg.Connection) -> list[tuple]:
            with conn.transaction():
                return conn.execute(_pg(sql), params).fetchall()

        return self._retrying(attempt)  # type: ignore[return-value]


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")
