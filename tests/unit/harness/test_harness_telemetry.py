"""The harness's telemetry on a real in-process harness: no context-detach errors when a client
drops its Run stream mid-turn, and its Prometheus endpoint reports sessions, turns, tool time,
approvals waiting and failed runs."""

from __future__ import annotations

import asyncio
import gc
import json
import logging

import pytest
from harness_testkit import answer, call, harness_env, kinds, released, until
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.common import telemetry
from loopwire.v1 import harness_pb2

pytestmark = pytest.mark.timeout(120)


def _detach_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Failed to detach context" in r.getMessage()]


async def test_client_dropping_a_run_mid_turn_logs_no_detach_error(tmp_path, caplog) -> None:
    """The harness once logged `Failed to detach context`: the server span's context token was
    attached while its stream ran and detached by the event loop's async-generator finalizer in
    another task after the client went away."""
    caplog.set_level(logging.ERROR)
    spans = InMemorySpanExporter()
    telemetry.setup("loopwire-harness-test", span_exporter=spans)
    try:
        async with harness_env(tmp_path) as h:
            # A long answer: the harness is busy writing text deltas when the client goes away.
            h.gateway.script = [answer("word " * 40_000)]
            call_ = h.stub.Run(iter([harness_pb2.RunRequest(start=harness_pb2.StartTask(task="t"))]))
            seen = [(await call_.read()).WhichOneof("event") for _ in range(20)]
            assert seen[0] == "started" and "text_delta" in seen
            call_.cancel()
            for _ in range(50):  # the run is interrupted once the harness sees the cancellation
                if not h.service.active:
                    break
                await asyncio.sleep(0.05)

            def run_span_ended() -> bool:  # its context is detached then, where the error was logged
                gc.collect()  # finalizes the dropped stream's generator
                return any(s.name == "loopwire.v1.HarnessService/Run" for s in spans.get_finished_spans())

            await until(run_span_ended, "the Run span to end")
        gc.collect()
        await asyncio.sleep(0.1)
    finally:
        telemetry.shutdown()
    assert any(s.name == "loopwire.v1.HarnessService/Run" for s in spans.get_finished_spans())
    assert _detach_errors(caplog) == []


def shell(command: str) -> object:
    return call("shell", json.dumps({"command": command}))


async def test_metrics_endpoint_reports_sessions_turns_tools_approvals_and_failures(tmp_path) -> None:
    from prometheus_scrape import buckets, scrape, select, total

    from loopwire.harness import metrics as harness_metrics

    state = telemetry.setup("loopwire-harness-test", metrics_port=0, metrics_host="127.0.0.1")
    assert state.metrics_port
    try:
        async with harness_env(tmp_path) as h:
            harness_metrics.watch(lambda: len(h.service.active),
                                  lambda: harness_metrics.count_waiting_approvals(h.service.store))
            # 0: while a run waits for its first token, it is an active session (the "model" holds its
            # first token until the scrape is done).
            scraped = asyncio.Event()
            h.gateway.before_output = lambda _request: released(scraped)
            h.gateway.script = [answer("slow")]
            stream = h.stub.Run(iter([harness_pb2.RunRequest(start=harness_pb2.StartTask(task="slow"))]))
            assert (await stream.read()).WhichOneof("event") == "started"
            active = total(await asyncio.to_thread(scrape, state.metrics_port), "loopwire_harness_sessions_active")
            scraped.set()
            assert kinds([e async for e in stream])[-1] == "completed"
            h.gateway.before_output = None
            # 1: three turns, three tools run (two shell, one list), completed.
            h.gateway.script = [answer("", shell("echo a"), call("list", "{}")), answer("", shell("true")),
                                answer("done")]
            events = await h.start("work", model=harness_pb2.ModelOptions(model="tiny-model"))
            assert kinds(events)[-1] == "completed"
            # 2: a call that waits for approval (network access asks under the default policy).
            h.gateway.script = [answer("", call("shell", json.dumps({"command": "curl x", "network": True})))]
            events = await h.start("fetch")
            assert kinds(events)[-1] == "approval_requested"
            # 3: the gateway stays unavailable: the run fails with UNAVAILABLE after its retries.
            h.gateway.unavailable_next = 100
            events = await h.start("doomed")
            assert kinds(events)[-1] == "failed"
            samples = scrape(state.metrics_port)
    finally:
        telemetry.shutdown()

    assert active == 1
    model = {"gen_ai_request_model": "tiny-model"}
    assert total(samples, "loopwire_harness_turns_total", **model) == 3
    # + the slow run's turn and the turn that asked for approval, under the gateway's default model
    assert total(samples, "loopwire_harness_turns_total", gen_ai_request_model="default") == 2
    assert total(samples, "loopwire_harness_runs_completed_total") == 2
    assert total(samples, "loopwire_harness_runs_failed_total", error_type="ERROR_CODE_UNAVAILABLE") == 1
    assert total(samples, "loopwire_harness_approvals_requested_total") == 1
    assert total(samples, "loopwire_harness_approvals_waiting") == 1
    assert total(samples, "loopwire_harness_sessions_active") == 0
    assert total(samples, "loopwire_harness_tool_duration_seconds_count", gen_ai_tool_name="shell") == 2
    assert total(samples, "loopwire_harness_tool_duration_seconds_count", gen_ai_tool_name="list") == 1
    assert total(samples, "loopwire_harness_tool_calls_total") == 3
    assert 0 < total(samples, "loopwire_harness_tool_duration_seconds_sum") < 60
    # Buckets of seconds from 1 ms, counts cumulative; every turn's duration is in them.
    [durations] = buckets(samples, "loopwire_harness_turn_duration_seconds", **model).values()
    assert durations[0][0] == 0.001 and durations[-1] == (float("inf"), 3)
    assert [c for _, c in durations] == sorted(c for _, c in durations)
    assert select(samples, "loopwire_harness_turn_time_to_first_token_seconds_count", **model)[0].value == 3
