"""GetStatus from a real server tells the router the truth: role, queue lengths while requests
run, measured prefill and decode rates, KV blocks in both tiers, host hits."""

from __future__ import annotations

import asyncio
import os
import signal

from test_server import parse

from loopwire.common import grpc_server
from loopwire.inference.cost_model import CostModel
from loopwire.inference.server import serve_from_args
from loopwire.v1 import inference_pb2, inference_pb2_grpc

BLOCK = 16
HOST_BYTES = 64 << 20


def _start(rid: str, prompt: list[int], max_tokens: int) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(start=inference_pb2.GenerationStart(
        request_id=rid, full=inference_pb2.FullPrompt(token_ids=prompt),
        params=inference_pb2.GenerationParams(max_tokens=max_tokens, speculative_decoding=False)))


async def _generate(stub: inference_pb2_grpc.InferenceServiceStub, rid: str, prompt: list[int], n: int) -> int:
    call = stub.Generate()
    await call.write(_start(rid, prompt, n))
    got = 0
    async for r in call:
        if r.WhichOneof("event") == "tokens":
            got += len(r.tokens.token_ids)
        elif r.WhichOneof("event") == "finished":
            break
        else:
            raise AssertionError(r)
    await call.done_writing()
    return got


async def test_get_status_reports_queues_rates_and_both_kv_tiers() -> None:
    ports: list[int] = []
    args = parse(["--listen", "127.0.0.1:0", "--engine", "simulated", "--insecure-dev", "--role", "decode",
                  "--time-scale", "1", "--kv-blocks", "16", "--block-size", str(BLOCK),
                  "--host-kv-bytes", str(HOST_BYTES)])
    task = asyncio.create_task(serve_from_args(args, ready=ports.append))
    for _ in range(200):
        if ports:
            break
        await asyncio.sleep(0.02)
    block_bytes = BLOCK * CostModel.named("h200", "8b").kv_bytes_per_token
    async with grpc_server.service_channel(f"127.0.0.1:{ports[0]}") as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        idle = await stub.GetStatus(inference_pb2.GetStatusRequest())
        assert idle.role == inference_pb2.ENGINE_ROLE_DECODE
        assert (idle.running, idle.waiting, idle.kv_blocks_used) == (0, 0, 0)
        assert idle.kv_host_blocks_total == HOST_BYTES // block_bytes and idle.kv_host_blocks_used == 0
        # two requests of 14 blocks each on a 16-block replica: one runs while the other waits
        a = asyncio.create_task(_generate(stub, "a", list(range(1, 101)), 120))
        b = asyncio.create_task(_generate(stub, "b", list(range(1001, 1101)), 120))
        seen = []
        while not (a.done() and b.done()):
            seen.append(await stub.GetStatus(inference_pb2.GetStatusRequest()))
            await asyncio.sleep(0.01)
        assert await a == await b == 120
        assert any(s.running == 1 and s.waiting == 1 for s in seen)
        assert any(s.decode_tokens_per_second > 0 for s in seen)
        assert any(s.prefill_tokens_per_second > 0 for s in seen)
        assert all(s.kv_blocks_used + s.kv_blocks_free == s.kv_blocks_total == 16 for s in seen)
        after = await stub.GetStatus(inference_pb2.GetStatusRequest())
        assert after.kv_host_blocks_used > 0  # the first request's blocks moved to host memory for the second
        assert await _generate(stub, "a2", list(range(1, 101)), 2) == 2  # comes back from the host tier
        back = await stub.GetStatus(inference_pb2.GetStatusRequest())
        assert back.prefix_cache_hit_tokens - after.prefix_cache_hit_tokens == 6 * BLOCK  # the whole cached prefix
        assert back.prefix_cache_host_hit_tokens > after.prefix_cache_host_hit_tokens
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 15)
