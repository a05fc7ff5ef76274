"""A gateway killed mid-response: the run fails retryable, saying the session can be resumed, and
a ResumeSession once a gateway is back completes it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
from harness_testkit import FakeGateway, answer, harness_env, kinds, of, start_server

from loopwire.common.grpc_server import make_server
from loopwire.mesh import free_port
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, harness_pb2

RESUMABLE = (harness_pb2.SESSION_STATUS_FAILED, harness_pb2.SESSION_STATUS_INTERRUPTED)


class StallingGateway(FakeGateway):
    """Starts streaming a response, then hangs until its server is stopped."""

    def __init__(self) -> None:
        super().__init__()
        self.streaming = asyncio.Event()

    async def _respond(self, req: gateway_pb2.CreateResponse):  # noqa: ANN202
        self.requests.append(req)
        yield gateway_pb2.ConverseResponse(response_id="resp_1", created=gateway_pb2.ResponseCreated(
            response_id="resp_1"))
        yield gateway_pb2.ConverseResponse(response_id="resp_1", text_delta=gateway_pb2.TextDelta(text="Half an"))
        self.streaming.set()
        await asyncio.Event().wait()


async def test_a_gateway_killed_mid_response_fails_the_run_retryable_and_resuming_completes_it(tmp_path):
    async with harness_env(tmp_path) as h:
        stalling = StallingGateway()
        add = gateway_pb2_grpc.add_GatewayServiceServicer_to_server
        server, address = await start_server(add, stalling)
        h.config.gateway = address  # runs started from now on talk to this gateway
        run = asyncio.ensure_future(h.start("write the answer"))
        await asyncio.wait_for(stalling.streaming.wait(), 20)
        await server.stop(0)  # the gateway process dies while the response streams
        events = await asyncio.wait_for(run, 30)

        assert kinds(events)[0] == "started" and kinds(events)[-1] == "failed"
        assert "text_delta" in kinds(events)  # it did die mid-response, after output had streamed
        error = of(events, "failed")[0].error
        assert error.code == common_pb2.ERROR_CODE_UNAVAILABLE, error
        assert error.retryable, error
        assert "ResumeSession" in error.message, error.message
        sid = of(events, "started")[0].session_id
        stored = await h.session(sid)
        assert stored.session.status in RESUMABLE
        assert [i.message.content[0].text for i in stored.items] == ["write the answer"]

        # A new gateway process on the same address; the session resumes and completes.
        back = FakeGateway()
        back.script = [answer("the answer")]
        restarted = await _serve_at(add, back, address)
        try:
            events = await h.run(harness_pb2.RunRequest(resume=harness_pb2.ResumeSession(session_id=sid)))
            assert kinds(events)[-1] == "completed", of(events, "failed")
            assert of(events, "completed")[0].final_text == "the answer"
            stored = await h.session(sid)
            assert stored.session.status == harness_pb2.SESSION_STATUS_COMPLETED
            texts = [i.message.content[0].text for i in stored.items]
            assert texts == ["write the answer", "the answer"]
        finally:
            await restarted.stop(0)


async def _serve_at(add, servicer, address: str) -> grpc.aio.Server:  # noqa: ANN001
    """A gateway server on a given address (the killed one's port, reused)."""
    server = make_server()
    add(servicer, server)
    assert server.add_insecure_port(address)
    await server.start()
    return server


# A gateway process of its own (a StallingGateway), so the test can SIGKILL it: the stream is reset.
GATEWAY_PROCESS = """
import asyncio, sys
from test_gateway_killed import StallingGateway
from loopwire.common.grpc_server import make_server
from loopwire.v1 import gateway_pb2_grpc

async def main():
    server = make_server()
    gateway_pb2_grpc.add_GatewayServiceServicer_to_server(StallingGateway(), server)
    server.add_insecure_port(sys.argv[1])
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


async def test_a_gateway_process_sigkilled_mid_response_is_a_retryable_failure(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    here = Path(__file__).resolve().parent
    proc = subprocess.Popen([sys.executable, "-c", GATEWAY_PROCESS, address], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(here), str(here.parents[1])])})
    try:
        assert (await asyncio.to_thread(proc.stdout.readline)).strip() == b"ready"
        async with harness_env(tmp_path) as h:
            h.config.gateway = address
            events = []
            async for event in h.stub.Run(iter([harness_pb2.RunRequest(start=harness_pb2.StartTask(task="t"))]),
                                          timeout=60):
                events.append(event)
                if event.WhichOneof("event") == "text_delta":
                    os.kill(proc.pid, signal.SIGKILL)
            assert "text_delta" in kinds(events) and kinds(events)[-1] == "failed"
            error = of(events, "failed")[0].error
            assert error.code == common_pb2.ERROR_CODE_UNAVAILABLE and error.retryable, error
            assert "ResumeSession" in error.message, error.message
            assert (await h.session(of(events, "started")[0].session_id)).session.status in RESUMABLE
    finally:
        proc.kill()
        proc.wait()
