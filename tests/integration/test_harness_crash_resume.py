"""Invariant 7 across real process deaths: a harness SIGKILLed mid-run, restarted on the same
database, resumes the session with the same transcript; an approval outlives a restart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from harness_testkit import REPO, FakeGateway, HarnessProcess, answer, call, kinds, of, start_server

from loopwire.common.auth import hash_key, write_private_file
from loopwire.common.grpc_server import service_channel
from loopwire.common.recorded import load_session
from loopwire.v1 import gateway_pb2_grpc, harness_pb2, harness_pb2_grpc

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
R = harness_pb2.RunRequest


@pytest.fixture
async def gateway():
    fake = FakeGateway()
    server, address = await start_server(gateway_pb2_grpc.add_GatewayServiceServicer_to_server, fake)
    yield fake, address
    await server.stop(0)


async def events_until(address: str, request: R, stop_when, then=None,  # noqa: ANN001
                       metadata: tuple[tuple[str, str], ...] | None = None) -> list[harness_pb2.RunResponse]:
    """Stream events of ``request`` until ``stop_when(events)`` holds (then call ``then`` with
    the stream still open) or the stream ends."""
    events: list[harness_pb2.RunResponse] = []
    async with service_channel(address) as channel:
        stub = harness_pb2_grpc.HarnessServiceStub(channel)
        async for event in stub.Run(iter([request]), timeout=120, metadata=metadata):
            events.append(event)
            if stop_when(events):
                if then:
                    then()
                break
    return events


async def get_session(address: str, sid: str) -> harness_pb2.GetSessionResponse:
    async with service_channel(address) as channel:
        return await harness_pb2_grpc.HarnessServiceStub(channel).GetSession(
            harness_pb2.GetSessionRequest(session_id=sid))


async def test_sigkill_mid_replay_then_resume_gives_the_recorded_transcript(tmp_path, gateway):
    fake, gw = gateway
    fake.first_token_delay_s = 0.02
    recorded = load_session(REPO / "examples/sessions/sqlfluff__sqlfluff-2419.traj.json")
    start = harness_pb2.StartTask(task=recorded.task, instructions=recorded.instructions,
                                  replay=recorded.replay_script())
    first = HarnessProcess(tmp_path, gw)
    await first.wait_ready()
    # SIGKILL mid-run, while the client still listens: no drain, no cleanup.
    events = await events_until(first.address, R(start=start), lambda ev: len(of(ev, "turn_completed")) >= 12,
                                then=first.kill)
    sid = of(events, "started")[0].session_id
    recorded_items = recorded.items()

    second = HarnessProcess(tmp_path, gw)
    try:
        await second.wait_ready()
        before = await get_session(second.address, sid)
        assert before.session.status == harness_pb2.SESSION_STATUS_INTERRUPTED
        n = len(before.items)
        assert 12 * 2 < n < len(recorded_items) and list(before.items) == recorded_items[:n]

        events = await events_until(second.address, R(resume=harness_pb2.ResumeSession(session_id=sid)),
                                    lambda ev: False)
        assert of(events, "started")[0].resumed and of(events, "started")[0].items == n
        assert kinds(events)[-1] == "completed"
        after = await get_session(second.address, sid)
        assert list(after.items) == recorded_items
        assert after.session.turn_count == len(recorded.turns)
    finally:
        second.kill()


async def test_sigkill_during_a_tool_then_resume_reports_the_lost_call(tmp_path, gateway):
    fake, gw = gateway
    fake.script = [answer("", call("shell", json.dumps({"command": "sleep 30"}))), answer("recovered")]
    first = HarnessProcess(tmp_path, gw)
    await first.wait_ready()
    async with service_channel(first.address) as channel:
        stub = harness_pb2_grpc.HarnessServiceStub(channel)
        async for event in stub.Run(iter([R(start=harness_pb2.StartTask(task="long"))]), timeout=120):
            if event.WhichOneof("event") == "tool_call_began":
                break
        sid = event.session_id
        # Tools start before the response is complete; kill once the call itself is committed
        # (with the stream still open: a client that goes away interrupts its runs).
        while not any(i.WhichOneof("item") == "function_call" for i in (await get_session(first.address, sid)).items):
            await asyncio.sleep(0.05)
        first.kill()
    second = HarnessProcess(tmp_path, gw)
    try:
        await second.wait_ready()
        before = list((await get_session(second.address, sid)).items)
        events = await events_until(second.address, R(resume=harness_pb2.ResumeSession(session_id=sid)),
                                    lambda ev: False)
        assert of(events, "completed")[0].final_text == "recovered"
        after = list((await get_session(second.address, sid)).items)
        assert after[: len(before)] == before  # nothing rewritten, only appended
        lost = after[len(before)].function_call_output
        assert lost.is_error and "restarted while this call ran" in lost.output
    finally:
        second.kill()


async def test_approval_is_answered_after_a_restart(tmp_path, gateway):
    fake, gw = gateway
    fake.script = [answer("", call("shell", json.dumps({"command": "echo yes > approved.txt"}))), answer("done")]
    policy = harness_pb2.ApprovalPolicy(default_mode=harness_pb2.APPROVAL_MODE_ALWAYS)
    # A tenant whose policy lets the harness hold its KV while it waits (the anonymous one may not).
    auth = tmp_path / "auth.json"
    write_private_file(auth, json.dumps({"tenants": {"t": {"key_sha256": [hash_key("k-t")],
                                                           "max_retention_seconds": 900}}}))
    key = (("authorization", "Bearer k-t"),)
    first = HarnessProcess(tmp_path, gw, "--auth-config", str(auth))
    await first.wait_ready()
    events = await events_until(first.address, R(start=harness_pb2.StartTask(task="ask", approval_policy=policy)),
                                lambda ev: False, metadata=key)
    assert kinds(events)[-1] == "approval_requested"
    approval = of(events, "approval_requested")[0]
    workspace = Path(of(events, "started")[0].workspace)
    first.kill()
    # The gateway was asked to keep the KV while the session waits (not on every request).
    assert fake.requests[0].retention_seconds == 0 and fake.holds[0].retention_seconds > 0

    second = HarnessProcess(tmp_path, gw, "--auth-config", str(auth))
    try:
        await second.wait_ready()
        decision = harness_pb2.ApprovalDecision(approval_id=approval.approval_id, approved=True)
        events = await events_until(second.address, R(approval=decision), lambda ev: False, metadata=key)
        assert of(events, "started")[0].resumed and kinds(events)[-1] == "completed"
        assert (workspace / "approved.txt").read_text() == "yes\n"
        # The resumed turn continued the gateway's stored response: a delta, not a resend.
        assert fake.requests[1].previous_response_id and len(fake.requests[1].input) == 1
    finally:
        second.kill()


async def test_background_commands_of_a_killed_harness_are_reported_lost(tmp_path, gateway):
    fake, gw = gateway
    fake.script = [answer("", call("shell", json.dumps({"command": "sleep 60"}))),  # detached as bg-1
                   answer("waiting for it")]
    first = HarnessProcess(tmp_path, gw, "--background-after", "0.3")
    await first.wait_ready()
    events = await events_until(first.address, R(start=harness_pb2.StartTask(task="long build")),
                                lambda ev: len(of(ev, "turn_completed")) >= 2, then=first.kill)
    sid = of(events, "started")[0].session_id
    assert of(events, "tool_call_ended")[0].handle == "bg-1"

    fake.script = [answer("", call("wait", json.dumps({"handle": "bg-1", "timeout_seconds": 1})),
                          call("shell", json.dumps({"command": "sleep 2; echo again"}))),
                   answer("", call("wait", json.dumps({"handle": "bg-2", "timeout_seconds": 30}))),
                   answer("done")]
    second = HarnessProcess(tmp_path, gw, "--background-after", "0.3")
    try:
        await second.wait_ready()
        before = list((await get_session(second.address, sid)).items)
        events = await events_until(second.address, R(resume=harness_pb2.ResumeSession(session_id=sid)),
                                    lambda ev: False)
        assert kinds(events)[-1] == "completed"
        told = list((await get_session(second.address, sid)).items)[len(before)]
        assert "background command bg-1 was lost" in told.message.content[0].text
        ended = of(events, "tool_call_ended")
        assert "bg-1 was lost" in ended[0].output and ended[0].is_error
        assert ended[1].handle == "bg-2"  # a new command never reuses a handle the transcript names
        assert "bg-2 finished" in ended[2].output and "again" in ended[2].output
    finally:
        second.kill()


async def test_a_call_whose_turn_a_crash_kept_from_being_stored_is_still_in_the_transcript(tmp_path, gateway):
    fake, gw = gateway
    fake.call_gap_s = 30  # the first call's tool starts; the model is still generating when the harness dies
    marker = "side-effect.txt"
    fake.script = [answer("", call("shell", json.dumps({"command": f"echo done > {marker}; sleep 60"}), "c_1"),
                          call("shell", json.dumps({"command": "true"}), "c_2"))]
    first = HarnessProcess(tmp_path, gw)
    await first.wait_ready()
    async with service_channel(first.address) as channel:  # open until the kill: a client leaving interrupts
        stream = harness_pb2_grpc.HarnessServiceStub(channel).Run(
            iter([R(start=harness_pb2.StartTask(task="side effects"))]), timeout=120)
        async for event in stream:
            if event.WhichOneof("event") == "started":
                sid, workspace = event.session_id, Path(event.started.workspace)
            if event.WhichOneof("event") == "tool_call_began":
                break
        for _ in range(200):  # the tool really ran: its side effect exists
            if (workspace / marker).exists():
                break
            await asyncio.sleep(0.05)
        first.kill()
    assert (workspace / marker).exists()

    fake.call_gap_s = 0
    fake.script = [answer("recovered")]
    second = HarnessProcess(tmp_path, gw)
    try:
        await second.wait_ready()
        before = list((await get_session(second.address, sid)).items)
        assert [i.WhichOneof("item") for i in before] == ["message"]  # the turn itself was never stored
        events = await events_until(second.address, R(resume=harness_pb2.ResumeSession(session_id=sid)),
                                    lambda ev: False)
        assert kinds(events)[-1] == "completed"
        after = list((await get_session(second.address, sid)).items)
        assert after[1].function_call.call_id == "c_1" and marker in after[1].function_call.arguments
        assert after[2].function_call_output.call_id == "c_1" and after[2].function_call_output.is_error
        assert "before the turn that made it was stored" in after[2].function_call_output.output
        assert not any(i.function_call.call_id == "c_2" for i in after)  # never started: nothing to report
    finally:
        second.kill()
