"""Two tenants on one real mesh (`start_mesh`, as `loopwire up` runs it, with an auth config of two
tenants): B cannot read, list or write A's workspace or sessions by any name, and a name B shares
with A (session id, workspace) gives B a thing of its own."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from loopwire.common.auth import hash_key
from loopwire.common.grpc_server import service_channel
from loopwire.harness import tools
from loopwire.mesh import start_mesh
from loopwire.v1 import common_pb2, harness_pb2, harness_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
KEYS = {"alpha": "lw-test-alpha-0123456789", "beta": "lw-test-beta-0123456789"}


def shell_then_done(command: str) -> harness_pb2.ReplayScript:
    """A recorded two-turn session whose shell call really runs in the sandbox."""
    call = common_pb2.FunctionCall(call_id="c1", name="shell", arguments=json.dumps({"command": command}))
    return harness_pb2.ReplayScript(source="two-tenant test", run_tools=True, tools=[tools.TOOLS["shell"]], turns=[
        harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(function_calls=[call])),
        harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(text="done"))])


async def run(address: str, key: str, request: harness_pb2.RunRequest) -> list[harness_pb2.RunResponse]:
    async with service_channel(address, key) as channel:
        stub = harness_pb2_grpc.HarnessServiceStub(channel)
        return [e async for e in stub.Run(iter([request]), timeout=120)]


def of(events: list[harness_pb2.RunResponse], kind: str) -> list:
    return [getattr(e, kind) for e in events if e.WhichOneof("event") == kind]


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    root = tmp_path_factory.mktemp("two-tenants")
    auth = root / "tenants.json"
    auth.write_text(json.dumps({"tenants": {t: {"key_sha256": [hash_key(k)]} for t, k in KEYS.items()}}))
    m = start_mesh(root / "state", extra_args={"inference": ["--model", "dummy:0"],
                                               "gateway": ["--auth-config", str(auth)],
                                               "harness": ["--auth-config", str(auth)]})
    try:
        yield m
    finally:
        m.stop()


def test_b_reaches_nothing_of_a_by_any_name(mesh):
    start = harness_pb2.StartTask(task="keep a secret", session_id="s_shared", workspace="proj",
                                  replay=shell_then_done("echo alpha-secret > secret.txt && pwd"))
    a_events = asyncio.run(run(mesh.harness, KEYS["alpha"], harness_pb2.RunRequest(start=start)))
    assert of(a_events, "completed"), a_events
    a_workspace = of(a_events, "started")[0].workspace
    assert "alpha-secret" not in of(a_events, "tool_call_ended")[0].output

    # B by A's absolute workspace path, by a relative escape, by a path that does not exist: all the same.
    for name in (a_workspace, "../tenant-alpha/proj", a_workspace + "-missing"):
        failed = of(asyncio.run(run(mesh.harness, KEYS["beta"], harness_pb2.RunRequest(start=harness_pb2.StartTask(
            task="read it", workspace=name)))), "failed")
        assert failed and failed[0].error.code == common_pb2.ERROR_CODE_NOT_FOUND, (name, failed)
        assert failed[0].error.message == f"start.workspace: workspace {name!r} not found"

    # B's command cannot read A's file by its host path either (it is not in B's sandbox, and A's tree
    # belongs to A's uid).
    peek = harness_pb2.StartTask(task="peek", replay=shell_then_done(f"cat {a_workspace}/secret.txt; echo rc=$?"))
    b_peek = asyncio.run(run(mesh.harness, KEYS["beta"], harness_pb2.RunRequest(start=peek)))
    out = of(b_peek, "tool_call_ended")[0].output
    assert "alpha-secret" not in out and "rc=1" in out, out

    # The same session id and workspace name give B its own session and an empty workspace of its own.
    same = harness_pb2.StartTask(task="mine", session_id="s_shared", workspace="proj",
                                 replay=shell_then_done("cat secret.txt; echo rc=$?"))
    b_events = asyncio.run(run(mesh.harness, KEYS["beta"], harness_pb2.RunRequest(start=same)))
    assert of(b_events, "completed") and of(b_events, "started")[0].session_id == "s_shared"
    assert "alpha-secret" not in of(b_events, "tool_call_ended")[0].output
    assert of(b_events, "started")[0].workspace != a_workspace

    async def views() -> tuple:
        async with service_channel(mesh.harness, KEYS["alpha"]) as a, service_channel(mesh.harness, KEYS["beta"]) as b:
            sa, sb = harness_pb2_grpc.HarnessServiceStub(a), harness_pb2_grpc.HarnessServiceStub(b)
            listed_a = await sa.ListSessions(harness_pb2.ListSessionsRequest())
            listed_b = await sb.ListSessions(harness_pb2.ListSessionsRequest())
            got_a = await sa.GetSession(harness_pb2.GetSessionRequest(session_id="s_shared"))
            got_b = await sb.GetSession(harness_pb2.GetSessionRequest(session_id="s_shared"))
            with pytest.raises(grpc.aio.AioRpcError) as foreign:
                await sb.GetSession(harness_pb2.GetSessionRequest(session_id=of(b_peek, "started")[0].session_id + "x"))
            return listed_a, listed_b, got_a, got_b, foreign.value.code()

    listed_a, listed_b, got_a, got_b, code = asyncio.run(views())
    assert [s.task for s in listed_a.sessions] == ["keep a secret"]
    assert sorted(s.task for s in listed_b.sessions) == ["mine", "peek"]  # refused starts stored nothing
    assert got_a.session.task == "keep a secret" and got_b.session.task == "mine"
    assert code == grpc.StatusCode.NOT_FOUND
