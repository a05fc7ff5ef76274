"""The SQLite session store: WAL, append-only items, pages, pending approvals."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.harness.loop import user_message
from loopwire.harness.store import Decision, PendingCall, SessionStore, decode_page_token
from loopwire.v1 import common_pb2, harness_pb2


@pytest.fixture
def store(tmp_path):
    s = SessionStore(tmp_path / "h.db")
    yield s
    s.close()


def make(store: SessionStore, sid: str) -> None:
    store.create(sid, harness_pb2.StartTask(task=sid), "instr", [common_pb2.Tool(name="shell")], "/w", "")


def test_items_survive_reopening_and_cannot_be_rewritten(tmp_path, store):
    make(store, "s1")
    store.append("s1", [user_message("a"), user_message("b")], first_seq=0)
    store.append("s1", [user_message("c")], first_seq=2, new_turn=True)
    with pytest.raises(sqlite3.IntegrityError):  # a second writer of the same slot
        store.append("s1", [user_message("x")], first_seq=2)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        store._db.execute("UPDATE items SET item = x'00'")
    again = SessionStore(tmp_path / "h.db")
    loaded = again.load("s1")
    assert [i.message.content[0].text for i in loaded.items] == ["a", "b", "c"]
    assert loaded.session.item_count == 3 and loaded.session.turn_count == 1
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again.close()


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


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(0, 25), page_size=st.integers(1, 10))
def test_pages_cover_every_session_once_newest_first(tmp_path_factory, n, page_size):
    store = SessionStore(tmp_path_factory.mktemp("db") / "h.db")
    for k in range(n):
        make(store, f"s{k:03d}")
    seen, token = [], ""
    while True:
        page, token = store.list(page_size, token)
        seen += [s.session_id for s in page]
        if not token:
            break
    assert sorted(seen) == [f"s{k:03d}" for k in range(n)] and len(set(seen)) == n
    assert [(s.created_at_ms, s.session_id) for s in (store.list(1000, "")[0])] == sorted(
        [(s.created_at_ms, s.session_id) for s in store.list(1000, "")[0]], reverse=True)
    store.close()


@pytest.mark.parametrize("token", ["!!", "bm90LWEtdG9rZW4=", "MTIzNA=="])
def test_foreign_page_tokens_are_rejected(token):
    with pytest.raises(ValueError):
        decode_page_token(token)
