"""Harness replicas sharing sessions through one real PostgreSQL server.

Two real harness processes (`loopwire harness --sessions postgresql://...`) in front of one
fake gateway: a session started on one is approved, continued and read on the other; a session
running on one is refused (not run twice) by the other and cancelled from outside; a server
restart mid-replay loses nothing; a server that stays down gives a clear error and, once back,
the writes go on where they stopped.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest
from harness_testkit import REPO, FakeGateway, HarnessProcess, answer, call, kinds, of, start_server
from postgres_server import PostgresServer, shared

from loopwire.common.auth import ANONYMOUS_TENANT
from loopwire.common.grpc_server import service_channel
from loopwire.common.recorded import load_session
from loopwire.harness import session_ids
from loopwire.harness.loop import user_message
from loopwire.harness.store import StoreUnavailable, open_store
from loopwire.harness.store.postgres import PostgresSessionStore
from loopwire.v1 import common_pb2, gateway_pb2_grpc, harness_pb2, harness_pb2_grpc

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
R = harness_pb2.RunRequest
RECORDED = REPO / "examples/sessions/sqlfluff__sqlfluff-2419.traj.json"


@pytest.fixture
async def gateway():
    fake = FakeGateway()
    server, address = await start_server(gateway_pb2_grpc.add_GatewayServiceServicer_to_server, fake)
    yield fake, address
    await server.stop(0)


def replica(state_dir: Path, gateway: str, url: str) -> HarnessProcess:
    state_dir.mkdir(parents=True, exist_ok=True)
    return HarnessProcess(state_dir, gateway, "--sessions", url)


@pytest.fixture
async def replicas(tmp_path, gateway):
    """Two harness processes on one fresh database, each with its own state directory."""
    url = shared().database()
    procs = [replica(tmp_path / name, gateway[1], url) for name in ("a", "b")]
    try:
        await asyncio.gather(*(p.wait_ready() for p in procs))
        yield procs, url
    finally:
        for p in procs:
            p.kill()


async def run(address: str, request: R, stop_when=lambda events: False) -> list[harness_pb2.RunResponse]:  # noqa: ANN001
    events: list[harness_pb2.RunResponse] = []
    async with service_channel(address) as channel:
        async for event in harness_pb2_grpc.HarnessServiceStub(channel).Run(iter([request]), timeout=120):
            events.append(event)
            if stop_when(events):
                break
    return events


async def get_session(address: str, sid: str) -> harness_pb2.GetSessionResponse:
    async with service_channel(address) as channel:
        return await harness_pb2_grpc.HarnessServiceStub(channel).GetSession(
            harness_pb2.GetSessionRequest(session_id=sid))


async def test_a_session_started_on_one_replica_is_approved_and_continued_on_the_other(tmp_path, gateway, replicas):
    fake, _ = gateway
    (a, b), _ = replicas
    fake.script = [answer("", call("shell", json.dumps({"command": "echo yes > approved.txt"}))), answer("done"),
                   answer("second answer")]
    policy = harness_pb2.ApprovalPolicy(default_mode=harness_pb2.APPROVAL_MODE_ALWAYS)
    events = await run(a.address, R(start=harness_pb2.StartTask(task="ask", approval_policy=policy)))
    assert kinds(events)[-1] == "approval_requested"
    sid = of(events, "started")[0].session_id
    workspace = Path(of(events, "started")[0].workspace)

    decision = harness_pb2.ApprovalDecision(approval_id=of(events, "approval_requested")[0].approval_id, approved=True)
    events = await run(b.address, R(approval=decision))
    assert of(events, "started")[0].resumed and kinds(events)[-1] == "completed"
    assert (workspace / "approved.txt").read_text() == "yes\n"

    events = await run(a.address, R(user_message=harness_pb2.AddUserMessage(session_id=sid, text="and then?")))
    assert of(events, "completed")[0].final_text == "second answer"
    on_a, on_b = await get_session(a.address, sid), await get_session(b.address, sid)
    assert on_a == on_b and on_a.session.status == harness_pb2.SESSION_STATUS_COMPLETED
    texts = [i.message.content[0].text for i in on_a.items if i.WhichOneof("item") == "message"]
    assert texts == ["ask", "done", "and then?", "second answer"]
    assert [i.WhichOneof("item") for i in on_a.items] == [
        "message", "function_call", "function_call_output", "message", "message", "message"]


async def test_a_running_session_is_not_run_twice_and_is_cancelled_from_another_replica(gateway, replicas):
    fake, _ = gateway
    (a, b), url = replicas
    fake.script = [answer("", call("shell", json.dumps({"command": "sleep 60"}))), answer("after the cancel")]
    async with service_channel(a.address) as channel:
        stream = harness_pb2_grpc.HarnessServiceStub(channel).Run(iter([R(start=harness_pb2.StartTask(task="long"))]),
                                                                  timeout=120)
        events = []
        async for event in stream:
            events.append(event)
            if event.WhichOneof("event") == "tool_call_began":
                break
        sid = events[0].session_id

        refused = await run(b.address, R(resume=harness_pb2.ResumeSession(session_id=sid)))
        assert kinds(refused)[-1] == "failed"
        assert "is running on harness replica" in of(refused, "failed")[0].error.message

        # Replica b records the cancel; replica a (the owner) acts on it at its next heartbeat.
        other = open_store(url)
        assert other.request_cancel(session_ids.scoped(ANONYMOUS_TENANT, sid), ANONYMOUS_TENANT)  # the store's key
        other.close()
        async for event in stream:
            events.append(event)
        assert kinds(events)[-1] == "failed"
    assert of(events, "failed")[0].error.code == common_pb2.ERROR_CODE_CANCELLED
    assert (await get_session(b.address, sid)).session.status == harness_pb2.SESSION_STATUS_CANCELLED

    resumed = await run(b.address, R(resume=harness_pb2.ResumeSession(session_id=sid)))
    assert of(resumed, "completed")[0].final_text == "after the cancel"


async def test_replays_on_both_replicas_at_once_then_a_server_restart_mid_replay_loses_nothing(tmp_path, gateway):
    fake, gw = gateway
    fake.first_token_delay_s = 0.02
    server = PostgresServer()
    url = server.database()
    recorded = load_session(RECORDED)
    start = harness_pb2.StartTask(task=recorded.task, instructions=recorded.instructions,
                                  replay=recorded.replay_script())
    procs = [replica(tmp_path / name, gw, url) for name in ("a", "b")]
    try:
        await asyncio.gather(*(p.wait_ready() for p in procs))
        restart: list[threading.Thread] = []
        restarted: list[bool] = []

        def restart_server() -> None:
            server.restart()
            restarted.append(True)

        def restart_once(events: list[harness_pb2.RunResponse]) -> bool:
            if not restart and len(of(events, "turn_completed")) >= 8:
                # Every open connection of both replicas breaks, and new ones are refused meanwhile.
                restart.append(threading.Thread(target=restart_server))
                restart[0].start()
            return False

        runs = await asyncio.gather(run(procs[0].address, R(start=start), restart_once),
                                    run(procs[1].address, R(start=start)))
        assert restart
        restart[0].join()
        assert restarted == [True]
        for p, events in zip(procs, runs, strict=True):
            assert kinds(events)[-1] == "completed", of(events, "failed")
            stored = await get_session(p.address, of(events, "started")[0].session_id)
            assert list(stored.items) == recorded.items() and stored.session.turn_count == len(recorded.turns)
        assert b"retrying" in (tmp_path / "a" / "harness.log").read_bytes()
    finally:
        for p in procs:
            p.kill()
        server.close()


def test_a_server_down_longer_than_the_retry_window_is_a_clear_error_and_nothing_is_lost():
    server = PostgresServer()
    try:
        url = server.database()
        store = PostgresSessionStore(url, retry_s=1.5)
        store.create("s1", harness_pb2.StartTask(task="t"), "i", [], "/w", "")
        store.append("s1", [user_message("before")], first_seq=0)
        server.stop()
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"session store postgresql://loopwire@127\.0\.0\.1:\d+/t_\w+ "
                                                   r"unavailable for 2 s"):
            store.append("s1", [user_message("while down")], first_seq=1)
        assert time.monotonic() - t0 < 60  # bounded: the caller hears of it, it does not hang
        server.start()
        # The pool reconnects with a backoff that may outlast this store's short retry window: a
        # caller told "unavailable" tries again, and the write lands once the pool is back.
        deadline = time.monotonic() + 60
        while True:
            try:
                store.append("s1", [user_message("after")], first_seq=1)
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline, "the store never came back"
                time.sleep(0.2)
        assert [i.message.content[0].text for i in store.load("s1").items] == ["before", "after"]
        store.close()
        with pytest.raises(StoreUnavailable, match="cannot connect"):
            server.stop()
            PostgresSessionStore(url, retry_s=0.5)
    finally:
        server.close()
