"""Masking before summaries: a property test over generated sessions (the task and the latest user
message survive verbatim, calls stay paired, a compaction never grows the view), the fallback from a
degenerate summary to masking, and the workspace file behind a cut oversized output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness_testkit import answer, call, harness_env, kinds, of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common import masking
from loopwire.common.summaries import SUMMARY_INSTRUCTIONS, degenerate
from loopwire.harness import compaction
from loopwire.harness.compaction import compact_items, tokens, view
from loopwire.harness.config import HarnessConfig
from loopwire.v1 import common_pb2, gateway_pb2

pytestmark = pytest.mark.timeout(300)
USER, ASSISTANT = common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT


def msg(text: str, role: int = USER) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=role, content=[common_pb2.ContentPart(text=text)]))


def fcall(cid: str) -> common_pb2.Item:
    return common_pb2.Item(function_call=common_pb2.FunctionCall(call_id=cid, name="shell", arguments='{"command": "x"}'))


def fout(cid: str, text: str) -> common_pb2.Item:
    return common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=cid, output=text))


def filler(n: int, tag: str) -> str:
    """About `n` tokens of varied text (cheap to make, not one repeated token)."""
    return " ".join(f"{tag}{i % 97}" for i in range(n))


# A turn: (assistant text tokens, output sizes of its calls, a user message after it?)
turns = st.lists(st.tuples(st.integers(0, 300), st.lists(st.integers(0, 2500), min_size=0, max_size=6),
                           st.booleans()), min_size=1, max_size=40)
# What the stub summarizer writes: a fine summary, one that loops, one that hits the cap, a huge one.
summaries = st.lists(st.sampled_from(["ok", "loop", "cap", "huge", "empty"]), min_size=1, max_size=8)


def stub(kind: str, config: HarnessConfig):  # noqa: ANN201
    def summarize(items: list[common_pb2.Item]) -> tuple[str, int, int]:
        if kind == "loop":
            return "The agent ran the command again. " * 80, 560, common_pb2.FINISH_REASON_STOP
        if kind == "cap":
            return filler(config.summary_max_tokens, "s"), config.summary_max_tokens, common_pb2.FINISH_REASON_LENGTH
        if kind == "huge":
            return filler(9000, "h"), 900, common_pb2.FINISH_REASON_STOP
        if kind == "empty":
            return "", 0, common_pb2.FINISH_REASON_STOP
        return f"Summary of {len(items)} items: ran commands, read outputs.", 20, common_pb2.FINISH_REASON_STOP
    return summarize


def check_pairing(items: list[common_pb2.Item]) -> None:
    called: set[str] = set()
    for x in items:
        if x.WhichOneof("item") == "function_call":
            called.add(x.function_call.call_id)
        elif x.WhichOneof("item") == "function_call_output":
            assert x.function_call_output.call_id in called, "an output before (or without) its call"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=turns, kinds_=summaries, window=st.sampled_from([3000, 6000, 16384]), mask=st.booleans())
def test_compaction_keeps_the_task_the_latest_user_message_the_pairs_and_never_grows(turns, kinds_, window, mask):
    config = HarnessConfig(context_window=window, compact_mask=mask)
    task = msg("TASK: fix the failing parser test in src/parse.py")
    log = [task]
    n = 0
    for t, (text, outputs, note) in enumerate(turns):
        if text or not outputs:
            log.append(msg(filler(text, f"t{t}w"), ASSISTANT))
        ids = [f"c{t}_{k}" for k in range(len(outputs))]
        log += [fcall(c) for c in ids]
        log += [fout(c, filler(size, f"o{t}")) for c, size in zip(ids, outputs, strict=True)]
        if note:
            log.append(msg(f"user note after turn {t}"))
        before = view(log)
        if tokens(before) < window * config.compact_at:
            continue
        appended, _ = compact_items(log, config, window, stub(kinds_[n % len(kinds_)], config))
        n += 1
        log += appended
        after = view(log)
        assert after[0] == task, "the task is not first and verbatim"
        latest = next(x for x in reversed(log) if x.WhichOneof("item") == "message" and x.message.role == USER)
        assert latest in after, "the latest user message is not in the view verbatim"
        check_pairing(after)
        assert tokens(after) <= tokens(before), "the compacted view is larger than the input"
        assert view(log) == after  # a function of the log alone


def test_a_degenerate_summary_is_detected():
    assert degenerate("The agent ran ls. " * 40, 200, 1024)
    assert degenerate(filler(1024, "s"), 1024, 1024)  # hit the cap
    assert degenerate("fine text", 10, 1024, common_pb2.FINISH_REASON_LENGTH)
    assert not degenerate("The task: fix parse.py. Ran pytest: 3 failures in test_parse. Edited the tokenizer; "
                          "remaining: the unicode case.", 40, 1024)


def test_a_degenerate_summary_falls_back_to_the_masked_transcript():
    config = HarnessConfig(context_window=6000)
    log = [msg("TASK: count lines")]
    for t in range(12):  # over the target after masking (a summary is asked for), under the threshold
        log += [msg(filler(60, f"t{t}w"), ASSISTANT), fcall(f"c{t}"), fout(f"c{t}", filler(300, f"o{t}"))]
    appended, note = compact_items(log, config, 6000, stub("loop", config))
    assert "summary dropped (it repeats itself" in note
    assert appended and all(masking.parse(x.compaction_summary) is not None for x in appended)  # markers only
    after = view([*log, *appended])
    outs = [x.function_call_output.output for x in after if x.WhichOneof("item") == "function_call_output"]
    assert all("tokens, elided]" in o for o in outs[:-1]) and "elided" not in outs[-1]
    assert tokens(after) < tokens(view(log))


def test_when_masking_is_not_enough_a_degenerate_summary_drops_the_older_turns_behind_a_note():
    config = HarnessConfig(context_window=6000)
    log = [msg("TASK: count lines")]
    for t in range(12):  # long texts: masking alone stays over the threshold
        log += [msg(filler(400, f"t{t}w"), ASSISTANT), fcall(f"c{t}"), fout(f"c{t}", filler(600, f"o{t}"))]
    appended, note = compact_items(log, config, 6000, stub("cap", config))
    assert "the older turns were dropped" in note
    after = view([*log, *appended])
    assert after[0] == log[0] and "dropped without a summary" in after[1].compaction_summary.summary
    assert tokens(after) < 6000 * config.compact_at


def _summaries(h, text: str) -> list[gateway_pb2.CreateResponse]:  # noqa: ANN001
    seen: list[gateway_pb2.CreateResponse] = []
    respond = h.gateway._respond
    h.gateway.item_tokens = compaction.item_tokens

    async def patched(req):  # noqa: ANN001, ANN202
        if req.instructions == SUMMARY_INSTRUCTIONS:
            seen.append(req)
            req.replay.CopyFrom(answer(text))
        async for event in respond(req):
            yield event

    h.gateway._respond = patched
    return seen


async def test_a_looping_summary_in_a_session_is_dropped_for_masking(tmp_path):
    script = [answer(filler(600, f"t{i}w"), call("shell", json.dumps({"command": f"seq 1 300 | sed 's/^/{i} /'"}),
                                                 f"c{i}")) for i in range(12)] + [answer("finished")]
    async with harness_env(tmp_path, context_window=12_000) as h:
        seen = _summaries(h, "I listed the files. " * 20)
        h.gateway.script = script
        events = await h.start("count lines")
        assert kinds(events)[-1] == "completed"
        compactions = of(events, "compaction")
        assert seen and compactions and not any(c.HasField("error") for c in compactions)
        notes = [d.message for d in of(events, "diagnostic") if d.source == "compaction"]
        assert notes and "summary dropped (it repeats itself" in notes[0]
        stored = await h.session(of(events, "started")[0].session_id)
        texts = [i.compaction_summary.summary for i in stored.items if i.WhichOneof("item") == "compaction_summary"]
        assert texts and not any("I listed the files." in t for t in texts)  # never stored, never shown
        assert stored.items[0].message.content[0].text == "count lines"


async def test_an_oversized_output_is_cut_with_a_pointer_to_a_workspace_file(tmp_path):
    script = [answer("", call("shell", json.dumps({"command": "seq 1 2500"}), "big1")), answer("done")]
    async with harness_env(tmp_path, context_window=4000) as h:
        h.gateway.item_tokens = compaction.item_tokens
        h.gateway.script = script
        events = await h.start("print many numbers")
        assert kinds(events)[-1] == "completed"
        assert of(events, "compaction") and not of(events, "compaction")[0].HasField("error")
        stored = await h.session(of(events, "started")[0].session_id)
        whole = next(i.function_call_output.output for i in stored.items if i.WhichOneof("item") == "function_call_output")
        assert whole.count("\n") >= 2499  # the log keeps the whole output
        saved = Path(of(events, "started")[0].workspace) / ".loopwire" / "outputs" / "big1.txt"
        assert saved.read_text() == whole
        shown = h.gateway.requests[-1].input
        cut = next(i.function_call_output.output for i in shown if i.WhichOneof("item") == "function_call_output")
        assert "the whole output is in .loopwire/outputs/big1.txt" in cut
        assert cut.startswith("1\n2\n3\n") and cut.endswith("2500\n\n[exit code 0]")  # a head and a tail
        assert compaction.item_tokens(shown[-1]) < 4000


def test_pointer_paths_stay_inside_the_outputs_folder():
    assert masking.pointer_path("call_1") == ".loopwire/outputs/call_1.txt"
    for odd in ("../../etc/passwd", "a/b", ".hidden", "x" * 200, ""):
        path = masking.pointer_path(odd)
        assert path.startswith(".loopwire/outputs/call-") and "/" not in path.removeprefix(".loopwire/outputs/")
