"""What keeps the relay cheap per token: deltas merge while the writer is busy, the parser
streams a call's arguments as they come, the safety checker gets its text a chunk at a time."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.common.tokenizer import decode
from loopwire.gateway.events import EventOutbox
from loopwire.gateway.output_parser import CallArgumentsOut, CallDoneOut, OutputParser
from loopwire.gateway.safety import OUTPUT, Verdict
from loopwire.gateway.safety_gate import SafetyGate
from loopwire.gateway.service import GatewayConfig
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import FakeReplica, user
from .test_gateway_concurrency import SlowClassifier, replay

MODEL = dummy_definition()
PROMPT = ChatPrompt(MODEL)

# -- the outbox -------------------------------------------------------------------------


def text(rid: str, t: str) -> gateway_pb2.ConverseResponse:
    return gateway_pb2.ConverseResponse(response_id=rid, text_delta=gateway_pb2.TextDelta(text=t))


def args(rid: str, call_id: str, d: str) -> gateway_pb2.ConverseResponse:
    return gateway_pb2.ConverseResponse(response_id=rid, tool_call_arguments_delta=gateway_pb2.ToolCallArgumentsDelta(
        call_id=call_id, delta=d))


def other(rid: str) -> gateway_pb2.ConverseResponse:
    return gateway_pb2.ConverseResponse(response_id=rid, tool_call_started=gateway_pb2.ToolCallStarted(name="bash"))


def content(e: gateway_pb2.ConverseResponse) -> tuple[str, str, str, str]:
    kind = e.WhichOneof("event")
    piece = e.text_delta.text if kind == "text_delta" else e.tool_call_arguments_delta.delta
    return e.response_id, kind, e.tool_call_arguments_delta.call_id, piece


events = st.lists(st.one_of(
    st.builds(text, st.sampled_from(["r1", "r2"]), st.text(min_size=1, max_size=5)),
    st.builds(args, st.sampled_from(["r1", "r2"]), st.sampled_from(["c1", "c2"]), st.text(min_size=1, max_size=5)),
    st.builds(other, st.sampled_from(["r1", "r2"]))), max_size=40)


async def drain(box: EventOutbox) -> list[gateway_pb2.ConverseResponse]:
    box.put(None)
    out = []
    while (e := await box.take()) is not None:
        out.append(e)
    return out


@settings(max_examples=200, deadline=None)
@given(sent=events)
def test_deltas_waiting_together_leave_as_one_message_in_order(sent):
    async def run() -> list[gateway_pb2.ConverseResponse]:
        box = EventOutbox()
        for e in sent:
            box.put(e)
        return await drain(box)

    got = asyncio.run(run())
    # Expand every message back into (response, kind, call, one character): the stream reads the same.
    def chars(es):
        return [(r, k, c, ch) if k != "tool_call_started" else (r, k, c, "") for e in es
                for r, k, c, p in [content(e)] for ch in (p or [""])]
    assert chars(got) == chars(sent)
    # Nothing that could have merged was left apart.
    for a, b in zip(got, got[1:], strict=False):
        ka, kb = content(a)[:3], content(b)[:3]
        assert not (ka == kb and ka[1] in ("text_delta", "tool_call_arguments_delta"))


@settings(max_examples=100, deadline=None)
@given(sent=events)
def test_a_writer_that_keeps_up_gets_every_event_as_it_was(sent):
    async def run() -> list[gateway_pb2.ConverseResponse]:
        box, got = EventOutbox(), []
        for e in sent:
            box.put(e)
            got.append(await box.take())  # nothing waits: nothing merges, nothing is delayed
        return got

    assert asyncio.run(run()) == sent


# -- the parser streams a call's arguments before the call closes -----------------------------


@settings(max_examples=150, deadline=None)
@given(arguments=st.recursive(st.one_of(st.integers(), st.text(max_size=8)),
                              lambda kids: st.dictionaries(st.text(max_size=4), kids, max_size=3), max_leaves=8),
       cut=st.integers(0, 10_000))
def test_arguments_stream_as_they_are_written_before_the_call_closes(arguments, cut):
    written = json.dumps({"args": arguments, "n": 1}, ensure_ascii=False)
    call = common_pb2.FunctionCall(name="bash", arguments=written)
    ids = PROMPT.output_ids("", [call])
    head = '<tool_call>\n{"name": "bash", "arguments": '
    parser = OutputParser(MODEL)
    cut = cut % (len(ids) + 1)
    events = [e for tok in ids[:cut] for e in parser.feed([tok])]  # token by token, as the replica streams
    seen = decode(MODEL.tokenizer, ids[:cut])
    streamed = "".join(e.delta for e in events if isinstance(e, CallArgumentsOut))
    if seen.startswith(head) and "</tool_call>" not in seen and "\ufffd" not in seen:
        # The body is read as JSON: every character of the arguments seen so far has left, and
        # nothing after them (the call object's own brace).
        assert streamed == seen[len(head):][: len(written)]
    events += parser.feed(ids[cut:]) + parser.finish()
    assert [e.call.arguments for e in events if isinstance(e, CallDoneOut)] == [written]
    assert "".join(e.delta for e in events if isinstance(e, CallArgumentsOut)) == written


# -- the safety checker gets whole chunks ----------------------------------------------------


class Windows:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def classify(self, text: str, stage: int) -> Verdict:
        assert stage == OUTPUT
        self.seen.append(text)
        return Verdict(True)


@settings(max_examples=100, deadline=None)
@given(t=st.text(min_size=1, max_size=300), cuts=st.lists(st.integers(0, 300), max_size=40),
       chunk=st.integers(1, 64), overlap=st.integers(0, 16))
def test_output_checks_see_the_same_windows_however_the_text_arrives(t, cuts, chunk, overlap):
    async def run() -> tuple[list[str], int]:
        classifier, queue = Windows(), asyncio.Queue()
        gate = SafetyGate(classifier, gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT, queue,  # type: ignore[arg-type]
                          _inline)
        await gate.start("", chunk, overlap, serial=True, input_window_chars=64)
        bounds = sorted({c % (len(t) + 1) for c in cuts} | {0, len(t)})
        for a, b in zip(bounds, bounds[1:], strict=False):
            gate.add_output(t[a:b])
            for _ in range(3):
                await asyncio.sleep(0)
            # Every whole chunk that arrived was checked already: the text reached the checker in time.
            assert len(classifier.seen) == b // chunk
        gate.close_output()
        while not gate.checker.finished:  # type: ignore[union-attr]
            await asyncio.sleep(0)
        return classifier.seen, gate.checked_chars

    seen, checked = asyncio.run(run())
    # The windows tile the text in chunks, each starting ``overlap`` before its chunk.
    expected = [t[max(0, i - overlap): i + chunk] for i in range(0, len(t), chunk)]
    assert seen == expected and checked == len(t)


async def _inline(size: int, fn: Callable[[], Verdict]) -> Verdict:
    return fn()


class InputWindows:
    """A local classifier (classified on the work pool) that refuses a window holding ``bad``."""

    def __init__(self, bad: str) -> None:
        self.bad = bad
        self.seen: list[str] = []

    def classify_now(self, text: str) -> Verdict:
        self.seen.append(text)
        return Verdict(self.bad not in text, "S1" if self.bad in text else "")

    async def classify(self, text: str, stage: int) -> Verdict:
        raise AssertionError("a local classifier's input check goes through the work pool")


@settings(max_examples=100, deadline=None)
@given(t=st.text(min_size=1, max_size=300), window=st.integers(1, 64), overlap=st.integers(0, 16),
       at=st.integers(0, 300))
def test_input_windows_tile_the_text_and_a_phrase_no_longer_than_the_overlap_is_seen_anywhere(t, window, overlap, at):
    bad = "\x00" * max(1, min(overlap, 4))
    text = t[: at % (len(t) + 1)] + bad + t[at % (len(t) + 1):]
    offloaded: list[int] = []

    async def offload(size: int, fn: Callable[[], Verdict]) -> Verdict:
        offloaded.append(size)
        return fn()

    async def run(text: str) -> tuple[list[str], Verdict]:
        classifier = InputWindows(bad)
        gate = SafetyGate(classifier, gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT, asyncio.Queue(), offload)  # type: ignore[arg-type]
        await gate.start(text, 8, overlap, serial=True, input_window_chars=window)
        gate.stop()
        assert gate.input_verdict is not None
        return classifier.seen, gate.input_verdict.verdict

    clean = t.replace("\x00", "")
    seen, verdict = asyncio.run(run(clean))
    assert seen == [clean[max(0, i - overlap): i + window] for i in range(0, len(clean), window)]
    assert verdict.allowed and offloaded == [len(w) for w in seen]
    # A phrase of at most overlap + 1 characters lies whole in some window, wherever it falls.
    _, verdict = asyncio.run(run(text))
    assert not verdict.allowed


# -- end to end: a burst released by buffer mode leaves as one message -------------------------


async def test_buffer_mode_sends_each_released_burst_as_one_message(make_mesh):
    body = "all good here. " * 10
    chunk = 40
    replica = FakeReplica(batch=1)
    mesh = await make_mesh([replica], classifier=SlowClassifier(0.02), config=GatewayConfig(allow_replay=True,
        safety_mode=gateway_pb2.SAFETY_MODE_BUFFER_UNTIL_PASS, safety_chunk_chars=chunk, safety_overlap_chars=0))
    events = await mesh.open().send(input=[user("q")], replay=replay(body))
    deltas = [e.text_delta.text for e in events if e.WhichOneof("event") == "text_delta"]
    assert "".join(deltas) == body
    assert replica.tokens_sent >= 20  # one token per message from the replica...
    assert len(deltas) <= math.ceil(len(body) / chunk) + 1  # ...one message per checked chunk to the client
