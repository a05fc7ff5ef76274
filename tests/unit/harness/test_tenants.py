"""The harness authenticates every caller and keeps each tenant's sessions to that tenant."""

from __future__ import annotations

import grpc
import pytest
from harness_testkit import TENANT_KEYS, answer, call, harness_env, kinds, of

from loopwire.common.grpc_server import insecure_channel
from loopwire.v1 import common_pb2, harness_pb2, harness_pb2_grpc

Mode = harness_pb2.ApprovalMode


def _stub(h, key: str | None) -> tuple[grpc.aio.Channel, harness_pb2_grpc.HarnessServiceStub]:
    channel = insecure_channel(h.address, key or "")
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
                assert len(failed) == 1 and failed[0].error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
                assert "not found" in failed[0].error.message or "no run" in failed[0].error.message
        # The owner still sees it, still waiting for its approval: nothing the other tenant did landed.
        stored = await h.session(sid)
        assert stored.session.status == harness_pb2.SESSION_STATUS_AWAITING_APPROVAL
        assert [s.session_id for s in (await h.stub.ListSessions(harness_pb2.ListSessionsRequest())).sessions] == [sid]
        assert kinds(events)[-1] == "approval_requested"
