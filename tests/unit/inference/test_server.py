"""Flags (with their LOOPWIRE_* environment defaults) and serving from them."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

import pytest

from loopwire.common import grpc_server
from loopwire.common.model_def import dummy_definition
from loopwire.inference.server import EngineOptions, add_arguments, build_engine, model_spec, serve_from_args
from loopwire.v1 import inference_pb2, inference_pb2_grpc


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse([])
    assert (args.listen, args.engine, args.model, args.model_size) == ("127.0.0.1:50053", "reference", "", "tiny")
    assert (args.block_size, args.max_output_tokens, args.num_draft_tokens, args.no_prefix_cache) == (16, 4096, 8, False)
    assert (args.role, args.gpu, args.model_params, args.time_scale) == ("both", "h200", "8b", 0.0)
    monkeypatch.setenv("LOOPWIRE_ENGINE", "simulated")
    monkeypatch.setenv("LOOPWIRE_NO_PREFIX_CACHE", "1")
    monkeypatch.setenv("LOOPWIRE_KV_BLOCKS", "77")
    args = parse(["--gpu", "b200"])
    assert args.engine == "simulated" and args.no_prefix_cache and args.kv_blocks == 77 and args.gpu == "b200"
    options = EngineOptions.from_args(args)
    engine = build_engine(options)
    assert engine.name == "simulated" and engine.config.num_kv_blocks == 77 and not engine.config.prefix_cache
    assert engine.definition.source == "dummy:0"  # simulated speaks the dummy model by default
    monkeypatch.setenv("LOOPWIRE_MODEL", "dummy:3")
    assert parse([]).model == "dummy:3" and parse(["--model", "dummy:5"]).model == "dummy:5"


def test_model_spec_defaults_per_engine() -> None:
    assert model_spec(EngineOptions(engine="reference")) == "default"  # the bundled real model
    assert model_spec(EngineOptions(engine="simulated")) == "dummy:0"
    assert model_spec(EngineOptions(engine="reference", model="dummy:7")) == "dummy:7"
    with pytest.raises(ValueError, match="trtllm engine needs"):
        model_spec(EngineOptions(engine="trtllm"))


def test_reference_engine_on_the_dummy_model() -> None:
    engine = build_engine(EngineOptions(model="dummy:0", kv_blocks=64))
    assert engine.name == "reference" and engine.definition.digest == dummy_definition().digest
    assert engine.vocab_size == dummy_definition().vocab_size


def test_bad_options_are_named() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        build_engine(EngineOptions(engine="tpu"))
    with pytest.raises(ValueError, match="unknown model size"):
        build_engine(EngineOptions(model="dummy:0", model_size="huge"))
    with pytest.raises(ValueError, match="no such file"):
        build_engine(EngineOptions(model="/nonexistent/model.gguf"))


async def test_serve_from_args_listens_and_drains_on_sigterm() -> None:
    ports: list[int] = []
    task = asyncio.create_task(serve_from_args(parse(["--listen", "127.0.0.1:0", "--engine", "simulated", "--insecure-dev"]),
                                               ready=ports.append))
    for _ in range(200):
        if ports:
            break
        await asyncio.sleep(0.02)
    async with grpc_server.service_channel(f"127.0.0.1:{ports[0]}") as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        status = await stub.GetStatus(inference_pb2.GetStatusRequest())
        info = (await stub.GetModelInfo(inference_pb2.GetModelInfoRequest())).model
    assert status.engine == "simulated" and status.role == inference_pb2.ENGINE_ROLE_BOTH
    assert info.source == "dummy:0" and info.engine == "simulated"
    assert status.tokenizer_digest == info.tokenizer_digest == dummy_definition().digest
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(task, 15)
