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


async def test_retryable_gateway_errors_are_retried_with_backoff(tmp_path):
    from harness_testkit import call

    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", call("list", "{}")), answer("done")]
        h.gateway.unavailable_next = 3
        events = await h.start("anything")
        assert kinds(events)[-1] == "completed"
        stored = await h.session(of(events, "started")[0].session_id)
        assert stored.turns[0].resends == 3 and stored.turns[1].resends == 0
        assert len(h.gateway.requests) == 5  # 3 refused + 2 answered, and no request was lost
        # The second turn is still a delta: backing off kept the gateway's state.
        assert h.gateway.requests[-1].previous_response_id


async def test_a_gateway_that_stays_unavailable_fails_the_run_after_a_bounded_number_of_tries(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("never")]
        h.gateway.unavailable_next = 100
        events = await h.start("anything")
        assert kinds(events)[-1] == "failed"
        assert of(events, "failed")[0].error.code == common_pb2.ERROR_CODE_UNAVAILABLE
        assert len(h.gateway.requests) == 5
