"""Compaction is durable: a harness SIGKILLed after compacting resumes on the compacted
transcript (the task verbatim, the summary and the recent turns), not on the full log."""

from __future__ import annotations

import pytest
from harness_testkit import FakeGateway, HarnessProcess, kinds, long_script, of, start_server
from test_harness_crash_resume import events_until, get_session

from loopwire.common.summaries import SUMMARY_INSTRUCTIONS
from loopwire.harness import compaction
from loopwire.v1 import gateway_pb2_grpc, harness_pb2

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
R = harness_pb2.RunRequest
TASK = "count lines for a long while"


class SummarizingGateway(FakeGateway):
    """The fake model, which also writes summaries when asked with the summary instructions (and
    counts prompt tokens as the harness's cl100k estimate does)."""

    def __init__(self) -> None:
        super().__init__()
        self.item_tokens = compaction.item_tokens

    async def _respond(self, req):  # noqa: ANN001, ANN202
        if req.instructions == SUMMARY_INSTRUCTIONS:
            from harness_testkit import answer

            req.replay.CopyFrom(answer(f"SUMMARY: {len(req.input)} items; shell output counted, nothing found."))
        async for event in super()._respond(req):
            yield event


async def test_sigkill_after_compaction_resumes_on_the_compacted_transcript(tmp_path):
    fake = SummarizingGateway()
    fake.first_token_delay_s = 0.05
    fake.script = long_script(16)
    server, gw = await start_server(gateway_pb2_grpc.add_GatewayServiceServicer_to_server, fake)
    flags = ("--context-window", "12000", "--compact-at", "0.9")
    try:
        first = HarnessProcess(tmp_path, gw, *flags)
        await first.wait_ready()
        events = await events_until(first.address, R(start=harness_pb2.StartTask(task=TASK)),
                                    lambda ev: bool(of(ev, "compaction")), then=first.kill)
        sid = of(events, "started")[0].session_id
        assert not of(events, "compaction")[0].HasField("error")

        second = HarnessProcess(tmp_path, gw, *flags)
        try:
            await second.wait_ready()
            stored = await get_session(second.address, sid)
            kinds_stored = [i.WhichOneof("item") for i in stored.items]
            assert "compaction_summary" in kinds_stored  # the summary was durable before the kill
            n_requests = len(fake.requests)
            events = await events_until(second.address, R(resume=harness_pb2.ResumeSession(session_id=sid)),
                                        lambda ev: False)
            assert of(events, "started")[0].resumed and kinds(events)[-1] == "completed"
            resumed = [r for r in fake.requests[n_requests:] if r.instructions != SUMMARY_INSTRUCTIONS]
            first_after = resumed[0]
            # Resumed on the compacted prefix, sent in full: the task verbatim, then what compaction
            # left of the older turns (the summary, or outputs masked when masking sufficed).
            assert first_after.input[0].message.content[0].text == TASK
            summaries = [i.compaction_summary.summary for i in first_after.input
                         if i.WhichOneof("item") == "compaction_summary"]
            elided = [i for i in first_after.input if i.WhichOneof("item") == "function_call_output"
                      and i.function_call_output.output.endswith("elided]")]
            assert any(s.startswith("SUMMARY:") for s in summaries) or elided
            assert len(first_after.input) < len(stored.items)
            assert not first_after.previous_response_id
            # The resumed run did not need to summarize again before its first turn.
            assert fake.requests[n_requests].instructions != SUMMARY_INSTRUCTIONS
        finally:
            second.kill()
    finally:
        await server.stop(0)
