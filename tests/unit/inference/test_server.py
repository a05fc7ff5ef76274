"""Flags (with their LOOPWIRE_* environment defaults) and serving from them."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

import pytest

from loopwire.common import grpc_server
from loopwire.inference.server import EngineOptions, add_arguments, build_engine, serve_from_args
from loopwire.v1 import inference_pb2, inference_pb2_grpc


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse([])
    assert (args.listen, args.engine, args.weights, args.model_size) == ("127.0.0.1:50053", "reference", "dummy:0", "tiny")
    assert (args.block_size, args.max_output_tokens, args.num_draft_tokens, args.prefix_cache) == (16, 4096, 8, True)
    assert (args.role, args.gpu, args.model_params, args.time_scale) == ("both", "h200", "8b", 0.0)
    monkeypatch.setenv("LOOPWIRE_ENGINE", "simulated")
    monkeypatch.setenv("LOOPWIRE_NO_PREFIX_CACHE", "1")
    monkeypatch.setenv("LOOPWIRE_KV_BLOCKS", "77")
    args = parse(["--gpu", "b200"])
    assert args.engine == "simulated" and not args.prefix_cache and args.kv_blocks == 77 and args.gpu == "b200"
    options = EngineOptions.from_args(args)
    engine = build_engine(options)
    assert engine.name == "simulated" and engine.config.num_kv_blocks == 77 and not engine.config.prefix_cache


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        build_engine(EngineOptions(engine="tpu"))
    with pytest.raises(ValueError, match="unknown model size"):
        build_engine(EngineOptions(model_size="huge"))


async def test_serve_from_args_listens_and_drains_on_sigterm() -> None:
    ports: list[int] = []
    task = asyncio.create_task(serve_from_args(parse(["--listen", "127.0.0.1:0", "--engine", "simulated"]),
                                               ready=ports.append))
    for _ in range(200):
        if ports:
            break
        await asyncio.sleep(0.02)
    async with grpc_server.insecure_channel(f"127.0.0.1:{ports[0]}") as channel:
        status = await inference_pb2_grpc.InferenceServiceStub(channel).GetStatus(inference_pb2.GetStatusRequest())
    assert status.engine == "simulated" and status.role == inference_pb2.ENGINE_ROLE_BOTH
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 15)
