"""Disaggregation as deployed: `loopwire inference --role prefill`, `--role decode --peers ...` and
`loopwire gateway --max-local-prefill-length ...` as real processes on loopback.

The flags reach the decision: a long first prompt is prefilled by the prefill process (its
GetStatus counts the tokens) and arrives cached on the decode process; the short append after
it leaves the prefill process untouched.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from loopwire.mesh import free_port, wait_healthy
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, inference_pb2, inference_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "loopwire.cli", *args, "--insecure-dev"],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[str, str]]:
    pre, dec, gw = (f"127.0.0.1:{free_port()}" for _ in range(3))
    procs: list[subprocess.Popen] = []
    try:
        for args in (
            ["inference", "--listen", pre, "--engine", "simulated", "--time-scale", "0", "--role", "prefill",
             "--replica-id", "p"],
            ["inference", "--listen", dec, "--engine", "simulated", "--time-scale", "0", "--role", "decode",
             "--replica-id", "d", "--peers", pre],
            ["gateway", "--listen", gw, "--inference", f"{pre},{dec}", "--max-local-prefill-length", "128",
             "--max-prefill-queue", "4", "--allow-replay"],
        ):
            procs.append(start(args, tmp_path / f"{args[0]}-{len(procs)}.log"))
            wait_healthy(args[2], proc=procs[-1])
        yield gw, pre
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


async def test_long_first_prompt_prefilled_by_the_prefill_process(deployment: tuple[str, str]) -> None:
    gw, pre = deployment
    async with grpc.aio.insecure_channel(gw) as channel, grpc.aio.insecure_channel(pre) as pre_channel:
        status = inference_pb2_grpc.InferenceServiceStub(pre_channel).GetStatus
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        call = stub.Converse()
        done: list[gateway_pb2.ResponseCompleted] = []
        queried: list[int] = []
        previous = ""
        for text, reply in (("You are a careful engineer. " * 60 + "Fix the failing test.", "Reading it."),
                            ("go on", "Done.")):
            request = gateway_pb2.CreateResponse(input=[user(text)], replay=common_pb2.ReplayOutput(text=reply))
            if previous:
                request.previous_response_id = previous
            await call.write(gateway_pb2.ConverseRequest(create_response=request))
            while True:
                event = await call.read()
                assert event is not grpc.aio.EOF and event.WhichOneof("event") != "failed", event
                if event.WhichOneof("event") == "completed":
                    break
            previous = event.response_id
            done.append(event.completed)
            queried.append((await status(inference_pb2.GetStatusRequest())).prefix_cache_queried_tokens)
        await call.done_writing()
    first, second = done
    # The prefill process looked the prompt's full blocks up (and computed them) ...
    assert first.usage.input_tokens > 128 and queried[0] == first.usage.input_tokens // 16 * 16
    assert first.usage.cached_input_tokens == first.usage.input_tokens // 16 * 16  # ... and the decode one pulled it
    assert queried[1] == queried[0]  # the short append: the decode process prefilled it itself
    assert second.usage.input_tokens - second.usage.cached_input_tokens <= 128
