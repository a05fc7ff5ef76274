"""Conversation compaction: the view over the append-only log (the task and the latest user
message pinned), cut points that never split a call from its output, and compaction in a running
session: masking first, a summary when masking is not enough, a failed summary call."""

from __future__ import annotations

import json

import pytest
from harness_testkit import answer, call, harness_env, kinds, long_script, of

from loopwire.common.summaries import SUMMARY_INSTRUCTIONS
from loopwire.harness import compaction
from loopwire.harness.compaction import cut_point, view
from loopwire.v1 import common_pb2, gateway_pb2

pytestmark = pytest.mark.timeout(120)


def msg(text: str, role: int = common_pb2.ROLE_USER) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=role, content=[common_pb2.ContentPart(text=text)]))


def fcall(cid: str) -> common_pb2.Item:
    return common_pb2.Item(function_call=common_pb2.FunctionCall(call_id=cid, name="shell", arguments="{}"))


def fout(cid: str, text: str = "out") -> common_pb2.Item:
    return common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=cid, output=text))


def summary(text: str, replaced: int) -> common_pb2.Item:
    return common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=text, replaced_items=replaced))


def test_view_is_the_task_the_summary_then_the_kept_items_then_the_rest():
    log = [msg("task"), fcall("a"), fout("a"), fcall("b"), fout("b"), summary("S1", 3), fcall("c"), fout("c")]
    assert view(log) == [log[0], log[5], log[3], log[4], log[6], log[7]]
    # A second compaction keeps items from before and after the first summary, never the old summary.
    log += [summary("S2", 4), msg("next")]
    assert view(log) == [log[0], log[8], log[4], log[6], log[7], log[9]]
    assert view(log[:5]) == log[:5]  # no summary: everything


def test_the_latest_user_message_a_summary_covers_stays_after_it_verbatim():
    log = [msg("task"), fcall("a"), fout("a"), msg("first note"), fcall("b"), fout("b"), msg("second note"),
           fcall("c"), fout("c"), summary("S", 7), fcall("d"), fout("d")]
    assert view(log) == [log[0], log[9], log[6], log[7], log[8], log[10], log[11]]
    assert compaction.log_index(log, 2) == 6 and compaction.log_index(log, 3) == 7


def test_cut_points_never_separate_a_call_from_its_output():
    log = [msg("task"), fcall("a"), fcall("b"), fout("a", "x" * 400), fout("b", "y" * 400), msg("ok", 2),
           fcall("c"), fout("c", "z" * 400)]
    for keep in range(0, 2000, 25):
        cut = cut_point(log, keep)
        if cut == 0:
            continue
        calls_before = {i.function_call.call_id for i in log[:cut] if i.WhichOneof("item") == "function_call"}
        outs_after = {i.function_call_output.call_id for i in log[cut:] if i.WhichOneof("item") == "function_call_output"}
        assert not calls_before & outs_after, (keep, cut)
        assert log[cut].WhichOneof("item") != "function_call_output"
    assert cut_point(log, 10_000) == 0  # everything fits: nothing to summarize


def _summaries(h, fail: bool = False) -> list[gateway_pb2.CreateResponse]:  # noqa: ANN001
    """Makes the fake gateway answer summary requests (recognised by their instructions) itself."""
    seen: list[gateway_pb2.CreateResponse] = []
    respond = h.gateway._respond
    h.gateway.item_tokens = compaction.item_tokens  # the served model counts what cl100k does here

    async def patched(req):  # noqa: ANN001, ANN202
        if req.instructions == SUMMARY_INSTRUCTIONS:
            seen.append(req)
            if fail:
                yield gateway_pb2.ConverseResponse(failed=gateway_pb2.ResponseFailed(error=common_pb2.Error(
                    code=common_pb2.ERROR_CODE_INTERNAL, message="summary model is down")))
                return
            req.replay.CopyFrom(answer(f"SUMMARY of {len(req.input)} items: listed files, found nothing."))
        async for event in respond(req):
            yield event

    h.gateway._respond = patched
    return seen


def chatty_script(turns: int) -> list:
    """Turns whose own text is long and whose outputs are short: masking cannot shrink them, only a
    summary can."""
    return [answer(f"turn {i}: " + " ".join(f"I weigh option {i}.{j} and why it fails." for j in range(120)),
                   call("shell", json.dumps({"command": f"echo turn {i}"}), f"c{i}"))
            for i in range(turns)] + [answer("finished")]


def full_requests(h) -> list[gateway_pb2.CreateResponse]:  # noqa: ANN001
    """The session's requests sent in full (the first one and each after a compaction)."""
    return [r for r in h.gateway.requests if r.instructions != SUMMARY_INSTRUCTIONS and not r.previous_response_id]


async def test_a_long_session_is_masked_first_and_keeps_its_task(tmp_path):
    async with harness_env(tmp_path, context_window=12_000, compact_at=0.9, compact_keep=0.25) as h:
        seen = _summaries(h)
        h.gateway.script = long_script(14)
        events = await h.start("count lines for a while")
        assert kinds(events)[-1] == "completed"
        compactions = of(events, "compaction")
        assert compactions and all(not c.HasField("error") for c in compactions)
        first = compactions[0]
        assert first.prompt_tokens_before >= first.threshold_tokens == 10_800
        assert first.prompt_tokens_after < first.threshold_tokens // 2
        assert not seen and first.summary_input_tokens == 0  # masking was enough: no summary call
        after = full_requests(h)[1:]
        assert len(after) == len(compactions)
        for r in after:
            assert r.input[0].message.content[0].text == "count lines for a while"  # the task, verbatim
            outputs = [i.function_call_output.output for i in r.input if i.WhichOneof("item") == "function_call_output"]
            assert "tokens, elided]" in outputs[0]  # old outputs are pointers
            assert outputs[-1].count("\n") >= 399  # the one the model has not read yet is whole
        stored = await h.session(of(events, "started")[0].session_id)
        assert stored.items[0].message.content[0].text == "count lines for a while"  # the log keeps everything
        assert sum(compaction.item_tokens(i) for i in compaction.view(stored.items)) < 10_800


async def test_when_masking_is_not_enough_older_turns_are_summarized_around_the_task(tmp_path):
    async with harness_env(tmp_path, context_window=12_000, compact_at=0.9, compact_keep=0.25) as h:
        seen = _summaries(h)
        h.gateway.script = chatty_script(14)
        events = await h.start("count lines for a while")
        assert kinds(events)[-1] == "completed"
        compactions = of(events, "compaction")
        assert compactions and all(not c.HasField("error") for c in compactions)
        first = compactions[0]
        assert first.prompt_tokens_before >= first.threshold_tokens == 10_800
        assert first.prompt_tokens_after < first.threshold_tokens // 2
        assert first.summary_output_tokens > 0 and first.summary_input_tokens > 0
        assert len(seen) == len(compactions) and not seen[0].tools  # the summary call has no tools
        # After a compaction a request is sent in full: the task verbatim, then the summary.
        after = full_requests(h)[1:]
        assert after and all(r.input[0].message.content[0].text == "count lines for a while" and
                             r.input[1].WhichOneof("item") == "compaction_summary" for r in after)
        stored = await h.session(of(events, "started")[0].session_id)
        assert sum(compaction.item_tokens(i) for i in compaction.view(stored.items)) < 10_800


async def test_a_failed_summary_call_is_reported_and_the_session_goes_on(tmp_path):
    async with harness_env(tmp_path, context_window=12_000) as h:
        seen = _summaries(h, fail=True)
        h.gateway.script = chatty_script(12)
        events = await h.start("count lines")
        assert kinds(events)[-1] == "completed"
        failed = of(events, "compaction")
        assert failed and all(c.HasField("error") for c in failed)
        assert "summary model is down" in failed[0].error.message
        # Retried only after the prompt grew by another 5% of the window, not on every turn.
        assert len(seen) == len(failed) < 12
        assert all(r.input[0].WhichOneof("item") == "message" for r in h.gateway.requests if r.input and
                   r.instructions != SUMMARY_INSTRUCTIONS and not r.previous_response_id)


async def test_the_window_comes_from_the_gateway_when_no_flag_sets_it(tmp_path):
    async with harness_env(tmp_path, compact_at=0.9, compact_keep=0.25) as h:
        assert h.config.context_window == 0
        h.gateway.context_length = 12_000
        _summaries(h)
        h.gateway.script = long_script(14)
        events = await h.start("count lines for a while")
        assert kinds(events)[-1] == "completed"
        compactions = of(events, "compaction")
        assert compactions and compactions[0].threshold_tokens == 10_800
