"""An output cut by max_output_tokens is reported as cut, end to end: the gateway on a real gRPC
server in front of a fake replica, its events then through the api's Responses and chat builders."""

from __future__ import annotations

from loopwire.api.chat import ChatBuilder
from loopwire.api.create import parse_create
from loopwire.api.events import ResponseBuilder
from loopwire.common.tokenizer import decode
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import BASH, MODEL, PROMPT, kinds, last, user

LS = common_pb2.FunctionCall(call_id="call_a", name="bash", arguments='{"command": "ls"}')
CAT = common_pb2.FunctionCall(call_id="call_b", name="bash", arguments='{"command": "cat /etc/hosts"}')


def tokens_until(calls: list[common_pb2.FunctionCall], marker: str) -> int:
    """How many of the output's ids it takes to have written ``marker`` (the last time it occurs)."""
    ids = PROMPT.output_ids("", calls)
    at = decode(MODEL.tokenizer, ids).rindex(marker) + len(marker)
    return next(n for n in range(len(ids) + 1) if len(decode(MODEL.tokenizer, ids[:n])) >= at)


async def cut_run(make_mesh, calls: list[common_pb2.FunctionCall], marker: str):
    mesh = await make_mesh()
    conv = mesh.open()
    replay = common_pb2.ReplayOutput(text="", function_calls=calls)
    return await conv.send(tools=[BASH], input=[user("look")], replay=replay,
                           sampling=common_pb2.SamplingParams(max_output_tokens=tokens_until(calls, marker)))


def responses(events: list[gateway_pb2.ConverseResponse]) -> tuple[ResponseBuilder, list[dict]]:
    b = ResponseBuilder(parse_create({"model": "m", "input": "look", "tools": [
        {"type": "function", "name": "bash", "parameters": {"type": "object"}}]}, models=["m"]))
    return b, [e for ev in events for e in b.feed(ev)]


def chat(events: list[gateway_pb2.ConverseResponse]) -> tuple[ChatBuilder, list[dict]]:
    b = ChatBuilder("m", False)
    return b, [c for ev in events for c in b.feed(ev)]


async def test_a_cut_second_parallel_call_is_incomplete_and_no_markup_is_text(make_mesh):
    events = await cut_run(make_mesh, [LS, CAT], '"command": "ca')
    done = last(events, "completed")
    assert kinds(events).count("tool_call_started") == 2 and kinds(events).count("tool_call_done") == 1
    assert done.finish_reason == common_pb2.FINISH_REASON_LENGTH
    assert [i.function_call.arguments for i in done.output] == ['{"command": "ls"}']
    cut = done.incomplete_call
    assert cut.name == "bash" and cut.arguments.startswith('{"command": "ca') and cut.arguments != CAT.arguments

    b, sse = responses(events)
    r = b.response()
    assert r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [(i["type"], i["status"]) for i in r["output"]] == [("function_call", "completed"),
                                                               ("function_call", "incomplete")]
    assert not any(i["type"] == "message" for i in r["output"])  # no "<tool_call>" as output text
    assert sse[-1]["type"] == "response.incomplete"
    added = [e["item"]["call_id"] for e in sse
             if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"]
    finished = [e["item"]["call_id"] for e in sse
                if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"]
    assert added == finished == [done.output[0].function_call.call_id, done.incomplete_call.call_id]

    c, chunks = chat(events)
    shown = [t for ch in chunks for t in ch["choices"][0]["delta"].get("tool_calls", [])]
    # Only the finished call was shown, whole, once: a client that calls what it was shown at the
    # end (the AI SDK) runs no call with input "".
    assert shown == [{"index": 0, "id": done.output[0].function_call.call_id, "type": "function",
                      "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    message = c.completion()["choices"][0]["message"]
    assert message["content"] is None and [t["function"]["arguments"] for t in message["tool_calls"]] == [
        '{"command": "ls"}']


async def test_a_cut_first_call_does_not_vanish(make_mesh):
    events = await cut_run(make_mesh, [CAT], '"command": "ca')
    done = last(events, "completed")
    assert kinds(events).count("tool_call_started") == 1 and "tool_call_done" not in kinds(events)
    assert done.finish_reason == common_pb2.FINISH_REASON_LENGTH and done.incomplete_call.name == "bash"
    b, _ = responses(events)
    assert [(i["type"], i["status"], i["arguments"]) for i in b.response()["output"] if i["type"] != "message"] == [
        ("function_call", "incomplete", done.incomplete_call.arguments)]
    c, chunks = chat(events)
    assert not any("tool_calls" in ch["choices"][0]["delta"] for ch in chunks)
    assert "tool_calls" not in c.completion()["choices"][0]["message"]


async def test_cut_text_is_an_incomplete_message(make_mesh):
    mesh = await make_mesh()
    events = await mesh.open().send(input=[user("look")], replay=common_pb2.ReplayOutput(text="a long answer"),
                                    sampling=common_pb2.SamplingParams(max_output_tokens=2))
    done = last(events, "completed")
    assert done.finish_reason == common_pb2.FINISH_REASON_LENGTH and done.message_incomplete
    b, sse = responses(events)
    assert [(i["type"], i["status"]) for i in b.response()["output"]] == [("message", "incomplete")]
    assert [e["item"]["status"] for e in sse if e["type"] == "response.output_item.done"] == ["incomplete"]
