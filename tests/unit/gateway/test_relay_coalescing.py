"""Coalesced token batches read the same as the token-by-token stream: the replica may join
any run of tokens into one message (its window, a lagging writer) and the gateway parses each
batch at once, so whatever the cut, the client gets the same text, the same tool calls and the
same events apart from how deltas are split. Checked on the output parser for every tool-call
family, and end to end through the gateway relay with a replica that cuts as it is told."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.common.auth import Authenticator
from loopwire.common.model_def import dummy_definition
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.output_parser import (
    CallArgumentsOut,
    CallDoneOut,
    CallStartedOut,
    OutputParser,
    TextOut,
)
from loopwire.gateway.service import GatewayConfig
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

from .gateway_fakes import MODEL, FakeReplica, start_replica, streamed_text, user

DUMMY = dummy_definition()
STOP_ID = DUMMY.stop_token_ids[0]

# -- the parser: a batch is parsed as one piece of text ---------------------------------------------

words = st.lists(st.sampled_from(list("ab <>{}\"\\:;,[]\n") + ["é", "日本", "🙂", "word", "</", "<tool", "call>"]),
                 max_size=12).map("".join)
arguments = st.dictionaries(st.sampled_from(["command", "path", "n"]),
                            st.one_of(st.text(st.sampled_from(list('ab "\\{}<>\n') + ["🙂"]), max_size=8),
                                      st.integers(-5, 500)), max_size=3)


def call_text(fmt: str, name: str, args: dict[str, object]) -> str:
    if fmt == "hermes":
        return f'<tool_call>\n{json.dumps({"name": name, "arguments": args}, ensure_ascii=False)}\n</tool_call>'
    if fmt == "llama3_json":
        return json.dumps({"name": name, "parameters": args}, ensure_ascii=False)
    if fmt == "mistral":
        return "[TOOL_CALLS]" + json.dumps([{"name": name, "arguments": args}], ensure_ascii=False)
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


@st.composite
def outputs(draw: st.DrawFn) -> tuple[str, list[int], list[int], list[str]]:
    fmt = draw(st.sampled_from(["hermes", "llama3_json", "mistral", "qwen3_coder"]))
    pieces = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            pieces.append(call_text(fmt, draw(st.sampled_from(["bash", "read_file"])), draw(arguments)))
        else:
            pieces.append(draw(words))
    text = ("" if fmt == "llama3_json" else draw(words)) + "".join(pieces)
    ids = DUMMY.tokenizer.encode(text)
    if draw(st.booleans()):
        ids.append(STOP_ID)  # the turn ends at the stop id (anything after it is ignored)
        ids += DUMMY.tokenizer.encode(draw(words))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(ids)), max_size=12))))
    stops = draw(st.sampled_from([[], ["}"], ["wo"], ["</tool_call>", "🙂"]]))
    return fmt, ids, cuts, stops


def batches(ids: Sequence[int], cuts: Sequence[int]) -> list[list[int]]:
    bounds = [0, *cuts, len(ids)]
    return [list(ids[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def merged(events: Sequence[object]) -> list[tuple[object, ...]]:
    """Events with consecutive deltas of one text (or one call's arguments) joined; offsets dropped."""
    out: list[tuple[object, ...]] = []
    for e in events:
        if isinstance(e, TextOut):
            item: tuple[object, ...] = ("text", "", e.text)
        elif isinstance(e, CallArgumentsOut):
            item = ("args", e.call_id, e.delta)
        elif isinstance(e, CallStartedOut):
            item = ("started", e.call_id, e.name, e.index)
        else:
            assert isinstance(e, CallDoneOut)
            item = ("done", e.call.call_id, e.call.name, e.call.arguments, e.index)
        if item[0] in ("text", "args") and out and out[-1][:2] == item[:2]:
            out[-1] = (*item[:2], str(out[-1][2]) + str(item[2]))
        elif item[0] not in ("text", "args") or item[2]:
            out.append(item)
    return out


def parse(fmt: str, stops: list[str], feeds: list[list[int]]) -> tuple[object, ...]:
    parser = OutputParser(dataclasses.replace(DUMMY, tool_call_format=fmt), stops=stops)
    events = [e for batch in feeds for e in parser.feed(batch)] + parser.finish()
    # Past a stop string the output is over: what the model said after it (the rest of the token that
    # ended it, or of the batch) is no part of the turn, which is the text released.
    raw = None if parser.stopped_by_string else parser.raw_text
    return (merged(events), parser.text, raw, [(c.call_id, c.name, c.arguments) for c in parser.calls],
            parser.stopped_by_string, "".join(parser.safety_text), parser.safety_chars, parser.saw_stop_token)


@settings(max_examples=400, deadline=None)
@given(case=outputs())
def test_any_batching_of_the_tokens_parses_like_the_token_by_token_stream(case):
    fmt, ids, cuts, stops = case
    one_by_one = parse(fmt, stops, [[t] for t in ids])
    assert parse(fmt, stops, batches(ids, cuts)) == one_by_one
    assert parse(fmt, stops, [list(ids)] if ids else []) == one_by_one  # everything in one message


def test_a_batch_is_detokenized_with_each_tokens_bytes_looked_up_once():
    calls: list[int] = []

    class Counting:
        def __init__(self) -> None:
            self.inner = DUMMY.tokenizer

        def token_bytes(self, token_id: int) -> bytes:
            calls.append(token_id)
            return self.inner.token_bytes(token_id)

    model = dataclasses.replace(DUMMY, tokenizer=Counting())  # type: ignore[arg-type]
    ids = DUMMY.tokenizer.encode("word " * 50)
    parser = OutputParser(model)
    parser.feed(ids[:10])
    parser.feed(ids[10:])
    assert parser.text == "word " * 50
    assert sorted(calls) == sorted(set(ids))  # a cache, not a lookup per token


# -- end to end: the relay over a replica that cuts the stream as told -------------------------


@dataclasses.dataclass
class CuttingReplica(FakeReplica):
    """Sends the replayed ids in the batches ``cuts`` gives (cut points cycled over the output)."""

    cuts: list[int] = dataclasses.field(default_factory=list)

    async def Generate(self, request_iterator, context):  # noqa: N802
        async for response in super().Generate(request_iterator, context):
            if not response.HasField("tokens"):
                yield response
                continue
            ids = list(response.tokens.token_ids)  # the whole output: batch is set larger than any
            for piece in batches(ids, [c for c in self.cuts if 0 < c < len(ids)]):
                yield inference_pb2.GenerateResponse(request_id=response.request_id,
                                                     tokens=inference_pb2.TokenBatch(token_ids=piece))


def client_view(events: list[gateway_pb2.ConverseResponse]) -> list[tuple[object, ...]]:
    """What the client reads, consecutive deltas joined, ids and timings left out."""
    out: list[tuple[object, ...]] = []
    for e in events:
        kind = e.WhichOneof("event")
        if kind == "text_delta":
            item: tuple[object, ...] = ("text", "", e.text_delta.text)
        elif kind == "tool_call_arguments_delta":
            item = ("args", e.tool_call_arguments_delta.call_id.rsplit("_", 1)[-1], e.tool_call_arguments_delta.delta)
        elif kind == "tool_call_started":
            item = ("started", e.tool_call_started.name, e.tool_call_started.index)
        elif kind == "tool_call_done":
            c = e.tool_call_done.call
            item = ("done", c.name, c.arguments, e.tool_call_done.index)
        elif kind == "completed":
            done = e.completed
            item = ("completed", done.finish_reason, done.usage.output_tokens,
                    tuple(i.SerializeToString() for i in _without_ids(done.output)))
        else:
            item = (kind,)
        if item[0] in ("text", "args") and out and out[-1][:2] == item[:2]:
            out[-1] = (*item[:2], str(out[-1][2]) + str(item[2]))
        else:
            out.append(item)
    return out


def _without_ids(items: Sequence[common_pb2.Item]) -> list[common_pb2.Item]:
    out = []
    for item in items:
        copy = common_pb2.Item()
        copy.CopyFrom(item)
        if copy.HasField("function_call"):
            copy.function_call.call_id = ""
        out.append(copy)
    return out


async def relay(text: str, calls: list[common_pb2.FunctionCall], cuts: list[int], stops: list[str]) -> list:
    replica = CuttingReplica(batch=1 << 20, cuts=cuts)
    server, address = await start_replica(replica)
    gateway = await start_gateway([address], poll_interval_s=0.05, model=MODEL, authenticator=Authenticator.open(),
                                  config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    try:
        call = gateway.stub.Converse()
        await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
            input=[user("go")], replay=common_pb2.ReplayOutput(text=text, function_calls=calls),
            sampling=common_pb2.SamplingParams(stop=stops))))
        events = []
        while True:
            event = await call.read()
            assert event is not grpc.aio.EOF
            events.append(event)
            if event.WhichOneof("event") in ("completed", "failed"):
                break
        await call.done_writing()
        return events
    finally:
        await gateway.close()
        await server.stop(0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=words, args=st.lists(arguments, max_size=2), cuts=st.lists(st.integers(1, 120), max_size=10),
       stops=st.sampled_from([[], ["wo"], ["🙂"]]))
def test_the_relay_sends_the_same_response_however_the_replica_batches(text, args, cuts, stops):
    calls = [common_pb2.FunctionCall(call_id=f"call_{i}", name="bash", arguments=json.dumps(a, ensure_ascii=False))
             for i, a in enumerate(args)]

    async def both() -> tuple[list, list]:
        one_by_one = await relay(text, calls, list(range(1, 400)), stops)
        coalesced = await relay(text, calls, sorted(set(cuts)), stops)
        return one_by_one, coalesced

    one_by_one, coalesced = asyncio.run(both())
    assert client_view(coalesced) == client_view(one_by_one)
    assert client_view(one_by_one)[-1][0] == "completed"


async def converse_once(call: grpc.aio.StreamStreamCall, text: str) -> list[gateway_pb2.ConverseResponse]:
    await call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user("go")], replay=common_pb2.ReplayOutput(text=text))))
    events = []
    # Bounded: a response that never ends (a lost batch) fails the test instead of hanging it.
    while (event := await asyncio.wait_for(call.read(), 30)).WhichOneof("event") not in ("completed", "failed"):
        events.append(event)
    return [*events, event]


def test_a_batch_that_fails_to_parse_in_the_links_reader_fails_its_response_and_the_stream_serves_on(monkeypatch):
    """Token batches are parsed in the link's reader callback when nothing waits before them; a bug there
    must fail that response (INTERNAL, as one in the response's task does), not kill the link's reader."""
    from loopwire.gateway import relay as relay_module

    feed = OutputParser.feed
    state = {"armed": True, "in_reader": False, "raised": False}

    def broken_once_in_the_reader(self: OutputParser, ids: Sequence[int]) -> list:
        if state["armed"] and state["in_reader"]:
            state["armed"], state["raised"] = False, True
            raise RuntimeError("parser bug")
        return feed(self, ids)

    original = relay_module.ResponseRun.take_at_once

    def noted(self: relay_module.ResponseRun, message: object) -> bool:
        state["in_reader"] = True
        try:
            return original(self, message)
        finally:
            state["in_reader"] = False

    monkeypatch.setattr(OutputParser, "feed", broken_once_in_the_reader)
    monkeypatch.setattr(relay_module.ResponseRun, "take_at_once", noted)

    async def run() -> tuple[list, list]:
        replica = CuttingReplica(batch=1 << 20, cuts=[])
        server, address = await start_replica(replica)
        gateway = await start_gateway([address], poll_interval_s=0.05, model=MODEL,
                                      authenticator=Authenticator.open(),
                                      config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
        try:
            call = gateway.stub.Converse()
            bad = await converse_once(call, "some words")
            good = await converse_once(call, "fine words")
            await call.done_writing()
            return bad, good
        finally:
            await gateway.close()
            await server.stop(0)

    bad, good = asyncio.run(run())
    assert state["raised"], "no batch was parsed in the reader"
    assert bad[-1].WhichOneof("event") == "failed"
    assert bad[-1].failed.error.code == common_pb2.ERROR_CODE_INTERNAL and "parser bug" in bad[-1].failed.error.message
    assert good[-1].WhichOneof("event") == "completed"
    assert streamed_text(good) == "fine words"
