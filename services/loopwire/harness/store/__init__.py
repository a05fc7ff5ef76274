"""Durable sessions: one interface (SessionStore), two engines chosen by a URL.

``sqlite:///path`` (or a bare path): one file, one harness process (the default).
``postgresql://user@host:port/db``: several harness replicas share sessions.
"""

from __future__ import annotations

from pathlib import Path

from loopwire.harness.store.base import (
    DEFAULT_LEASE_S,
    Decision,
    PendingCall,
    SequenceTaken,
    SessionBusy,
    SessionStore,
    Status,
    StoredSession,
    StoreError,
    StoreFull,
    StoreUnavailable,
    decode_page_token,
    now_ms,
)
from loopwire.harness.store.sqlite import SqliteSessionStore

__all__ = [
    "DEFAULT_LEASE_S", "Decision", "PendingCall", "SequenceTaken", "SessionBusy", "SessionStore", "SqliteSessionStore",
    "Status", "StoreError", "StoreFull", "StoreUnavailable", "StoredSession", "decode_page_token", "now_ms", "open_store",
]


def open_store(target: str | Path, lease_s: float = DEFAULT_LEASE_S) -> SessionStore:
    """The store a ``--sessions`` value names: ``sqlite:///path``, ``postgresql://...`` or a file path."""
    text = str(target)
    if text.startswith(("postgresql://", "postgres://")):
        from loopwire.harness.store.postgres import PostgresSessionStore  # psycopg only when asked for

        return PostgresSessionStore(text, lease_s=lease_s)
    if text.startswith("sqlite://"):
        path = text.removeprefix("sqlite://")
        if not path.startswith("/"):
            raise ValueError(f"--sessions {text!r}: write sqlite:///relative/path or sqlite:////absolute/path")
        text = path[1:]  # sqlite:///x -> x (relative), sqlite:////x -> /x
        if not text:
            raise ValueError("--sessions sqlite:///: a file path is needed")
    elif "://" in text:
        raise ValueError(f"--sessions {text!r}: use sqlite:///path or postgresql://user@host:port/database")
    return SqliteSessionStore(text, lease_s=lease_s)
