"""Traces in Jaeger: a session run through a mesh exporting OTLP shows up, through Jaeger's
HTTP API, as one trace with spans from the harness, the gateway and the inference service."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopwire.client import run_task
from loopwire.mesh import free_port, start_mesh
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
JAEGER = ROOT / "scripts" / "jaeger.sh"
SERVICES = ("harness", "gateway", "inference")


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Jaeger v2 on free loopback ports; yields its OTLP endpoint and query URL."""
    built = subprocess.run(["bash", str(JAEGER), "path"], capture_output=True, text=True)
    if built.returncode != 0:
        if not os.environ.get("CI"):
            pytest.skip(
                "the Jaeger binary is not built (scripts/jaeger.sh build, or scripts/install_tools.sh)"
            )
        # In CI it must run: build it now (cached for later runs).
        subprocess.run(["bash", str(JAEGER), "build"], check=True, timeout=1800)
    ports = {
        name: free_port()
        for name in (
            "JAEGER_OTLP_GRPC_PORT",
            "JAEGER_OTLP_HTTP_PORT",
            "JAEGER_QUERY_PORT",
            "JAEGER_QUERY_GRPC_PORT",
            "JAEGER_HEALTH_PORT",
        )
    }
    log = open(tmp_path_factory.mktemp("jaeger") / "jaeger.log", "wb")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        ["bash", str(JAEGER), "start"],
        env={**os.environ, **{k: str(v) for k, v in ports.items()}},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    health = f"http://127.0.0.1:{ports['JAEGER_HEALTH_PORT']}/status"
    try:
        for _ in range(300):
            assert proc.poll() is None, f"jaeger exited with {proc.returncode}, see {log.name}"
            try:
                if _get_json(health).get("healthy"):
                    break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            time.sleep(0.1)
        else:
            pytest.fail(f"jaeger did not become healthy, see {log.name}")
        yield {
            "otlp": f"http://127.0.0.1:{ports['JAEGER_OTLP_GRPC_PORT']}",
            "query": f"http://127.0.0.1:{ports['JAEGER_QUERY_PORT']}",
        }
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _start_task() -> harness_pb2.StartTask:
    call = common_pb2.FunctionCall(call_id="call_1", name="bash", arguments='{"command":"echo hello"}')
    return harness_pb2.StartTask(
        task="Greet from the shell, then say you are done.",
        max_turns=4,
        replay=harness_pb2.ReplayScript(
            source="jaeger test",
            tools=[
                common_pb2.Tool(
                    name="bash", description="Run a shell command", parameters='{"type":"object"}'
                )
            ],
            turns=[
                harness_pb2.ReplayTurn(
                    output=common_pb2.ReplayOutput(text="Greeting.", function_calls=[call]),
                    followups=[
                        common_pb2.Item(
                            function_call_output=common_pb2.FunctionCallOutput(
                                call_id="call_1", output="hello\n"
                            )
                        )
                    ],
                ),
                harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(text="Done.")),
            ],
        ),
    )


def _traces_spanning_all_services(query: str) -> list[dict]:
    """Traces (from any of our services) whose spans come from all three services."""
    found: dict[str, dict] = {}
    services = _get_json(f"{query}/api/services").get("data") or []
    for service in services:
        if not any(name in service for name in SERVICES):
            continue
        for trace in _get_json(f"{query}/api/traces?service={service}&limit=50").get("data") or []:
            names = {trace["processes"][span["processID"]]["serviceName"] for span in trace["spans"]}
            if all(any(name in s for s in names) for name in SERVICES):
                found[trace["traceID"]] = trace
    return list(found.values())


def _parents(span: dict) -> list[str]:
    return [ref["spanID"] for ref in span["references"] if ref["refType"] == "CHILD_OF"]


def _complete(trace: dict) -> bool:
    """Every parent a span names is in the trace: W3C trace context crossed each hop."""
    ids = {span["spanID"] for span in trace["spans"]}
    return all(parent in ids for span in trace["spans"] for parent in _parents(span))


def test_one_trace_spans_harness_gateway_and_inference(jaeger: dict[str, str], tmp_path: Path) -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": jaeger["otlp"], "OTEL_BSP_SCHEDULE_DELAY": "200"}
    mesh = start_mesh(tmp_path / "mesh", env=env, extra_args={"inference": ["--model", "dummy:0"]})
    try:
        result = asyncio.run(run_task(mesh.harness, _start_task(), timeout=240, api_key=mesh.api_key))
        assert result.completed, result.error
    finally:
        # Stream spans end when their streams do; a drained shutdown flushes every span.
        mesh.stop()
    traces: list[dict] = []
    for _ in range(100):
        traces = [t for t in _traces_spanning_all_services(jaeger["query"]) if _complete(t)]
        if len(traces) >= len(result.turns):
            break
        time.sleep(0.2)
    services = _get_json(f"{jaeger['query']}/api/services").get("data")
    # One trace per agent turn, each spanning harness -> gateway -> inference.
    assert len(traces) == len(result.turns) == 2, f"{len(traces)} complete traces; Jaeger knows {services}"
    turns = set()
    for trace in traces:
        roots = [span for span in trace["spans"] if not _parents(span)]
        assert len(roots) == 1
        tags = [{tag["key"]: tag["value"] for tag in span["tags"]} for span in trace["spans"]]
        root_tags = {tag["key"]: tag["value"] for tag in roots[0]["tags"]}
        assert root_tags["gen_ai.operation.name"] == "invoke_agent"
        turns.add(root_tags["loopwire.turn"])
        operations = {t.get("gen_ai.operation.name") for t in tags}
        assert {"invoke_agent", "chat", "text_completion"} <= operations, operations
        generation = next(t for t in tags if t.get("gen_ai.operation.name") == "text_completion")
        assert generation["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.usage.cache_read.input_tokens" in generation
    assert turns == {1, 2}
