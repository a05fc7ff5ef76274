"""The outputs of a turn's calls reach the store without a commit per call: the calls journaled on the
event loop (no worker-thread write before a tool starts), and outputs that are done by the time the
ones before them are stored go into the same transaction, still in call order."""

from __future__ import annotations

import json

import pytest
from harness_testkit import after_file, answer, call, harness_env, kinds

from loopwire.v1 import harness_pb2

pytestmark = pytest.mark.timeout(120)


def shell(command: str, call_id: str) -> object:
    return call("shell", json.dumps({"command": command}), call_id)


async def test_outputs_done_together_are_stored_in_one_write_in_call_order(tmp_path):
    async with harness_env(tmp_path) as h:
        store = h.service.store  # type: ignore[attr-defined]
        appends: list[list[str]] = []
        journaled: list[str] = []
        append, journal = store.append, store.try_record_call_started

        def spy_append(session_id, items, **kwargs):  # noqa: ANN001, ANN003, ANN202
            appends.append([i.function_call_output.call_id for i in items
                            if i.WhichOneof("item") == "function_call_output"])
            return append(session_id, items, **kwargs)

        def spy_journal(session_id, c):  # noqa: ANN001, ANN202
            journaled.append(c.call_id)
            return journal(session_id, c)

        store.append, store.try_record_call_started = spy_append, spy_journal
        workspaces = tmp_path / "workspaces"
        ended: set[str] = set()
        started: list[str] = []

        def on_event(event: harness_pb2.RunResponse) -> None:
            kind = event.WhichOneof("event")
            if kind == "started":
                started.append(event.started.session_id)
            elif kind == "tool_call_ended":
                ended.add(event.tool_call_ended.call_id)
                if ended == {"c2", "c3"}:  # c1 ends only once the calls after it have
                    next(workspaces.rglob(started[0])).joinpath("go").touch()

        h.gateway.script = [
            answer("", shell(after_file("go", "echo first"), "c1"), shell("echo second", "c2"),
                   shell("echo third", "c3")),
            answer("done"),
        ]
        events = await h.watch(harness_pb2.RunRequest(start=harness_pb2.StartTask(task="batch")), on_event)
        assert kinds(events)[-1] == "completed"
        assert journaled == ["c1", "c2", "c3"]  # each journaled inline, in call order
        assert [a for a in appends if a] == [["c1", "c2", "c3"]]  # one write for the three outputs
        outputs = [i.function_call_output.call_id for i in h.gateway.requests[1].input]
        assert outputs == ["c1", "c2", "c3"]
        assert "first" in h.gateway.requests[1].input[0].function_call_output.output
