"""Telemetry: traceparent crosses real grpc.aio bidirectional streams; metrics reach Prometheus."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.common import telemetry
from loopwire.v1 import (
    common_pb2,
    gateway_pb2,
    gateway_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
)


class Inference(inference_pb2_grpc.InferenceServiceServicer):
    async def Generate(self, request_iterator, context) -> AsyncIterator[inference_pb2.GenerateResponse]:
        async for request in request_iterator:
            start = request.start
            with telemetry.generation_span("tiny", start.request_id, session_id=start.session_id) as span:
                span.first_chunk()
                yield inference_pb2.GenerateResponse(
                    request_id=start.request_id, tokens=inference_pb2.TokenBatch(token_ids=[1, 2])
                )
                usage = common_pb2.Usage(input_tokens=10, cached_input_tokens=6, output_tokens=2)
                span.set_usage(usage)
                span.finish(common_pb2.FINISH_REASON_STOP)
                yield inference_pb2.GenerateResponse(
                    request_id=start.request_id, finished=inference_pb2.GenerationFinished(usage=usage)
                )

    async def Prefill(self, request, context) -> inference_pb2.PrefillResponse:
        # Echo the traceparents received, so tests can see what crossed the wire.
        received = [v for k, v in context.invocation_metadata() if k == "traceparent"]
        return inference_pb2.PrefillResponse(replica_id=",".join(received) or "r0")

    async def GetStatus(self, request, context) -> inference_pb2.GetStatusResponse:
        received = [v for k, v in context.invocation_metadata() if k == "traceparent"]
        return inference_pb2.GetStatusResponse(replica_id="r0", model=",".join(received))

    async def GetModelInfo(self, request, context) -> inference_pb2.GetModelInfoResponse:
        return inference_pb2.GetModelInfoResponse()


class Gateway(gateway_pb2_grpc.GatewayServiceServicer):
    """Forwards each CreateResponse as a generation on one Generate stream per Converse stream."""

    def __init__(self, inference_address: str) -> None:
        self.inference_address = inference_address

    async def Converse(self, request_iterator, context) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        channel = grpc.aio.insecure_channel(
            self.inference_address, interceptors=telemetry.client_interceptors()
        )
        async with channel:
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            generate = stub.Generate()
            async for request in request_iterator:
                response_id = f"resp-{request.create_response.model}"
                with telemetry.response_span(request.create_response.model, response_id):
                    await generate.write(
                        inference_pb2.GenerateRequest(
                            start=inference_pb2.GenerationStart(request_id=response_id, session_id="s1")
                        )
                    )
                    while True:
                        event = await generate.read()
                        if event.HasField("finished"):
                            break
                    yield gateway_pb2.ConverseResponse(
                        response_id=response_id,
                        completed=gateway_pb2.ResponseCompleted(usage=event.finished.usage),
                    )
            await generate.done_writing()


async def _serve(servicer, add) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=telemetry.server_interceptors())
    add(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
def exporter():
    spans = InMemorySpanExporter()
    telemetry.setup("loopwire-test", span_exporter=spans)
    yield spans
    telemetry.shutdown()


async def _run_turns(turns: int) -> list[gateway_pb2.ConverseResponse]:
    inference, inference_address = await _serve(
        Inference(), inference_pb2_grpc.add_InferenceServiceServicer_to_server
    )
    gateway, gateway_address = await _serve(
        Gateway(inference_address), gateway_pb2_grpc.add_GatewayServiceServicer_to_server
    )
    events = []
    try:
        channel = grpc.aio.insecure_channel(gateway_address, interceptors=telemetry.client_interceptors())
        async with channel:
            with telemetry.turn_span("s1", 0, "tiny"):
                call = gateway_pb2_grpc.GatewayServiceStub(channel).Converse()
                for turn in range(turns):
                    await call.write(
                        gateway_pb2.ConverseRequest(
                            create_response=gateway_pb2.CreateResponse(model=f"m{turn}")
                        )
                    )
                    events.append(await call.read())
                await call.done_writing()
                assert await call.read() == grpc.aio.EOF
    finally:
        await gateway.stop(None)
        await inference.stop(None)
    return events


async def test_one_trace_spans_client_gateway_and_inference_over_bidi_streams(exporter) -> None:
    events = await _run_turns(3)
    assert [e.completed.usage.output_tokens for e in events] == [2, 2, 2]

    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    by_id = {s.context.span_id: s for s in spans}

    def ancestry(span) -> list[str]:
        names = []
        while span.parent is not None:
            span = by_id[span.parent.span_id]
            names.append(span.name)
        return names

    generations = [s for s in spans if s.name == "text_completion tiny"]
    assert len(generations) == 3
    assert ancestry(generations[0]) == [
        "loopwire.v1.InferenceService/Generate",
        "loopwire.v1.InferenceService/Generate",
        "loopwire.v1.GatewayService/Converse",
        "loopwire.v1.GatewayService/Converse",
        "invoke_agent tiny",
    ]
    responses = [s for s in spans if s.name.startswith("chat ")]
    assert [ancestry(s)[0] for s in responses] == ["loopwire.v1.GatewayService/Converse"] * 3
    kinds = {s.name: s.kind for s in spans if "Service/" in s.name and s.kind == trace.SpanKind.SERVER}
    assert set(kinds) == {"loopwire.v1.InferenceService/Generate", "loopwire.v1.GatewayService/Converse"}
    attrs = generations[0].attributes
    assert attrs["gen_ai.operation.name"] == "text_completion"
    assert attrs["gen_ai.request.model"] == "tiny"
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (10, 2)
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 6
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs["gen_ai.response.time_to_first_chunk"] >= 0


async def test_unary_call_carries_incoming_traceparent_and_health_and_polls_are_untraced(exporter) -> None:
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    server = grpc.aio.server(interceptors=telemetry.server_interceptors())
    inference_pb2_grpc.add_InferenceServiceServicer_to_server(Inference(), server)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            parent = (("traceparent", f"00-{trace_id}-b7ad6b7169203331-01"),)
            prefilled = await stub.Prefill(inference_pb2.PrefillRequest(token_ids=[1]), metadata=parent)
            # The routers' polls and health checks: no spans, even with a traceparent.
            await stub.GetStatus(inference_pb2.GetStatusRequest(), metadata=parent)
            await stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), metadata=parent)
            await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    finally:
        await server.stop(None)
    assert prefilled.replica_id.startswith(f"00-{trace_id}-")
    [span] = exporter.get_finished_spans()
    assert span.name == "loopwire.v1.InferenceService/Prefill"
    assert format(span.context.trace_id, "032x") == trace_id
    assert format(span.parent.span_id, "016x") == "b7ad6b7169203331"


async def test_client_span_replaces_a_traceparent_the_caller_set(exporter) -> None:
    inference, address = await _serve(Inference(), inference_pb2_grpc.add_InferenceServiceServicer_to_server)
    stale = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    try:
        async with grpc.aio.insecure_channel(
            address, interceptors=telemetry.client_interceptors()
        ) as channel:
            with telemetry.turn_span("s", 1, "m"):
                prefilled = await inference_pb2_grpc.InferenceServiceStub(channel).Prefill(
                    inference_pb2.PrefillRequest(token_ids=[1]), metadata=(("traceparent", stale),)
                )
    finally:
        await inference.stop(None)
    [client] = [s for s in exporter.get_finished_spans() if s.kind == trace.SpanKind.CLIENT]
    [received] = prefilled.replica_id.split(",")
    assert received.split("-")[1:3] == [f"{client.context.trace_id:032x}", f"{client.context.span_id:016x}"]


async def test_off_without_endpoint_no_interceptors_and_streams_still_work(monkeypatch) -> None:
    monkeypatch.delenv(telemetry.ENDPOINT_ENV, raising=False)
    state = telemetry.setup("loopwire-test")
    try:
        assert (state.tracing, state.metrics_port) == (False, None)
        assert telemetry.server_interceptors() == [] and telemetry.client_interceptors() == []
        with telemetry.turn_span("s", 1, "m") as span:
            assert not span.span.is_recording()
        assert len(await _run_turns(2)) == 2
    finally:
        telemetry.shutdown()


async def test_server_span_ends_when_client_cancels_stream(exporter) -> None:
    inference, address = await _serve(Inference(), inference_pb2_grpc.add_InferenceServiceServicer_to_server)
    try:
        async with grpc.aio.insecure_channel(
            address, interceptors=telemetry.client_interceptors()
        ) as channel:
            call = inference_pb2_grpc.InferenceServiceStub(channel).Generate()
            await call.write(
                inference_pb2.GenerateRequest(start=inference_pb2.GenerationStart(request_id="a"))
            )
            await call.read()
            call.cancel()
            for _ in range(100):
                if len(exporter.get_finished_spans()) >= 3:
                    break
                await asyncio.sleep(0.02)
    finally:
        await inference.stop(None)
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == [
        "loopwire.v1.InferenceService/Generate",
        "loopwire.v1.InferenceService/Generate",
        "text_completion tiny",
    ]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def test_metrics_reach_the_prometheus_endpoint() -> None:
    state = telemetry.setup("loopwire-test", metrics_port=0, metrics_host="127.0.0.1")
    try:
        assert state.metrics_port
        m = telemetry.metrics()
        usage = common_pb2.Usage(
            input_tokens=100, cached_input_tokens=75, output_tokens=40, verification_steps=20
        )
        timings = common_pb2.Timings(
            ttft_us=250_000, decode_us=2_000_000, tokens_tokenized=12, bytes_received=900
        )
        m.record_generation(usage, timings, model="tiny")
        m.record_response(timings, model="tiny")
        m.set_queue_depth(3, replica_id="r0")
        lines = {
            line.split(" ")[0]: float(line.split(" ")[1])
            for line in _scrape(state.metrics_port).splitlines()
            if line and not line.startswith("#")
        }
    finally:
        telemetry.shutdown()

    def value(prefix: str) -> float:
        [v] = [v for k, v in lines.items() if k.startswith(prefix + "{") or k == prefix]
        return v

    assert value("gen_ai_server_time_to_first_token_seconds_sum") == 0.25
    assert value("loopwire_generation_tokens_per_second_sum") == 20.0
    assert value("loopwire_prefix_cache_hit_tokens_total") == 75
    assert value("loopwire_prefix_cache_queried_tokens_total") == 100
    assert value("loopwire_prefix_cache_hit_ratio_sum") == 0.75
    assert value("loopwire_speculative_acceptance_length_sum") == 2.0
    assert value("loopwire_turn_tokens_tokenized_sum") == 12
    assert value("loopwire_turn_bytes_sum") == 900
    assert value("loopwire_inference_queue_depth") == 3

    def bucket(name: str, le: str) -> float:
        [v] = [v for k, v in lines.items() if k.startswith(name + "_bucket{") and f'le="{le}"' in k]
        return v

    # Buckets fit each metric: a 0.25 s TTFT lands between 0.1 and 0.25, not in OTel's default le=5.
    assert bucket("gen_ai_server_time_to_first_token_seconds", "0.1") == 0
    assert bucket("gen_ai_server_time_to_first_token_seconds", "0.25") == 1
    assert bucket("loopwire_prefix_cache_hit_ratio", "0.7") == 0
    assert bucket("loopwire_prefix_cache_hit_ratio", "0.8") == 1
    assert bucket("loopwire_speculative_acceptance_length", "1.5") == 0
    assert bucket("loopwire_speculative_acceptance_length", "2") == 1


def test_metrics_port_flag_defaults_from_env(monkeypatch) -> None:
    import argparse

    monkeypatch.setenv("LOOPWIRE_METRICS_PORT", "9464")
    parser = argparse.ArgumentParser()
    telemetry.add_arguments(parser)
    assert parser.parse_args([]).metrics_port == 9464
    assert parser.parse_args(["--metrics-port", "0"]).metrics_port == 0
    monkeypatch.delenv("LOOPWIRE_METRICS_PORT")
    parser = argparse.ArgumentParser()
    telemetry.add_arguments(parser)
    assert parser.parse_args([]).metrics_port is None
