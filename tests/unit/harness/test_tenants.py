"""The harness authenticates every caller and keeps each tenant's sessions to that tenant."""

from __future__ import annotations

import grpc
import pytest
from harness_testkit import TENANT_KEYS, answer, call, harness_env, kinds, of

from loopwire.common.grpc_server import service_channel
from loopwire.v1 import common_pb2, harness_pb2, harness_pb2_grpc

Mode = harness_pb2.ApprovalMode


def _stub(h, key: str | None) -> tuple[grpc.aio.Channel, harness_pb2_grpc.HarnessServiceStub]:
    channel = service_channel(h.address, key or "")
    return channel, harness_pb2_grpc.HarnessServiceStub(channel)


async def _events(stub, *requests: harness_pb2.RunRequest) -> list[harness_pb2.RunResponse]:
    return [e async for e in stub.Run(iter(requests), timeout=30)]


@pytest.mark.parametrize("key", [None, "not-a-key"])
async def test_every_rpc_refuses_an_unauthenticated_caller(tmp_path, key):
    async with harness_env(tmp_path) as h:
        channel, stub = _stub(h, key)
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await _events(stub, harness_pb2.RunRequest(start=harness_pb2.StartTask(task="rm -rf /")))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            for rpc, request in ((stub.GetSession, harness_pb2.GetSessionRequest(session_id="s_x")),
                                 (stub.ListSessions, harness_pb2.ListSessionsRequest())):
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await rpc(request)
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert h.gateway.requests == []  # nothing reached the model


async def test_a_tenant_never_sees_or_drives_another_tenants_session(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", call("shell", '{"command": "echo hi"}'))]
        events = await h.start("write", approval_policy=harness_pb2.ApprovalPolicy(
            default_mode=Mode.APPROVAL_MODE_NEVER, per_tool={"shell": Mode.APPROVAL_MODE_ALWAYS}))
        sid = of(events, "started")[0].session_id
        approval = of(events, "approval_requested")[0]
        channel, other = _stub(h, TENANT_KEYS["t2"])
        async with channel:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await other.GetSession(harness_pb2.GetSessionRequest(session_id=sid))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert list((await other.ListSessions(harness_pb2.ListSessionsRequest())).sessions) == []
            for request in (
                harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(approval_id=approval.approval_id,
                                                                             approved=True)),
                harness_pb2.RunRequest(resume=harness_pb2.ResumeSession(session_id=sid)),
                harness_pb2.RunRequest(user_message=harness_pb2.AddUserMessage(session_id=sid, text="go on")),
                harness_pb2.RunRequest(cancel=harness_pb2.CancelRun(session_id=sid)),
            ):
                failed = of(await _events(other, request), "failed")
                assert len(failed) == 1 and failed[0].error.code == common_pb2.ERROR_CODE_NOT_FOUND, failed
                assert "not found" in failed[0].error.message
                # The same answer as for an id nobody ever used: a foreign id's existence does not leak.
                missing = harness_pb2.RunRequest()
                missing.CopyFrom(request)
                kind = missing.WhichOneof("action")
                if kind == "approval":
                    missing.approval.approval_id = "ap_never_used"
                else:
                    getattr(missing, kind).session_id = "s_never_used"
                twin = of(await _events(other, missing), "failed")[0].error
                assert (twin.code, twin.field) == (failed[0].error.code, failed[0].error.field)
                assert twin.message.replace("s_never_used", sid).replace("ap_never_used", approval.approval_id) \
                    == failed[0].error.message
        # The owner still sees it, still waiting for its approval: nothing the other tenant did landed.
        stored = await h.session(sid)
        assert stored.session.status == harness_pb2.SESSION_STATUS_AWAITING_APPROVAL
        assert [s.session_id for s in (await h.stub.ListSessions(harness_pb2.ListSessionsRequest())).sessions] == [sid]
        assert kinds(events)[-1] == "approval_requested"


async def test_a_tenant_cannot_open_another_tenants_workspace_by_any_name(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", call("shell", '{"command": "echo secret > secret.txt"}')), answer("done")]
        events = await h.start("write a secret", session_id="s_alpha")
        assert kinds(events)[-1] == "completed"
        ws_a = tmp_path / "workspaces" / "tenant-t1" / "s_alpha"
        assert (ws_a / "secret.txt").read_text() == "secret\n"
        channel, other = _stub(h, TENANT_KEYS["t2"])
        async with channel:
            for name in (str(ws_a), "../tenant-t1/s_alpha", str(ws_a / "sub"), "../../workspaces/tenant-t1",
                         str(tmp_path / "workspaces" / "tenant-t1" / "s_missing"), "../tenant-t1/s_missing"):
                start = harness_pb2.StartTask(task="cat secret.txt", workspace=name)
                failed = of(await _events(other, harness_pb2.RunRequest(start=start)), "failed")
                assert failed and failed[0].error.code == common_pb2.ERROR_CODE_NOT_FOUND, (name, failed)
                assert failed[0].error.message == f"start.workspace: workspace {name!r} not found", failed
            # B choosing A's session id (and so the same workspace name) gets a session and a workspace
            # of its own; A's are untouched and B never saw them.
            h.gateway.script = [answer("", call("shell", '{"command": "cat secret.txt || echo none"}')),
                                answer("done")]
            theirs = await _events(other, harness_pb2.RunRequest(start=harness_pb2.StartTask(
                task="read it", session_id="s_alpha")))
            assert kinds(theirs)[-1] == "completed", theirs
            assert "none" in of(theirs, "tool_call_ended")[0].output
            assert of(theirs, "started")[0].session_id == "s_alpha"
            seen_b = await other.GetSession(harness_pb2.GetSessionRequest(session_id="s_alpha"))
            assert seen_b.items[0].message.content[0].text == "read it"
        seen_a = await h.session("s_alpha")
        assert seen_a.items[0].message.content[0].text == "write a secret"
        assert (ws_a / "secret.txt").read_text() == "secret\n"
        again = of(await h.start("again", session_id="s_alpha"), "failed")[0].error
        assert again.code == common_pb2.ERROR_CODE_ALREADY_EXISTS
