"""ResponseBuilder shapes that a mesh test reaches only with luck: a cancelled response (it ends,
it does not fail), completed_at, the content part's logprobs, and the SSE ``error`` event, which
keeps its own ``type`` with the error under ``error`` and flat too; and ``fresh``, another Response
to the same request (compaction v2)."""

from __future__ import annotations

from loopwire.api.create import parse_create
from loopwire.api.errors import ApiError
from loopwire.api.events import ResponseBuilder
from loopwire.api.responses import error_event
from loopwire.v1 import common_pb2, gateway_pb2

Code = common_pb2.ErrorCode


def builder(**body) -> ResponseBuilder:
    b = ResponseBuilder(parse_create({"model": "m", "input": "hi", **body}, models=["m"]))
    b.feed(gateway_pb2.ConverseResponse(created=gateway_pb2.ResponseCreated(response_id="resp_1")))
    return b


def test_cancel_ends_the_response_as_cancelled():
    b = builder()
    b.feed(gateway_pb2.ConverseResponse(text_delta=gateway_pb2.TextDelta(text="par")))
    out = b.feed(gateway_pb2.ConverseResponse(failed=gateway_pb2.ResponseFailed(error=common_pb2.Error(
        code=Code.ERROR_CODE_CANCELLED, message="cancelled by the client", field="cancel_response"))))
    assert b.done and b.status == "cancelled" and b.failure() is None
    last = out[-1]
    assert last["type"] == "response.failed" and last["response"]["status"] == "cancelled"
    assert last["response"]["output"][0]["status"] == "incomplete"


def test_completed_at_and_part_logprobs():
    b = builder(safety_identifier="u1", max_tool_calls=2)
    events = b.feed(gateway_pb2.ConverseResponse(text_delta=gateway_pb2.TextDelta(text="ok")))
    part = next(e for e in events if e["type"] == "response.content_part.added")["part"]
    assert part == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    assert b.response()["completed_at"] is None
    done = b.feed(gateway_pb2.ConverseResponse(completed=gateway_pb2.ResponseCompleted(
        finish_reason=common_pb2.FINISH_REASON_STOP, output=[common_pb2.Item(message=common_pb2.Message(
            role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text="ok")]))])))
    r = done[-1]["response"]
    assert r["completed_at"] >= r["created_at"] and (r["safety_identifier"], r["max_tool_calls"]) == ("u1", 2)
    assert [e["sequence_number"] for e in done] == list(range(done[0]["sequence_number"], b.seq))


def test_error_event_keeps_its_type():
    event = error_event(ApiError(503, "gone", type="server_error", code="unavailable"), 7)
    assert event == {"type": "error", "sequence_number": 7, "code": "unavailable", "message": "gone", "param": None,
                     "error": {"type": "server_error", "code": "unavailable", "message": "gone", "param": None}}


def test_fresh_starts_another_response_to_the_same_request():
    b = builder(instructions="be brief")
    b.feed(gateway_pb2.ConverseResponse(text_delta=gateway_pb2.TextDelta(text="ok")))
    b.feed(gateway_pb2.ConverseResponse(completed=gateway_pb2.ResponseCompleted(
        finish_reason=common_pb2.FINISH_REASON_LENGTH, output=[common_pb2.Item(message=common_pb2.Message(
            role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text="ok")]))])))
    old = b.response()
    f = b.fresh("resp_2")
    new = f.response()
    assert (new["id"], new["status"], new["output"], f.seq) == ("resp_2", "in_progress", [], 0)
    assert new["incomplete_details"] is new["error"] is new["completed_at"] is None
    same = ("created_at", "instructions", "model", "usage", "loopwire")
    assert [new[k] for k in same] == [old[k] for k in same] and new["usage"] is not None
    assert b.response() == old  # the summary call's builder is left as it was
