"""The agent loop through real gRPC: deltas, stateless mode, resends, tools as calls stream in,
call-order results, background completion, bad tool calls."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from harness_testkit import after_file, answer, call, harness_env, kinds, of, released
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopwire.common import telemetry
from loopwire.v1 import harness_pb2

pytestmark = pytest.mark.timeout(120)


def shell(command: str, call_id: str = "", **extra: object) -> object:
    return call("shell", json.dumps({"command": command, **extra}), call_id)


async def test_stateful_loop_sends_deltas_on_one_stream_with_a_stable_prefix(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [
            answer("Look around.", shell("echo hello > a.txt"), call("list", "{}")),
            answer("", call("read_file", json.dumps({"path": "a.txt"}))),
            answer("Done: a.txt says hello."),
        ]
        events = await h.start("write a file")
        assert kinds(events)[0] == "started" and kinds(events)[-1] == "completed"
        sid = of(events, "started")[0].session_id
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        assert of(events, "completed")[0].final_text == "Done: a.txt says hello."

        reqs = h.gateway.requests
        assert len(reqs) == 3 and h.gateway.streams == 1
        assert not reqs[0].previous_response_id and all(r.previous_response_id for r in reqs[1:])
        # Only the first request carries instructions and the (sorted) tools; deltas inherit them.
        assert reqs[0].instructions and [t.name for t in reqs[0].tools] == sorted(t.name for t in reqs[0].tools)
        assert all(not r.instructions and not r.tools and not r.model for r in reqs[1:])
        # A delta carries only the items after the previous response's output: the tool outputs.
        assert [i.WhichOneof("item") for i in reqs[1].input] == ["function_call_output"] * 2
        assert h.gateway.metadata[0]["authorization"] == "Bearer test-key"

        stored = await h.session(sid)
        # What the gateway assembled from the deltas is exactly the durable transcript.
        assert list(stored.items)[: len(h.gateway.last_transcript)] == h.gateway.last_transcript
        assert stored.session.status == harness_pb2.SESSION_STATUS_COMPLETED
        assert [t.turn for t in stored.turns] == [1, 2, 3]
        assert [t.full_request for t in stored.turns] == [True, False, False]
        assert stored.turns[1].bytes_sent < stored.turns[2].bytes_sent + stored.turns[0].bytes_sent
        assert stored.turns[0].tool_calls == 2 and stored.turns[0].usage.input_tokens == 10
        assert (h.tmp / "workspaces" / "tenant-t1" / sid / "a.txt").read_text() == "hello\n"


async def test_stateless_mode_resends_everything_on_a_fresh_stream_each_turn(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", shell("echo 1")), answer("", shell("echo 2")), answer("ok")]
        model = harness_pb2.ModelOptions(conversation_mode=harness_pb2.CONVERSATION_MODE_STATELESS)
        events = await h.start("count", model=model)
        assert kinds(events)[-1] == "completed"
        reqs = h.gateway.requests
        assert h.gateway.streams == 3
        assert all(r.no_store and not r.previous_response_id for r in reqs)
        # Stable prefix: every full request renders the same instructions and tool list.
        assert all(r.instructions == reqs[0].instructions and list(r.tools) == list(reqs[0].tools) for r in reqs)
        assert [len(r.input) for r in reqs] == [1, 3, 5]
        profiles = of(events, "turn_completed")
        # The naive way sends more bytes every turn; the stateful way would not.
        sent = [p.profile.bytes_sent for p in profiles]
        assert sent == sorted(sent) and sent[0] < sent[-1]


async def test_unknown_previous_response_gets_one_full_resend(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", shell("true")), answer("fine")]
        h.gateway.forget_next_delta = True
        events = await h.start("go")
        assert kinds(events)[-1] == "completed"
        reqs = h.gateway.requests
        assert [bool(r.previous_response_id) for r in reqs] == [False, True, False]
        assert len(reqs[2].input) == 3 and list(reqs[2].tools) == list(reqs[0].tools)  # all of it again
        profile = of(events, "turn_completed")[1].profile
        assert profile.resends == 1 and profile.full_request
        assert any("PREVIOUS_RESPONSE_NOT_FOUND" in d.message for d in of(events, "diagnostic"))


async def test_tools_start_while_the_model_still_generates_and_run_in_parallel(tmp_path):
    async with harness_env(tmp_path) as h:
        # The "model" emits c2 once the harness reports c1 begun, and c3 once it reports c2 ended; c1
        # runs until c3 has begun. Every step waits on what the harness did, not on a gap of time.
        c1_began, c2_ended = asyncio.Event(), asyncio.Event()
        gates = {"c2": c1_began, "c3": c2_ended}

        async def before_call(fc) -> None:  # noqa: ANN001
            if fc.call_id in gates:
                await released(gates[fc.call_id])

        def on_event(event: harness_pb2.RunResponse) -> None:
            kind = event.WhichOneof("event")
            if kind == "tool_call_began" and event.tool_call_began.call.call_id == "c1":
                c1_began.set()
            elif kind == "tool_call_ended" and event.tool_call_ended.call_id == "c2":
                c2_ended.set()

        h.gateway.before_call = before_call
        h.gateway.script = [
            answer("", shell(after_file("c3.began", "echo first"), "c1"), shell("echo second", "c2"),
                   shell("touch c3.began; sleep 0.3", "c3")),
            answer("done"),
        ]
        events = await h.watch(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="parallel")), on_event)
        assert kinds(events)[-1] == "completed"
        began = {e.call.call_id: e.started_at_us for e in of(events, "tool_call_began")}
        ended = {e.call_id: e for e in of(events, "tool_call_ended")}
        # c1 began before the model had even emitted c2: tools run while generation goes on.
        assert began["c1"] < h.gateway.call_done_us["c2"]
        # c1 and c3 overlap in time: independent calls run in parallel.
        assert began["c3"] < ended["c1"].finished_at_us
        # c2 finished first, but outputs are appended in call order.
        assert ended["c2"].finished_at_us < ended["c1"].finished_at_us
        outputs = [i.function_call_output.call_id for i in h.gateway.requests[1].input]
        assert outputs == ["c1", "c2", "c3"]
        profile = of(events, "turn_completed")[0].profile
        assert 0 < profile.tool_us < sum(e.finished_at_us - e.started_at_us for e in ended.values())


async def test_bad_tool_calls_become_readable_errors_and_the_run_continues(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [
            answer("", call("no_such_tool", "{}"), call("shell", "{not json"), call("read_file", '{"path": 3}'),
                   call("read_file", json.dumps({"path": "../../etc/passwd"})), shell("head -c 200000 /dev/zero")),
            answer("survived"),
        ]
        events = await h.start("break things")
        assert kinds(events)[-1] == "completed"
        ended = of(events, "tool_call_ended")
        assert "unknown tool" in ended[0].output and ended[0].is_error
        assert "not valid JSON" in ended[1].output
        assert "wrong type" in ended[2].output
        assert "outside the workspace" in ended[3].output
        assert ended[4].truncated and "cut from the middle" in ended[4].output
        assert len(ended[4].output.encode()) < h.config.output_limit + 200


async def test_long_command_detaches_and_its_completion_is_pushed_into_the_conversation(tmp_path):
    async with harness_env(tmp_path, background_after=0.3) as h:
        h.gateway.script = [
            answer("", shell(after_file("go", "echo built"))),
            answer("I will wait for the build."),  # no tool call, but a command is still running
            answer("The build finished."),
        ]
        workspace: list[Path] = []
        turns: list[int] = []

        def on_event(event: harness_pb2.RunResponse) -> None:
            kind = event.WhichOneof("event")
            if kind == "started":
                workspace.append(Path(event.started.workspace))
            elif kind == "turn_completed":
                turns.append(event.turn_completed.profile.turn)
                if len(turns) == 2:  # the build ends once the model has said that it waits
                    (workspace[0] / "go").touch()

        events = await h.watch(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="build")), on_event)
        assert kinds(events)[-1] == "completed"
        ended = of(events, "tool_call_ended")[0]
        assert ended.handle == "bg-1" and "detached" in ended.output
        done = of(events, "background_task_completed")
        assert len(done) == 1 and done[0].exit_code == 0 and "built" in done[0].output
        pushed = h.gateway.requests[2].input
        assert "background command bg-1 finished" in pushed[-1].message.content[0].text
        assert len(h.gateway.requests) == 3  # no polling turns


async def test_wait_tool_blocks_on_a_handle(tmp_path):
    async with harness_env(tmp_path, background_after=0.2) as h:
        h.gateway.script = [
            answer("", shell(after_file("go", "echo ready"))),
            answer("", call("wait", json.dumps({"handle": "bg-1", "timeout_seconds": 10}))),
            answer("ok"),
        ]
        workspace: list[Path] = []

        def on_event(event: harness_pb2.RunResponse) -> None:
            kind = event.WhichOneof("event")
            if kind == "started":
                workspace.append(Path(event.started.workspace))
            elif kind == "tool_call_began" and event.tool_call_began.call.name == "wait":
                (workspace[0] / "go").touch()  # the command ends while the model waits on its handle

        events = await h.watch(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="wait")), on_event)
        waited = of(events, "tool_call_ended")[1]
        assert "bg-1 finished" in waited.output and "ready" in waited.output
        assert not of(events, "background_task_completed")  # delivered through wait, not twice
        assert kinds(events)[-1] == "completed"


async def test_max_turns_stops_the_loop(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", shell("true")) for _ in range(5)]
        events = await h.start("loop forever", max_turns=2)
        assert kinds(events)[-1] == "completed" and of(events, "completed")[0].turns == 2
        assert len(h.gateway.requests) == 2


async def test_turns_and_tools_are_traced_with_genai_attributes(tmp_path):
    exporter = InMemorySpanExporter()
    telemetry.setup("loopwire-harness", span_exporter=exporter)
    try:
        async with harness_env(tmp_path) as h:
            h.gateway.script = [answer("", shell("echo traced")), answer("done")]
            await h.start("trace me")
    finally:
        telemetry.shutdown()
    spans = exporter.get_finished_spans()
    turns = sorted((s for s in spans if s.name == "invoke_agent"), key=lambda s: s.attributes["loopwire.turn"])
    assert [t.attributes["gen_ai.usage.input_tokens"] for t in turns] == [10, 30]
    assert all(t.attributes["gen_ai.conversation.id"] == turns[0].attributes["gen_ai.conversation.id"] for t in turns)
    (tool,) = [s for s in spans if s.name == "execute_tool shell"]
    assert tool.parent.span_id == turns[0].context.span_id  # the tool ran inside its turn


async def test_safety_cuts_are_passed_on_as_diagnostics(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.unsafe_output = True
        h.gateway.script = [answer("something bad")]
        events = await h.start("misbehave")
        assert "S2 non-violent crime" in [d.message for d in of(events, "diagnostic") if d.source == "gateway safety"]
        assert kinds(events)[-1] == "completed"
