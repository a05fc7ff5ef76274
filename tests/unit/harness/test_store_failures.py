"""A store that cannot write says so with its own error (no root needed, unlike test_full_disk):
SQLite's own size limit gives the same SQLITE_FULL as a full disk, and PostgreSQL's DiskFull is
not waited out as if the server were gone."""

from __future__ import annotations

import time

import pytest
from postgres_server import shared
from psycopg import errors

from loopwire.harness.loop import user_message
from loopwire.harness.store import SqliteSessionStore, StoreFull, open_store
from loopwire.v1 import common_pb2, harness_pb2


def test_sqlite_full_is_store_full_and_leaves_the_store_usable(tmp_path):
    store = SqliteSessionStore(tmp_path / "h.db")
    store.create("s1", harness_pb2.StartTask(task="t"), "i", [], "/w", "")
    store.append("s1", [user_message("before")], first_seq=0)
    pages = store._query("PRAGMA page_count")[0][0]
    store._db.execute(f"PRAGMA max_page_count={pages + 5}")  # SQLITE_FULL, and SQLite rolls back itself
    with pytest.raises(StoreFull) as raised:
        store.append("s1", [user_message("x" * (1 << 20))], first_seq=1)
    error = raised.value.to_proto()
    assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED and error.retryable
    assert error.message.startswith("the session store's disk is full: ") and "SQLITE_FULL" in error.message
    assert "cannot rollback" not in error.message
    store.append("s1", [user_message("after")], first_seq=1)  # nothing half-written, no transaction left open
    assert [i.message.content[0].text for i in store.load("s1").items] == ["before", "after"]
    store.close()


def test_postgres_disk_full_is_store_full_at_once():
    store = open_store(shared().database())
    assert store.retry_s >= 10

    def attempt(conn):  # noqa: ANN001, ANN202
        raise errors.DiskFull("could not extend file: No space left on device")

    t0 = time.monotonic()
    with pytest.raises(StoreFull, match="disk is full: postgresql://.*No space left on device"):
        store._retrying(attempt)
    assert time.monotonic() - t0 < 5
    store.close()
