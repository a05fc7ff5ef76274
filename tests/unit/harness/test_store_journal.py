"""The SQLite store's started-call journal (``try_record_call_started``): written on the event
loop when the store's lock is free, queued for the lock's holder otherwise, flushed in one
transaction at synchronous=NORMAL while every other write stays FULL. Crashes are real ones: a
child process that ends with ``os._exit`` (no close, no flush, nothing of Python's shutdown)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.harness.loop import user_message
from loopwire.harness.store import SqliteSessionStore
from loopwire.v1 import common_pb2, harness_pb2

FULL = 2  # PRAGMA synchronous


def make(store: SqliteSessionStore, sid: str = "s") -> None:
    store.create(sid, harness_pb2.StartTask(task=sid), "", [], "/w", "")


def call(n: int) -> common_pb2.FunctionCall:
    return common_pb2.FunctionCall(call_id=f"c{n}", name="shell", arguments=f'{{"command": "echo {n}"}}')


def journal(path: Path, sid: str = "s") -> list[str]:
    """The journaled call ids as a fresh process would load them (a reopen)."""
    store = SqliteSessionStore(path)
    try:
        loaded = store.load(sid)
        assert loaded is not None
        return [c.call_id for c in loaded.started_calls]
    finally:
        store.close()


def wait_for(condition: Callable[[], object], what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


@contextmanager
def held(store: SqliteSessionStore) -> Iterator[None]:
    """The store's lock held by another thread (a worker thread's write), let go on leaving: that
    thread then writes what was queued meanwhile, as a real writer does."""
    taken, go = threading.Event(), threading.Event()

    def writer() -> None:
        with store._locked():
            taken.set()
            go.wait(30)

    thread = threading.Thread(target=writer)
    thread.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        go.set()
        thread.join(30)


CRASH = textwrap.dedent("""
    import os, sys
    from loopwire.harness.store import SqliteSessionStore
    from loopwire.v1 import common_pb2, harness_pb2

    store = SqliteSessionStore(sys.argv[1])
    store.create("s", harness_pb2.StartTask(task="s"), "", [], "/w", "")
    def call(n):
        return common_pb2.FunctionCall(call_id=f"c{n}", name="shell", arguments="{}")
    assert store.try_record_call_started("s", call(1))
    assert not store._queue, "the lock was free: c1 is written, not queued"
    if sys.argv[2] == "queue":
        store._lock.acquire()  # a worker thread's write holds the lock as the next call starts
        assert store.try_record_call_started("s", call(2))
        assert len(store._queue) == 1, "c2 waits for the lock's holder"
    os._exit(0)  # the harness is killed here: no close, no flush
""")


def crash(path: Path, mode: str) -> None:
    done = subprocess.run([sys.executable, "-c", CRASH, str(path), mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_an_acknowledged_journal_row_survives_a_crash_and_a_reopen(tmp_path):
    crash(tmp_path / "h.db", "inline")
    assert journal(tmp_path / "h.db") == ["c1"]


def test_a_crash_between_queue_and_flush_loses_only_the_queued_call(tmp_path):
    crash(tmp_path / "h.db", "queue")
    assert journal(tmp_path / "h.db") == ["c1"]  # c2 was queued, never written: the docstring's one loss


def test_a_queued_row_is_written_by_the_lock_holder_as_it_lets_go(tmp_path):
    store = SqliteSessionStore(tmp_path / "h.db")
    make(store)
    with held(store):
        assert store.try_record_call_started("s", call(1))
        assert len(store._queue) == 1  # nothing waited for the lock
    wait_for(lambda: not store._queue, "the holder to write the queued row")
    assert journal(tmp_path / "h.db") == ["c1"]  # a second connection sees it: it is committed
    store.close()


def test_journal_rows_commit_at_normal_and_every_other_write_at_full(tmp_path):
    store = SqliteSessionStore(tmp_path / "h.db")
    make(store)
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    store.try_record_call_started("s", call(1))
    journaled = list(seen)
    seen.clear()
    store.append("s", [user_message("a")], first_seq=0)
    store._db.set_trace_callback(None)
    normal, full = journaled.index("PRAGMA synchronous=NORMAL"), journaled.index("PRAGMA synchronous=FULL")
    between = journaled[normal:full]
    assert any(sql.startswith("INSERT INTO started_calls") for sql in between) and "COMMIT" in between
    assert "COMMIT" in seen and not any("synchronous" in sql for sql in seen)  # the connection's FULL
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == FULL
    store.close()


def test_close_writes_what_is_still_queued(tmp_path):
    store = SqliteSessionStore(tmp_path / "h.db")
    make(store)
    store._lock.acquire()  # as if a holder let go without looking at the queue
    store.try_record_call_started("s", call(1))
    store._lock.release()
    assert len(store._queue) == 1
    store.close()
    assert journal(tmp_path / "h.db") == ["c1"]


def test_a_write_after_queued_rows_comes_after_them(tmp_path):
    store = SqliteSessionStore(tmp_path / "h.db")
    make(store)
    with held(store):
        store.try_record_call_started("s", call(1))
    store.clear_started_calls("s")  # its statement runs after c1 is written, never before
    assert store.load("s").started_calls == []
    store.close()


# One operation per call: journaled inline with the lock free, queued while another thread holds
# the lock, or through the blocking, FULL-durable record_call_started (a worker thread's path).
OPS = st.lists(st.sampled_from(["inline", "queued", "blocking"]), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, appends=st.lists(st.booleans(), min_size=25, max_size=25))
def test_the_journal_lists_calls_in_the_order_they_were_recorded(tmp_path_factory, ops, appends):
    path = tmp_path_factory.mktemp("journal") / "h.db"
    store = SqliteSessionStore(path)
    make(store)
    items = 0
    for n, op in enumerate(ops):
        if op == "inline":
            assert store.try_record_call_started("s", call(n))
        elif op == "queued":
            with held(store):
                assert store.try_record_call_started("s", call(n))
        else:
            store.record_call_started("s", call(n))
        if appends[n]:  # other writes interleave (the transcript)
            store.append("s", [user_message(str(n))], first_seq=items)
            items += 1
    expected = [f"c{n}" for n in range(len(ops))]
    assert [c.call_id for c in store.load("s").started_calls] == expected
    store.close()
    assert journal(path) == expected
