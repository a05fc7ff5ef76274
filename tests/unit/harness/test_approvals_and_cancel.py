"""Approvals suspend a run durably and resume on the decision; CancelRun stops the model
stream and kills running tools."""

from __future__ import annotations

import asyncio
import json

import processes
import pytest
from harness_testkit import answer, call, harness_env, kinds, of, until

from loopwire.v1 import common_pb2, harness_pb2

pytestmark = pytest.mark.timeout(120)
Mode = harness_pb2.ApprovalMode


def shell(command: str, **extra: object) -> common_pb2.FunctionCall:
    return call("shell", json.dumps({"command": command, **extra}))


def policy(default: int = Mode.APPROVAL_MODE_ON_REQUEST, **per_tool: int) -> harness_pb2.ApprovalPolicy:
    return harness_pb2.ApprovalPolicy(default_mode=default, per_tool=per_tool)


async def test_approval_suspends_then_resumes_on_a_new_stream(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [
            answer("", call("list", "{}"), shell("echo approved > out.txt"), call("list", "{}")),
            answer("written"),
        ]
        events = await h.start("write", approval_policy=policy(shell=Mode.APPROVAL_MODE_ALWAYS))
        assert kinds(events)[-1] == "approval_requested"  # the stream ends: the run is suspended
        request = of(events, "approval_requested")[0]
        sid = of(events, "started")[0].session_id
        stored = await h.session(sid)
        assert stored.session.status == harness_pb2.SESSION_STATUS_AWAITING_APPROVAL
        # Only the first call's output is in the transcript: outputs stay in call order.
        assert [i.WhichOneof("item") for i in stored.items][-1] == "function_call_output"
        assert len([i for i in stored.items if i.WhichOneof("item") == "function_call_output"]) == 1
        # No request pins KV ahead of time; once the session waits, its last response's KV is held
        # (the run says so); the prompt carries no policy.
        assert h.gateway.requests[0].retention_seconds == 0
        first_id = h.gateway.holds[0].response_id if h.gateway.holds else ""
        assert [(x.response_id, x.retention_seconds) for x in h.gateway.holds] == [(first_id, h.config.approval_retention)]
        assert first_id in h.gateway.transcripts
        assert any("KV kept while waiting for approval: 7 blocks" in d.diagnostic.message
                   for d in events if d.WhichOneof("event") == "diagnostic")
        # Kept as a pause (it may leave the device for the host tier), not pinned on the device.
        assert [(x.hint.phase, x.hint.reason) for x in h.gateway.holds] == [(common_pb2.KV_HINT_PHASE_PAUSE, "approval")]
        assert "approv" not in h.gateway.requests[0].instructions.lower()

        events = await h.run(harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(
            session_id=sid, approval_id=request.approval_id, approved=True)))
        assert of(events, "started")[0].resumed and kinds(events)[-1] == "completed"
        # The decision resumed the paused KV (it comes back while the approved tools run).
        assert [(x.response_id, x.retention_seconds, x.hint.phase) for x in h.gateway.holds] == [
            (first_id, h.config.approval_retention, common_pb2.KV_HINT_PHASE_PAUSE),
            (first_id, 0, common_pb2.KV_HINT_PHASE_RESUME)]
        assert (h.tmp / "workspaces" / "tenant-t1" / sid / "out.txt").read_text() == "approved\n"
        outputs = [i.function_call_output.call_id for i in h.gateway.requests[1].input]
        items = (await h.session(sid)).items
        assert outputs == [i.function_call.call_id for i in items if i.WhichOneof("item") == "function_call"]
        assert h.gateway.requests[1].previous_response_id  # resumed as a delta: the gateway kept the session


async def test_denied_call_is_reported_to_the_model(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", shell("curl example.com", network=True)), answer("ok, no network")]
        events = await h.start("fetch")  # default ON_REQUEST: network access asks
        approval = of(events, "approval_requested")[0]
        events = await h.run(harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(
            approval_id=approval.approval_id, approved=False, reason="offline work only")))
        assert kinds(events)[-1] == "completed"
        out = h.gateway.requests[1].input[0].function_call_output
        assert out.is_error and "denied" in out.output and "offline work only" in out.output


async def test_never_policy_refuses_escalation_without_asking(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", shell("true", network=True)), answer("fine")]
        events = await h.start("fetch", approval_policy=policy(Mode.APPROVAL_MODE_NEVER))
        assert not of(events, "approval_requested") and kinds(events)[-1] == "completed"
        assert "refused by the approval policy" in of(events, "tool_call_ended")[0].output
        assert h.gateway.requests[0].retention_seconds == 0 and not h.gateway.holds  # nobody waits: nothing held


async def test_wrong_or_repeated_decisions_are_in_stream_errors(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", shell("true")), answer("done")]
        events = await h.start("x", approval_policy=policy(Mode.APPROVAL_MODE_ALWAYS))
        approval = of(events, "approval_requested")[0]
        decide = harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(approval_id="nope", approved=True))
        events = await h.run(decide)
        assert of(events, "failed")[0].error.field == "approval.approval_id"
        ok = harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(approval_id=approval.approval_id,
                                                                           approved=True))
        assert kinds(await h.run(ok))[-1] == "completed"
        again = await h.run(ok)
        assert kinds(again) == ["failed"]


async def test_cancel_kills_running_tools(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", shell("touch began.txt; sleep 987.101; touch late.txt"))]
        requests: asyncio.Queue = asyncio.Queue()
        await requests.put(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="slow")))

        async def request_stream():
            while (r := await requests.get()) is not None:
                yield r

        events = []
        async for event in h.stub.Run(request_stream()):
            events.append(event)
            if event.WhichOneof("event") == "tool_call_began":
                await requests.put(harness_pb2.RunRequest(cancel=harness_pb2.CancelRun(session_id=event.session_id)))
                await requests.put(None)
        assert kinds(events)[-1] == "failed"
        assert of(events, "failed")[0].error.code == common_pb2.ERROR_CODE_CANCELLED
        sid = events[0].session_id
        assert (await h.session(sid)).session.status == harness_pb2.SESSION_STATUS_CANCELLED
        assert await processes.ended("987.101")  # the sandbox died with every process in it


async def test_cancel_stops_the_model_stream(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.first_token_delay_s = 30
        h.gateway.script = [answer("never")]
        requests: asyncio.Queue = asyncio.Queue()
        await requests.put(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="slow model")))

        async def request_stream():
            while (r := await requests.get()) is not None:
                yield r

        events = []
        async for event in h.stub.Run(request_stream()):
            events.append(event)
            if event.WhichOneof("event") == "started":
                while not h.gateway.requests:
                    await asyncio.sleep(0.01)
                await requests.put(harness_pb2.RunRequest(cancel=harness_pb2.CancelRun(session_id=event.session_id)))
                await requests.put(None)
        assert of(events, "failed")[0].error.code == common_pb2.ERROR_CODE_CANCELLED
        for _ in range(100):
            if h.gateway.cancelled_streams:
                break
            await asyncio.sleep(0.05)
        assert h.gateway.cancelled_streams == 1


async def test_resume_after_cancel_continues_the_same_session(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.first_token_delay_s = 30
        h.gateway.script = [answer("never")]
        requests: asyncio.Queue = asyncio.Queue()
        await requests.put(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="t")))

        async def request_stream():
            while (r := await requests.get()) is not None:
                yield r

        async for event in h.stub.Run(request_stream()):
            if event.WhichOneof("event") == "started":
                sid = event.session_id
                while not h.gateway.requests:
                    await asyncio.sleep(0.01)
                await requests.put(harness_pb2.RunRequest(cancel=harness_pb2.CancelRun(session_id=sid)))
                await requests.put(None)
        h.gateway.first_token_delay_s = 0
        h.gateway.script = [answer("resumed fine")]
        events = await h.run(harness_pb2.RunRequest(resume=harness_pb2.ResumeSession(session_id=sid)))
        assert of(events, "completed")[0].final_text == "resumed fine"
        assert [i.message.content[0].text for i in (await h.session(sid)).items] == ["t", "resumed fine"]


async def test_a_background_command_keeps_running_while_the_session_waits_for_approval(tmp_path):
    async with harness_env(tmp_path, background_after=0.2) as h:
        h.gateway.script = [
            answer("", call("shell", json.dumps({"command": "sleep 0.8; echo built"}))),
            answer("", call("edit_file", json.dumps({"path": "notes.txt", "old": "", "new": "x"}))),
            answer("both done"),
        ]
        events = await h.start("build, then edit", approval_policy=policy(edit_file=Mode.APPROVAL_MODE_ALWAYS))
        assert kinds(events)[-1] == "approval_requested"
        assert of(events, "tool_call_ended")[0].handle == "bg-1"
        # The command finishes while nobody runs the session (its task is parked with the service).
        parked = lambda: [t for p in h.service.parked.values() for t in p.tasks.values()]  # noqa: E731
        await until(lambda: [t.handle for t in parked() if t.done.is_set()] == ["bg-1"],
                    "the parked background command to finish")
        events = await h.run(harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(
            approval_id=of(events, "approval_requested")[0].approval_id, approved=True)))
        assert kinds(events)[-1] == "completed"
        done = of(events, "background_task_completed")
        assert len(done) == 1 and done[0].handle == "bg-1" and done[0].exit_code == 0 and "built" in done[0].output
        pushed = [i.message.content[0].text for i in h.gateway.requests[2].input if i.WhichOneof("item") == "message"]
        assert any("background command bg-1 finished with exit code 0" in t for t in pushed)
