"""The session store, the same tests on both engines (SQLite file, real PostgreSQL server):
append-only items, pages, pending approvals, two writers at once, replica leases and cancels."""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_server import shared

from loopwire.harness.loop import user_message
from loopwire.harness.store import (
    Decision,
    PendingCall,
    SequenceTaken,
    SessionBusy,
    SessionStore,
    decode_page_token,
    now_ms,
    open_store,
)
from loopwire.v1 import common_pb2, harness_pb2

ENGINES = ["sqlite", "postgresql"]
RUNNING = harness_pb2.SESSION_STATUS_RUNNING


@pytest.fixture(params=ENGINES)
def url(request, tmp_path):
    """A --sessions value naming an empty store of each engine."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/h.db"
    return shared().database()


@pytest.fixture
def store(url):
    s = open_store(url)
    yield s
    s.close()


def make(store: SessionStore, sid: str, tenant: str = "") -> None:
    store.create(sid, harness_pb2.StartTask(task=sid), "instr", [common_pb2.Tool(name="shell")], "/w", "", tenant)


def texts(store: SessionStore, sid: str) -> list[str]:
    loaded = store.load(sid)
    assert loaded is not None
    return [i.message.content[0].text for i in loaded.items]


def wait_until_lease_ran_out(store: SessionStore, sid: str, within: float = 30.0) -> None:
    """Poll the session's row until its owner's last heartbeat is older than ``store``'s lease."""
    deadline = time.monotonic() + within
    while True:
        ((beat,),) = store._query("SELECT heartbeat_ms FROM sessions WHERE session_id = ?", (sid,))
        if beat < now_ms() - int(store.lease_s * 1000):
            return
        assert time.monotonic() < deadline, f"the lease on {sid} never ran out"
        time.sleep(0.05)


def raw_update(url: str) -> None:
    """Rewrite an item behind the store's back, with the engine's own client."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute("UPDATE items SET item = x'00'")
    else:
        import psycopg

        with psycopg.connect(url) as db:
            db.execute("UPDATE items SET item = '\\x00'::bytea")


def test_items_survive_reopening_and_cannot_be_rewritten(url, store):
    make(store, "s1")
    store.append("s1", [user_message("a"), user_message("b")], first_seq=0)
    store.append("s1", [user_message("c")], first_seq=2, new_turn=True)
    with pytest.raises(SequenceTaken):  # a second writer of the same slot
        store.append("s1", [user_message("x"), user_message("y")], first_seq=2)
    with pytest.raises(Exception, match="append-only"):
        raw_update(url)
    again = open_store(url)
    loaded = again.load("s1")
    assert texts(again, "s1") == ["a", "b", "c"]
    assert loaded.session.item_count == 3 and loaded.session.turn_count == 1
    again.close()


def test_sqlite_keeps_wal_and_full_sync(tmp_path):
    store = open_store(f"sqlite:///{tmp_path}/h.db")
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_pending_calls_round_trip_and_decisions(store):
    make(store, "s1")
    call = common_pb2.FunctionCall(call_id="c1", name="shell", arguments="{}")
    done = common_pb2.FunctionCallOutput(call_id="c2", output="ok")
    store.save_pending("s1", [PendingCall(0, call, "ap1", Decision.PENDING, None),
                              PendingCall(1, call, "", Decision.NONE, done)])
    assert store.load("s1").session.status == harness_pb2.SESSION_STATUS_AWAITING_APPROVAL
    assert store.session_of_approval("ap1") == "s1"
    store.decide("ap1", True, None)
    pending = store.load("s1").pending
    assert [p.decision for p in pending] == [Decision.APPROVED, Decision.NONE] and pending[1].result == done
    store.clear_pending("s1")
    assert store.load("s1").pending == []


def test_turn_profiles_are_replaced_not_duplicated(store):
    make(store, "s1")
    store.add_turn("s1", harness_pb2.TurnProfile(turn=0, resends=1))
    store.add_turn("s1", harness_pb2.TurnProfile(turn=1))
    store.add_turn("s1", harness_pb2.TurnProfile(turn=0, resends=2))  # the same turn, re-recorded
    assert [(t.turn, t.resends) for t in store.load("s1").turns] == [(0, 2), (1, 0)]


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 25), page_size=st.integers(1, 10))
def test_pages_cover_every_session_once_newest_first(engine, tmp_path_factory, n, page_size):
    url = f"sqlite:///{tmp_path_factory.mktemp('db')}/h.db" if engine == "sqlite" else shared().url()
    store = open_store(url)
    tenant = f"t{uuid.uuid4().hex}"  # each example its own tenant: pages never show another's sessions
    for k in range(n):
        make(store, f"{tenant}-{k:03d}", tenant)
    seen, token = [], ""
    while True:
        page, token = store.list(page_size, token, tenant)
        seen += [s.session_id for s in page]
        if not token:
            break
    assert sorted(seen) == [f"{tenant}-{k:03d}" for k in range(n)] and len(set(seen)) == n
    everything = [(s.created_at_ms, s.session_id) for s in store.list(1000, "", tenant)[0]]
    assert everything == sorted(everything, reverse=True)
    store.close()


@pytest.mark.parametrize("token", ["!!", "bm90LWEtdG9rZW4=", "MTIzNA=="])
def test_foreign_page_tokens_are_rejected(token):
    with pytest.raises(ValueError):
        decode_page_token(token)


def test_two_writers_at_once_never_lose_or_reorder_items(url, store):
    """Two stores (two replicas' connections) append to one session as fast as they can, each
    at the end it last read; the key makes one of two racing writers retry, never interleave."""
    make(store, "s1")
    other = open_store(url)
    per_writer = 40
    barrier = threading.Barrier(2)
    conflicts = [0, 0]

    def writer(k: int, s: SessionStore) -> None:
        barrier.wait()
        for i in range(per_writer):
            while True:
                end = s.load("s1").session.item_count
                try:
                    s.append("s1", [user_message(f"w{k}-{i}"), user_message(f"w{k}-{i}-tail")], first_seq=end)
                    break
                except SequenceTaken:
                    conflicts[k] += 1

    threads = [threading.Thread(target=writer, args=(k, s)) for k, s in enumerate([store, other])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    items = texts(store, "s1")
    assert len(items) == 4 * per_writer == store.load("s1").session.item_count
    for k in range(2):  # every item once, each writer's in its order, each pair unbroken
        mine = [x for x in items if x.startswith(f"w{k}-")]
        assert mine == [x for i in range(per_writer) for x in (f"w{k}-{i}", f"w{k}-{i}-tail")]
    for a, b in zip(items[::2], items[1::2], strict=True):
        assert b == f"{a}-tail"
    assert texts(other, "s1") == items
    other.close()


def test_a_running_session_belongs_to_one_replica_until_its_lease_runs_out(url):
    a, b = open_store(url, lease_s=1.0), open_store(url, lease_s=1.0)
    make(a, "s1")
    a.set_status("s1", RUNNING)
    with pytest.raises(SessionBusy, match="running on harness replica"):
        b.set_status("s1", RUNNING)
    with pytest.raises(SessionBusy):  # nor can it overwrite the owner's status
        b.set_status("s1", harness_pb2.SESSION_STATUS_FAILED, "not mine")
    assert a.load("s1").session.status == RUNNING
    a.heartbeat()
    a.set_status("s1", harness_pb2.SESSION_STATUS_AWAITING_APPROVAL)
    b.set_status("s1", RUNNING)  # not running anymore: anyone may take it
    with pytest.raises(SessionBusy):
        a.set_status("s1", RUNNING)
    deadline = time.monotonic() + 30
    while True:  # b stops beating (a dead replica): its lease runs out and a may take over
        try:
            a.set_status("s1", RUNNING)
            break
        except SessionBusy:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    a.close(), b.close()


def test_a_cancel_asked_on_another_replica_reaches_the_owner(url):
    a, b = open_store(url), open_store(url)
    make(a, "s1", tenant="t1")
    make(a, "s2", tenant="t1")
    a.set_status("s1", RUNNING)
    a.set_status("s2", harness_pb2.SESSION_STATUS_COMPLETED)
    assert not b.request_cancel("s1", "t2")  # another tenant's session is not found
    assert not b.request_cancel("s2", "t1")  # nothing runs it
    assert not b.request_cancel("nope", "t1")
    assert b.request_cancel("s1", "t1")
    asked: list[str] = []
    a.on_cancel_requested = asked.append
    assert a.heartbeat() == ["s1"] and asked == ["s1"]
    assert b.heartbeat() == []  # only the owner acts on it
    a.set_status("s1", harness_pb2.SESSION_STATUS_CANCELLED)
    a.set_status("s1", RUNNING)  # a resumed run starts without the old request
    assert a.heartbeat() == []
    a.close(), b.close()


def test_startup_interrupts_only_sessions_no_live_replica_runs(url):
    a = open_store(url, lease_s=1.0)
    make(a, "live")
    a.set_status("live", RUNNING)
    b = open_store(url, lease_s=1.0)
    if a.shared:  # another replica starting leaves a live replica's run alone
        assert b.mark_interrupted() == 0
        # a stops beating: a crashed replica's sessions become resumable once its lease has run out
        wait_until_lease_ran_out(b, "live")
    assert b.mark_interrupted() == 1
    assert b.load("live").session.status == harness_pb2.SESSION_STATUS_INTERRUPTED
    a.close(), b.close()


@pytest.mark.parametrize("bad", ["mysql://x/y", "sqlite:///", "sqlite://relative"])
def test_unknown_session_urls_are_refused(bad):
    with pytest.raises(ValueError, match="--sessions"):
        open_store(bad)
