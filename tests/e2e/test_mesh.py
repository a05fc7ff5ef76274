"""The whole mesh as real subprocesses: a recorded session replayed end to end through
Run, the transcript in SQLite, reflection, bad input to each service, credentials at each
service (tenant keys at the harness and gateway, the service token at inference), the CLI."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from session_files import session_path

from loopwire.client import run_task
from loopwire.common.recorded import load_session
from loopwire.replay import start_for
from loopwire.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    harness_pb2,
    harness_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
)

pytestmark = pytest.mark.e2e

EXPECTED_METHODS = {
    "loopwire.v1.HarnessService": {"Run", "GetSession", "ListSessions"},
    "loopwire.v1.GatewayService": {"Converse", "GetModel", "CountTokens"},
    "loopwire.v1.InferenceService": {"Generate", "Prefill", "PullKv", "GetStatus", "WatchCache",
                                     "GetModelInfo", "HoldPrefix"},
}


def _session(name: str):
    return load_session(session_path(name))


def _bearer(secret: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {secret}"),)


def _service_token(mesh) -> str:
    """The token `start_mesh` wrote for inference (0600, beside the state)."""
    return (Path(mesh.state_dir) / "service-token").read_text(encoding="utf-8").strip()


def test_replayed_session_runs_to_completion_and_is_stored(mesh):
    session = _session("function_calling_simple")
    result = asyncio.run(run_task(mesh.harness, start_for(session, "stateful"), timeout=300, api_key=mesh.api_key))
    assert result.completed, result.error
    assert len(result.turns) == len(session.turns)
    assert result.tool_calls == sum(len(t.calls) for t in session.turns)
    # Every turn after the first hit the prefix cache and sent only a delta.
    for p in result.turns[1:]:
        assert p.usage.cached_input_tokens > 0
    assert result.turns[-1].bytes_sent < result.turns[-1].usage.input_tokens * 4

    # The durable transcript: GetSession and the SQLite file agree with the recording.
    async def fetch():
        async with grpc.aio.insecure_channel(mesh.harness) as ch:
            stub = harness_pb2_grpc.HarnessServiceStub(ch)
            key = _bearer(mesh.api_key)
            got = await stub.GetSession(harness_pb2.GetSessionRequest(session_id=result.session_id), metadata=key)
            listed = await stub.ListSessions(harness_pb2.ListSessionsRequest(page_size=50), metadata=key)
            return got, listed

    got, listed = asyncio.run(fetch())
    assert result.session_id in {s.session_id for s in listed.sessions}
    calls = [i.function_call for i in got.items if i.WhichOneof("item") == "function_call"]
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for t in session.turns for c in t.calls]
    outputs = [i.function_call_output.output for i in got.items if i.WhichOneof("item") == "function_call_output"]
    assert outputs == [o.output for t in session.turns for o in t.tool_outputs]
    assert len(got.turns) == len(session.turns)
    db = next(Path(mesh.state_dir).rglob("*.db"))
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        item_table = next(t for t in tables if "item" in t)
        stored = conn.execute(f"SELECT COUNT(*) FROM {item_table}").fetchone()[0]
    assert stored >= len(got.items)


def test_stateless_mode_resends_everything(mesh):
    session = _session("marshmallow-1867")
    session.turns = session.turns[:6]
    stateful = asyncio.run(run_task(mesh.harness, start_for(session, "stateful"), timeout=300, api_key=mesh.api_key))
    stateless = asyncio.run(run_task(mesh.harness, start_for(session, "stateless"), timeout=300, api_key=mesh.api_key))
    assert stateful.completed and stateless.completed, (stateful.error, stateless.error)
    sent = lambda r: sum(p.bytes_sent for p in r.turns)  # noqa: E731
    tokenized = lambda r: sum(p.timings.tokens_tokenized for p in r.turns)  # noqa: E731
    assert sent(stateless) > 2 * sent(stateful)
    assert tokenized(stateless) > 2 * tokenized(stateful)


def test_reflection_lists_every_service_and_method(mesh):
    for address, services in (
        (mesh.harness, ["loopwire.v1.HarnessService"]),
        (mesh.gateway, ["loopwire.v1.GatewayService"]),
        (mesh.inference[0], ["loopwire.v1.InferenceService"]),
    ):
        with grpc.insecure_channel(address) as channel:
            db = ProtoReflectionDescriptorDatabase(channel)
            names = set(db.get_services())
            assert {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection", *services} <= names
            from google.protobuf.descriptor_pool import DescriptorPool

            pool = DescriptorPool(db)
            for service in services:
                desc = pool.FindServiceByName(service)
                assert {m.name for m in desc.methods} == EXPECTED_METHODS[service]


def _converse(mesh, requests):
    async def go():
        async with grpc.aio.insecure_channel(mesh.gateway) as ch:
            stub = gateway_pb2_grpc.GatewayServiceStub(ch)
            call = stub.Converse(iter(requests), metadata=_bearer(mesh.api_key))
            return [e async for e in call]

    return asyncio.run(go())


def test_gateway_bad_request_is_an_in_stream_error_and_the_stream_goes_on(mesh):
    user = common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER,
                                                      content=[common_pb2.ContentPart(text="hello")]))
    bad = gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user, common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id="nope", output="x"))]))
    good = gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user], sampling=common_pb2.SamplingParams(max_output_tokens=4)))
    events = _converse(mesh, [bad, good])
    failed = [e for e in events if e.WhichOneof("event") == "failed"]
    assert failed and failed[0].failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
    assert "call_id" in failed[0].failed.error.field or "call_id" in failed[0].failed.error.message
    assert any(e.WhichOneof("event") == "completed" for e in events)


def test_gateway_rejects_a_missing_key(mesh):
    async def go():
        async with grpc.aio.insecure_channel(mesh.gateway) as ch:
            call = gateway_pb2_grpc.GatewayServiceStub(ch).Converse(iter([]))
            return [e async for e in call]

    with pytest.raises(grpc.RpcError) as err:
        asyncio.run(go())
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_inference_bad_request_is_an_in_stream_error_and_the_stream_goes_on(mesh):
    bad = inference_pb2.GenerateRequest(start=inference_pb2.GenerationStart(
        request_id="bad", full=inference_pb2.FullPrompt(token_ids=[10**9]),
        params=inference_pb2.GenerationParams(max_tokens=2)))
    good = inference_pb2.GenerateRequest(start=inference_pb2.GenerationStart(
        request_id="good", full=inference_pb2.FullPrompt(token_ids=[1, 2, 3]),
        params=inference_pb2.GenerationParams(max_tokens=2)))

    async def go():
        async with grpc.aio.insecure_channel(mesh.inference[0]) as ch:
            stub = inference_pb2_grpc.InferenceServiceStub(ch)
            events = []
            token = _bearer(_service_token(mesh))
            async for e in stub.Generate(iter([bad, good]), metadata=token):
                events.append(e)
                if e.request_id == "good" and e.WhichOneof("event") == "finished":
                    break
            status = await stub.GetStatus(inference_pb2.GetStatusRequest(), metadata=token)
            return events, status

    events, status = asyncio.run(go())
    err = next(e for e in events if e.request_id == "bad")
    assert err.WhichOneof("event") == "error" and err.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
    assert "token_ids" in err.error.field or "token_ids" in err.error.message
    assert any(e.request_id == "good" and e.WhichOneof("event") == "finished" for e in events)
    assert status.kv_blocks_total > 0


def test_harness_bad_request_names_the_field(mesh):
    async def go():
        async with grpc.aio.insecure_channel(mesh.harness) as ch:
            stub = harness_pb2_grpc.HarnessServiceStub(ch)
            try:
                events = [e async for e in stub.Run(iter([harness_pb2.RunRequest()]), metadata=_bearer(mesh.api_key))]
                return None, events
            except grpc.aio.AioRpcError as e:
                return e, []
            finally:
                pass

    err, events = asyncio.run(go())
    if err is not None:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "action" in err.details()
    else:
        failed = [e for e in events if e.WhichOneof("event") == "failed"]
        assert failed and "action" in (failed[0].failed.error.field + failed[0].failed.error.message)

    async def missing():
        async with grpc.aio.insecure_channel(mesh.harness) as ch:
            stub = harness_pb2_grpc.HarnessServiceStub(ch)
            key = _bearer(mesh.api_key)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.GetSession(harness_pb2.GetSessionRequest(session_id="no-such-session"), metadata=key)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            # and the server still serves
            await stub.ListSessions(harness_pb2.ListSessionsRequest(), metadata=key)

    asyncio.run(missing())


def test_cli_run_streams_a_replay(mesh):
    path = session_path("function_calling_simple")
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "run", "--harness", mesh.harness, "--state-dir", str(mesh.state_dir),
         "--replay", str(path)],
        capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", "PATH": ""},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "completed" in out.stdout and "per-turn profile" in out.stdout


def test_cli_run_with_an_explicit_key_and_without_one(mesh, tmp_path):
    path = session_path("function_calling_simple")
    env = {"COLUMNS": "200", "PATH": ""}
    empty = tmp_path / "no-state"
    base = [sys.executable, "-m", "loopwire.cli", "run", "--harness", mesh.harness, "--state-dir", str(empty),
            "--replay", str(path)]
    out = subprocess.run([*base, "--api-key", mesh.api_key], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "completed" in out.stdout
    # The key from the environment works the same.
    out = subprocess.run(base, capture_output=True, text=True, timeout=300,
                         env={**env, "LOOPWIRE_API_KEY": mesh.api_key})
    assert out.returncode == 0, out.stdout + out.stderr
    # No key anywhere: a clear refusal before any call.
    out = subprocess.run(base, capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no API key" in out.stdout and "--api-key" in out.stdout
    # A wrong key: the harness refuses it.
    out = subprocess.run([*base, "--api-key", "lw-dev-wrong"], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0, out.stdout + out.stderr
    assert "UNAUTHENTICATED" in (out.stdout + out.stderr).upper()


def test_inference_refuses_calls_without_the_service_token_but_health_answers(mesh):
    address = mesh.inference[0]
    generate = inference_pb2.GenerateRequest(start=inference_pb2.GenerationStart(
        request_id="r", full=inference_pb2.FullPrompt(token_ids=[1, 2, 3]),
        params=inference_pb2.GenerationParams(max_tokens=2)))

    async def go(metadata):
        async with grpc.aio.insecure_channel(address) as ch:
            stub = inference_pb2_grpc.InferenceServiceStub(ch)
            codes = {}
            for name, call in (
                ("GetStatus", lambda: stub.GetStatus(inference_pb2.GetStatusRequest(), metadata=metadata)),
                ("GetModelInfo", lambda: stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), metadata=metadata)),
            ):
                try:
                    await call()
                    codes[name] = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as e:
                    codes[name] = e.code()
            try:
                async for _ in stub.Generate(iter([generate]), metadata=metadata):
                    pass
                codes["Generate"] = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as e:
                codes["Generate"] = e.code()
            health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            return codes, health.status

    for metadata in (None, _bearer("lw-svc-" + "x" * 43), _bearer(mesh.api_key), (("authorization", "Basic abc"),)):
        codes, health = asyncio.run(go(metadata))
        assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, (metadata, codes)
        assert health == health_pb2.HealthCheckResponse.SERVING
    # The token file is private, and with it the same calls go through.
    assert (Path(mesh.state_dir) / "service-token").stat().st_mode & 0o777 == 0o600

    async def with_token():
        async with grpc.aio.insecure_channel(address) as ch:
            stub = inference_pb2_grpc.InferenceServiceStub(ch)
            return await stub.GetStatus(inference_pb2.GetStatusRequest(), metadata=_bearer(_service_token(mesh)))

    assert asyncio.run(with_token()).kv_blocks_total > 0


def test_harness_refuses_calls_without_a_tenant_key(mesh):
    session = _session("function_calling_simple")

    async def go(metadata):
        async with grpc.aio.insecure_channel(mesh.harness) as ch:
            stub = harness_pb2_grpc.HarnessServiceStub(ch)
            codes = {}
            for name, call in (
                ("ListSessions", lambda: stub.ListSessions(harness_pb2.ListSessionsRequest(), metadata=metadata)),
                ("GetSession", lambda: stub.GetSession(harness_pb2.GetSessionRequest(session_id="x"),
                                                       metadata=metadata)),
            ):
                try:
                    await call()
                    codes[name] = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as e:
                    codes[name] = e.code()
            try:
                start = harness_pb2.RunRequest(start=start_for(session, "stateful"))
                async for _ in stub.Run(iter([start]), metadata=metadata):
                    pass
                codes["Run"] = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as e:
                codes["Run"] = e.code()
            health = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
            return codes, health.status

    # No key, an unknown key, the service token (inference's credential, not a tenant's).
    for metadata in (None, _bearer("lw-dev-unknown"), _bearer(_service_token(mesh))):
        codes, health = asyncio.run(go(metadata))
        assert set(codes.values()) == {grpc.StatusCode.UNAUTHENTICATED}, (metadata, codes)
        assert health == health_pb2.HealthCheckResponse.SERVING
    assert (Path(mesh.state_dir) / "dev-api-key").read_text().strip() == mesh.api_key
