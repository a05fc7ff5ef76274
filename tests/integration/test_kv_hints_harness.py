"""The KV hint path end to end: harness -> gateway -> replica, each a real gRPC server in this
process (simulated engine with a host tier and a small device pool, real sandbox).

A shell command that runs until the test lets it finish is a tool pause: the harness's pause hint
reaches the replica (GetStatus counts the demoted blocks), another tenant's long prompt then
pushes the paused session's blocks to the host tier, and the moment the command ends the
harness's resume hint brings them back (counted as hint onloads), so the session's next request
finds its prefix on the device instead of copying it inside its own time to first token.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
from harness_testkit import TENANT_KEYS, after_file, answer, call, two_tenant_authenticator, until

from loopwire.common import grpc_server
from loopwire.common.grpc_server import service_channel
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.harness import kv_hints
from loopwire.harness.config import HarnessConfig
from loopwire.harness.server import build
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    harness_pb2,
    harness_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
)


async def test_a_tool_pause_demotes_the_sessions_kv_and_its_end_brings_it_back(tmp_path: Path, monkeypatch) -> None:
    # A command never run before is expected early (well under a second: no hint); the path is
    # tested here, when to hint in test_kv_pause_estimate: any expected pause is hinted.
    monkeypatch.setattr(kv_hints, "MIN_PAUSE_MS", 0)
    engine = build_engine(EngineOptions(engine="simulated", replica_id="sim-0", kv_blocks=256, host_kv_bytes=1 << 34))
    inference = grpc_server.make_server()
    add_servicer(inference, engine)
    inference_addr = f"127.0.0.1:{inference.add_insecure_port('127.0.0.1:0')}"
    await engine.start()
    await inference.start()
    auth = two_tenant_authenticator(tmp_path)  # t1 may retain KV (an hour), t2 not at all
    auth.tenants["t2"].policy.max_retention_seconds = 0
    gw = await start_gateway([inference_addr], poll_interval_s=0.1, model_timeout_s=10, authenticator=auth,
                             config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    config = HarnessConfig(gateway=gw.address, api_key=TENANT_KEYS["t1"], workspace_root=tmp_path / "ws",
                           shell_timeout=30)
    service, store = build(config, tmp_path / "harness.db", auth)
    harness = grpc_server.make_server()
    harness_pb2_grpc.add_HarnessServiceServicer_to_server(service, harness)
    harness_addr = f"127.0.0.1:{harness.add_insecure_port('127.0.0.1:0')}"
    await harness.start()
    replica_channel = grpc.aio.insecure_channel(inference_addr)
    replica = inference_pb2_grpc.InferenceServiceStub(replica_channel)
    harness_channel = service_channel(harness_addr, TENANT_KEYS["t1"])
    blocks = engine.core.blocks  # type: ignore[attr-defined]

    async def status() -> inference_pb2.GetStatusResponse:
        return await replica.GetStatus(inference_pb2.GetStatusRequest())

    try:
        script = harness_pb2.ReplayScript(source="test", run_tools=True, turns=[
            harness_pb2.ReplayTurn(output=answer("", call("shell", json.dumps(
                {"command": after_file("go", "echo the tests passed", within=60)}), "c1"))),
            harness_pb2.ReplayTurn(output=answer("done")),
        ])
        start = harness_pb2.StartTask(task="please run the whole test suite and report " * 40, replay=script)
        events: list[harness_pb2.RunResponse] = []

        async def run() -> None:
            stub = harness_pb2_grpc.HarnessServiceStub(harness_channel)
            async for event in stub.Run(iter([harness_pb2.RunRequest(start=start)]), timeout=120):
                events.append(event)

        session = asyncio.create_task(run())
        await until(lambda: any(e.WhichOneof("event") == "tool_call_began" for e in events), "the command to start")
        demoted = 0

        async def paused() -> bool:
            nonlocal demoted
            demoted = (await status()).kv_hint_demoted_blocks
            return demoted > 0
        await until_async(paused, "the harness's pause hint at the replica")
        assert blocks.num_paused == 1
        # It counts until the resume hint: the tenant's ceiling (an hour) bounds only a harness gone away.
        (pause,) = blocks._paused.values()
        assert pause.until - engine.core.clock.now() > 3000

        other_channel = service_channel(gw.address, TENANT_KEYS["t2"])
        other = gateway_pb2_grpc.GatewayServiceStub(other_channel).Converse()
        await other.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
            model="m", sampling=common_pb2.SamplingParams(max_output_tokens=4), input=[common_pb2.Item(
                message=common_pb2.Message(role=common_pb2.ROLE_USER,
                                           content=[common_pb2.ContentPart(text="zeta eta theta iota " * 800)]))])))
        while (event := await other.read()).WhichOneof("event") not in ("completed", "failed"):
            pass
        assert event.WhichOneof("event") == "completed", event
        other.cancel()  # that session ends; the paused one's blocks now wait in the host tier
        await other_channel.close()
        await until(lambda: blocks.num_parked == 0, "the other stream's blocks let go")
        assert len(blocks.host) > 0
        host_hits = blocks.host_hit_tokens

        workspace = Path(next(e.started.workspace for e in events if e.WhichOneof("event") == "started"))
        (workspace / "go").touch()  # the command ends

        async def resumed() -> bool:
            return (await status()).kv_hint_onloaded_blocks > 0
        await until_async(resumed, "the harness's resume hint to bring the blocks back")
        await asyncio.wait_for(session, 60)
        assert events[-1].WhichOneof("event") == "completed", events[-1]
        profiles = [e.turn_completed.profile for e in events if e.WhichOneof("event") == "turn_completed"]
        assert len(profiles) == 2
        assert profiles[1].usage.cached_input_tokens >= profiles[0].usage.input_tokens - blocks.block_size
        assert blocks.host_hit_tokens == host_hits, "the next request found its prefix on the device"
    finally:
        await harness_channel.close()
        await replica_channel.close()
        await harness.stop(0)
        await gw.close()
        await inference.stop(0)
        await engine.close()
        store.close()


async def until_async(condition, what: str, within: float = 30.0) -> None:  # noqa: ANN001
    """``until`` for a condition that needs an RPC."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await condition():
        assert loop.time() < deadline, f"timed out after {within:.0f} s waiting for {what}"
        await asyncio.sleep(0.02)
