"""Malformed requests fail in-stream with the field named and the stream keeps serving;
GetSession / ListSessions; replay of recorded sessions with recorded tool outputs."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from harness_testkit import REPO, harness_env, kinds, of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common.recorded import load_session
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = pytest.mark.timeout(180)
R = harness_pb2.RunRequest
SESSIONS = sorted((REPO / "examples" / "sessions").glob("*.traj*"))


@pytest.mark.parametrize(("request_", "field"), [
    (R(), "action"),
    (R(start=harness_pb2.StartTask()), "start.task"),
    (R(start=harness_pb2.StartTask(task="t", session_id="bad id!")), "start.session_id"),
    (R(start=harness_pb2.StartTask(task="t", max_turns=10**9)), "start.max_turns"),
    (R(start=harness_pb2.StartTask(task="t", model=harness_pb2.ModelOptions(conversation_mode=99))),
     "start.model.conversation_mode"),
    (R(start=harness_pb2.StartTask(task="t", model=harness_pb2.ModelOptions(
        sampling={"temperature": float("nan")}))), "start.model.sampling.temperature"),
    (R(start=harness_pb2.StartTask(task="t", approval_policy=harness_pb2.ApprovalPolicy(per_tool={"shell": 7}))),
     "start.approval_policy.per_tool[shell]"),
    (R(start=harness_pb2.StartTask(task="t", replay=harness_pb2.ReplayScript(source="x"))), "start.replay.turns"),
    (R(resume=harness_pb2.ResumeSession()), "resume.session_id"),
    (R(resume=harness_pb2.ResumeSession(session_id="missing")), "resume.session_id"),
    (R(approval=harness_pb2.ApprovalDecision()), "approval.approval_id"),
    (R(user_message=harness_pb2.AddUserMessage(session_id="missing", text="hi")), "user_message.session_id"),
    (R(cancel=harness_pb2.CancelRun(session_id="idle")), "cancel.session_id"),
])
async def test_malformed_request_names_the_field_and_the_stream_keeps_serving(tmp_path, request_, field):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output]  # one plain answer
        events = await h.run(request_, R(start=harness_pb2.StartTask(task="then a good one")))
        failed = of(events, "failed")[0]
        assert failed.error.field == field and field in failed.error.message
        assert kinds(events)[-1] == "completed"


async def test_start_with_an_existing_session_id_is_refused(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output] * 2
        await h.start("one", session_id="fixed-id")
        events = await h.start("two", session_id="fixed-id")
        assert of(events, "failed")[0].error.field == "start.session_id"


async def test_get_and_list_sessions(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output] * 5
        ids = [of(await h.start(f"task {n}"), "started")[0].session_id for n in range(5)]
        seen, token = [], ""
        while True:
            page = await h.stub.ListSessions(harness_pb2.ListSessionsRequest(page_size=2, page_token=token))
            seen += [s.session_id for s in page.sessions]
            token = page.next_page_token
            if not token:
                break
        assert seen == ids[::-1]  # newest first, each once
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await h.stub.ListSessions(harness_pb2.ListSessionsRequest(page_token="garbage!"))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in e.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await h.session("nope")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await h.session("")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def _parsed_or_empty(data: bytes) -> harness_pb2.RunRequest:
    try:
        return R.FromString(data)
    except Exception:  # noqa: BLE001 - not a parsable message: an empty one is malformed too
        return R()


_ids = st.one_of(st.text(max_size=12), st.sampled_from(["s_1", "fixed", "appr_1", ""]))
RUN_REQUESTS = st.one_of(
    st.builds(lambda task, sid, turns, mode, temp, ws: R(start=harness_pb2.StartTask(
        task=task, session_id=sid, max_turns=turns, workspace=ws,
        model=harness_pb2.ModelOptions(conversation_mode=mode, sampling={"temperature": temp}))),
        st.text(max_size=20), _ids, st.integers(0, 2**32 - 1), st.integers(0, 4),
        st.floats(allow_nan=True, width=32), st.sampled_from(["", "rel/dir", "a\0b"])),
    st.builds(lambda sid: R(resume=harness_pb2.ResumeSession(session_id=sid)), _ids),
    st.builds(lambda aid, ok, sid: R(approval=harness_pb2.ApprovalDecision(approval_id=aid, approved=ok,
                                                                         session_id=sid)), _ids, st.booleans(), _ids),
    st.builds(lambda sid, text: R(user_message=harness_pb2.AddUserMessage(session_id=sid, text=text)),
              _ids, st.text(max_size=10)),
    st.builds(lambda sid: R(cancel=harness_pb2.CancelRun(session_id=sid)), _ids),
    st.binary(max_size=200).map(_parsed_or_empty),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(RUN_REQUESTS, max_size=6))
async def test_fuzzed_run_requests_never_break_the_server(tmp_path_factory, requests):
    async with harness_env(tmp_path_factory.mktemp("fuzz")) as h:
        h.gateway.script = [harness_pb2.ReplayTurn().output] * 20
        events = await h.run(*requests, R(start=harness_pb2.StartTask(task="still alive", session_id="final-check")))
        # The stream outlived whatever came before it.
        assert any(e.session_id == "final-check" and e.WhichOneof("event") == "completed" for e in events)
        for failed in of(events, "failed"):
            assert failed.error.code and failed.error.message


@pytest.mark.parametrize("path", SESSIONS, ids=lambda p: p.name)
async def test_replay_with_recorded_outputs_rebuilds_the_recorded_transcript(tmp_path, path: Path):
    recorded = load_session(path)
    async with harness_env(tmp_path) as h:
        start = harness_pb2.StartTask(task=recorded.task, instructions=recorded.instructions,
                                      replay=recorded.replay_script())
        events = await h.run(R(start=start))
        assert kinds(events)[-1] == "completed"
        started = of(events, "started")[0]
        assert started.replay_source.startswith(path.name)
        stored = await h.session(started.session_id)
        assert list(stored.items) == recorded.items()
        assert stored.session.turn_count == len(recorded.turns) == len(h.gateway.requests)
        assert [t.name for t in h.gateway.requests[0].tools] == sorted(t.name for t in recorded.tools)
        # After the first turn every request is a delta: each non-model item goes up exactly once
        # (the last turn's followups never do: the script ends there).
        model_items = [i for i in recorded.items() if i.WhichOneof("item") == "function_call"
                       or (i.WhichOneof("item") == "message" and i.message.role == common_pb2.ROLE_ASSISTANT)]
        sent = sum(len(r.input) for r in h.gateway.requests)
        assert sent == len(recorded.items()) - len(model_items) - len(recorded.turns[-1].followups)
        assert all(r.previous_response_id for r in h.gateway.requests[1:])
