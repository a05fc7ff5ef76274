"""Cancel works in every session state: a session waiting for approval is cancelled at once, its
exec programs and parked commands end and give the tenant's exec slots back. The KV hold the
harness asks for while a session waits never outlasts the tenant's max_retention_seconds."""

from __future__ import annotations

import json

import processes
import pytest
from harness_testkit import answer, call, harness_env, kinds, of, until

from loopwire.harness import exec_sessions
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = pytest.mark.timeout(120)
Mode = harness_pb2.ApprovalMode
R = harness_pb2.RunRequest


def shell_always() -> harness_pb2.ApprovalPolicy:
    """Shell asks every time; the pty tools run without asking."""
    return harness_pb2.ApprovalPolicy(per_tool={"shell": Mode.APPROVAL_MODE_ALWAYS,
                                                "exec_command": Mode.APPROVAL_MODE_NEVER})


def cancel(sid: str) -> harness_pb2.RunRequest:
    return R(cancel=harness_pb2.CancelRun(session_id=sid))


async def test_cancel_while_waiting_for_approval_ends_its_exec_programs_and_frees_the_exec_limit(tmp_path):
    async with harness_env(tmp_path, exec_sessions_per_tenant=2) as h:
        bound = exec_sessions._bound(h.service.sandbox)
        h.gateway.script = [
            answer("", call("exec_command", json.dumps({"cmd": "sleep 876.31", "yield_time_ms": 250})),
                   call("exec_command", json.dumps({"cmd": "sleep 876.32", "yield_time_ms": 250})),
                   call("shell", json.dumps({"command": "echo after approval"}))),
            answer("resumed"),
        ]
        events = await h.start("two programs, then a command", approval_policy=shell_always())
        assert kinds(events)[-1] == "approval_requested"
        sid = of(events, "started")[0].session_id
        assert sum(bound.live.values()) == 2 and processes.running("876.31")  # parked with the session

        events = await h.run(cancel(sid))
        failed = of(events, "failed")
        assert [(f.error.code, e.session_id) for e, f in zip(events, failed, strict=True)] == [
            (common_pb2.ERROR_CODE_CANCELLED, sid)]
        assert (await h.session(sid)).session.status == harness_pb2.SESSION_STATUS_CANCELLED
        assert sid not in h.service.parked
        assert await processes.ended("876.31") and await processes.ended("876.32")
        await until(lambda: not bound.live, "the tenant's exec slots to be given back")
        # The KV held for the approval was let go.
        assert [x.retention_seconds for x in h.gateway.holds] == [h.config.approval_retention, 0]

        # Resumable: the approval is asked again, and answered the session goes on.
        events = await h.run(R(resume=harness_pb2.ResumeSession(session_id=sid)))
        approval = of(events, "approval_requested")[0]
        events = await h.run(R(approval=harness_pb2.ApprovalDecision(approval_id=approval.approval_id, approved=True)))
        assert kinds(events)[-1] == "completed"


async def test_cancel_of_a_session_with_nothing_running_is_answered_and_keeps_its_status(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("done")]
        sid = of(await h.start("quick"), "started")[0].session_id
        events = await h.run(cancel(sid), cancel(sid))
        assert [f.error.code for f in of(events, "failed")] == [common_pb2.ERROR_CODE_CANCELLED] * 2
        assert (await h.session(sid)).session.status == harness_pb2.SESSION_STATUS_COMPLETED
        # Another tenant's session, or none, stays not found.
        events = await h.run(cancel("no-such-session"))
        assert of(events, "failed")[0].error.code == common_pb2.ERROR_CODE_NOT_FOUND


@pytest.mark.parametrize(("ceiling", "held"), [(300, [300]), (3600, [900]), (0, [])])
async def test_the_approval_hold_never_outlasts_the_tenants_max_retention(tmp_path, ceiling, held):
    async with harness_env(tmp_path, approval_retention=900) as h:
        h.service.auth.tenants["t1"].policy.max_retention_seconds = ceiling
        h.gateway.script = [answer("", call("shell", json.dumps({"command": "true"}))), answer("ok")]
        events = await h.start("x", approval_policy=shell_always())
        assert kinds(events)[-1] == "approval_requested"
        assert [x.retention_seconds for x in h.gateway.holds] == held
        notes = [e.diagnostic.message for e in events if e.WhichOneof("event") == "diagnostic"]
        if held:
            assert any(f"for up to {held[0]} s" in n for n in notes), notes
        else:
            assert "KV not kept while waiting for approval: the tenant's max_retention_seconds is 0" in notes
