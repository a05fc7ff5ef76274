"""Nothing fails silently: every failure of a run ends in a run-failed event and a log line."""

from __future__ import annotations

import sqlite3

from harness_testkit import answer, harness_env, kinds, of

from loopwire.v1 import common_pb2


def _disk_full(*args, **kwargs):
    raise sqlite3.OperationalError("database or disk is full")


async def test_a_store_failure_at_start_is_a_failed_event_not_an_empty_ok(tmp_path, monkeypatch, caplog):
    async with harness_env(tmp_path) as h:
        monkeypatch.setattr(h.service.store, "create", _disk_full)
        for _ in range(3):  # and the harness keeps answering
            events = await h.start("anything")
            assert kinds(events) == ["failed"]
            error = of(events, "failed")[0].error
            assert error.code == common_pb2.ERROR_CODE_INTERNAL and "disk is full" in error.message
        assert "run request failed" in caplog.text


async def test_a_store_failure_mid_run_still_ends_the_run_with_a_failed_event(tmp_path, monkeypatch, caplog):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("done")]
        monkeypatch.setattr(h.service.store, "add_turn", _disk_full)
        monkeypatch.setattr(h.service.store, "set_status", _disk_full)
        events = await h.start("anything")
        assert kinds(events)[0] == "started" and kinds(events)[-1] == "failed"
        message = of(events, "failed")[0].error.message
        assert "disk is full" in message and "could not be stored" in message
        assert "cannot record its failure" in caplog.text
