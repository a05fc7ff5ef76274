"""The whole mesh as real processes with metrics and JSON logs on: after a replayed session each
service's /metrics endpoint, read with prometheus_client's parser, holds sensible values that
agree with what the client saw, and every log line a service wrote through logging is JSON."""

from __future__ import annotations

import asyncio
import json
import math
import re

import pytest
from prometheus_scrape import Sample, buckets, scrape, select, total
from session_files import session_path

from loopwire.client import run_task
from loopwire.common.recorded import load_session
from loopwire.mesh import free_port, start_mesh
from loopwire.replay import start_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SERVICES = ("inference", "gateway", "harness")
# gRPC's C core writes its own lines (e.g. "I1201 13:39:56.106671 6132 chttp2_transport.cc:1403] ...").
_C_CORE_LINE = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]")


@pytest.fixture(scope="module")
def observed_mesh(tmp_path_factory: pytest.TempPathFactory):
    """A mesh whose services export metrics and log JSON; one replayed session already run on it."""
    ports = {name: free_port() for name in SERVICES}
    extra = {name: ["--metrics-port", str(ports[name]), "--log-format", "json"] for name in SERVICES}
    extra["inference"] += ["--model", "dummy:0"]
    state = tmp_path_factory.mktemp("observed-mesh")
    mesh = start_mesh(state, extra_args=extra)
    try:
        session = load_session(session_path("function_calling_simple"))
        result = asyncio.run(run_task(mesh.harness, start_for(session, "stateful"), timeout=300,
                                      api_key=mesh.api_key))
        assert result.completed, result.error
        scrapes = {name: scrape(port) for name, port in ports.items()}
    finally:
        mesh.stop()
    yield result, scrapes, state / "logs"


def _histogram_families(samples: list[Sample]) -> set[str]:
    return {s.name.removesuffix("_bucket") for s in samples if s.name.endswith("_bucket")}


def test_every_histogram_is_cumulative_and_its_inf_bucket_is_its_count(observed_mesh) -> None:
    _, scrapes, _ = observed_mesh
    for service, samples in scrapes.items():
        families = _histogram_families(samples)
        assert families, f"{service}: no histograms exported"
        for family in families:
            for labels, series in buckets(samples, family).items():
                counts = [c for _, c in series]
                assert counts == sorted(counts), (service, family, labels)
                assert series[-1][0] == math.inf
                [count] = [s.value for s in select(samples, f"{family}_count", **dict(labels))]
                assert series[-1][1] == count, (service, family, labels)


def test_harness_counts_the_turns_and_the_run_it_served(observed_mesh) -> None:
    result, scrapes, _ = observed_mesh
    harness = scrapes["harness"]
    turns = len(result.turns)
    assert turns >= 1
    assert total(harness, "loopwire_harness_turns_total") == turns
    assert total(harness, "loopwire_harness_runs_completed_total") == 1
    assert total(harness, "loopwire_harness_runs_failed_total") == 0
    assert total(harness, "loopwire_harness_sessions_active") == 0
    assert total(harness, "loopwire_harness_approvals_waiting") == 0
    assert total(harness, "loopwire_harness_turn_duration_seconds_count") == turns
    wall_s = sum(t.wall_us for t in result.turns) / 1e6
    assert total(harness, "loopwire_harness_turn_duration_seconds_sum") == pytest.approx(wall_s, rel=1e-3, abs=1e-3)
    # Harness-side TTFT: one per turn that streamed output.
    assert total(harness, "loopwire_harness_turn_time_to_first_token_seconds_count") == sum(
        1 for t in result.turns if t.harness_ttft_us)


def test_inference_reports_tokens_cache_hits_and_one_ttft_per_generation(observed_mesh) -> None:
    result, scrapes, _ = observed_mesh
    inference = scrapes["inference"]
    output_tokens = sum(t.usage.output_tokens for t in result.turns)
    assert total(inference, "loopwire_generation_output_tokens_total") == output_tokens > 0
    assert total(inference, "loopwire_prefix_cache_queried_tokens_total") == sum(t.usage.input_tokens for t in result.turns)
    assert total(inference, "loopwire_prefix_cache_hit_tokens_total") == sum(
        t.usage.cached_input_tokens for t in result.turns) > 0
    generations = len(result.turns) + sum(t.resends for t in result.turns)
    assert total(inference, "loopwire_generation_finished_total") == generations
    assert total(inference, "gen_ai_server_time_to_first_token_seconds_count") == generations
    ratio = select(inference, "loopwire_prefix_cache_hit_ratio_sum")
    assert 0 < sum(s.value for s in ratio) <= generations  # each ratio is within 0..1
    # The model the replica serves labels its series.
    for name in ("loopwire_generation_output_tokens_total", "gen_ai_server_time_to_first_token_seconds_count"):
        assert {s.labels["gen_ai_request_model"] for s in select(inference, name)} == {"dummy"}


def test_gateway_reports_each_response(observed_mesh) -> None:
    result, scrapes, _ = observed_mesh
    gateway = scrapes["gateway"]
    turns = len(result.turns)
    assert total(gateway, "loopwire_turn_tokens_tokenized_count") == turns
    assert total(gateway, "loopwire_turn_tokens_tokenized_sum") == sum(t.timings.tokens_tokenized for t in result.turns)
    assert total(gateway, "loopwire_turn_bytes_sum") > 0


def test_services_log_json_lines_and_no_context_errors(observed_mesh) -> None:
    _, _, logs = observed_mesh
    for service in SERVICES:
        lines = (logs / f"{service}.log").read_text(encoding="utf-8").splitlines()
        assert not [line for line in lines if "Failed to detach context" in line], service
        records = []
        for line in lines:
            if not line.strip() or _C_CORE_LINE.match(line):
                continue
            record = json.loads(line)  # every other line is one JSON object
            assert {"timestamp", "level", "logger", "message"} <= set(record), (service, line)
            records.append(record)
        assert records, f"{service}: no log lines"
        assert any(r["logger"].startswith("loopwire") for r in records), service
