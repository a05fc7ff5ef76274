"""WebSocket lanes (``stream_id``) on the real mesh: lanes run at once, each in order, every event
of a named lane carries its id, the limits (16 responses in flight, 32 named lanes) and the
lane errors as OpenAI's WebSocket mode has them; and the connection-age limit
(``--ws-max-age-s``, small here) ends a connection only once its responses are done."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from api_mesh import KEYS, start_api_mesh
from openresponses_schema import validate_event
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

pytestmark = [pytest.mark.e2e]

ENDS = {"response.completed", "response.incomplete", "response.failed", "error"}
AGE_S = 3


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-lanes"))
    yield m
    m.mesh.stop()


@pytest.fixture(scope="module")
def aged(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-aged"), {"api": ["--ws-max-age-s", str(AGE_S)]})
    yield m
    m.mesh.stop()


def ws(api) -> ClientConnection:
    return connect(f"ws://{api.api}/v1/responses", additional_headers={"authorization": f"Bearer {KEYS['alpha']}"})


def create(text: str, reply: str | None = None, lane: str | None = None, **fields: Any) -> str:
    body: dict[str, Any] = {"type": "response.create", "model": "loopwire", "input": text, **fields}
    if reply is not None:
        body["loopwire_replay"] = {"text": reply}
    if lane is not None:
        body["stream_id"] = lane
    return json.dumps(body)


def events(conn: ClientConnection) -> Iterator[dict[str, Any]]:
    while True:
        event = json.loads(conn.recv(timeout=120))
        validate_event(event)
        yield event


def until_ends(conn: ClientConnection, n: int) -> list[dict[str, Any]]:
    """Every event until ``n`` requests ended (each with its terminal event)."""
    out = []
    for event in events(conn):
        out.append(event)
        if event["type"] in ENDS and len([e for e in out if e["type"] in ENDS]) == n:
            return out


def lane_of(seen: list[dict[str, Any]], lane: str | None) -> list[dict[str, Any]]:
    return [e for e in seen if e.get("stream_id") == lane]


def test_lanes_run_at_once_and_each_event_names_its_lane(api):
    with ws(api) as conn:
        conn.send(create("Write a long story.", lane="story", max_output_tokens=600))
        first = next(events(conn))  # the story has started
        assert first["type"] == "response.created" and first["stream_id"] == "story"
        conn.send(create("Quick question?", "Quick answer.", lane="quick"))
        conn.send(create("And on the default lane?", "Default."))
        seen = [first, *until_ends(conn, 3)]
    ends = [(e.get("stream_id"), e["type"]) for e in seen if e["type"] in ENDS]
    # The short ones finished while the long one still ran (one lane at a time would end it first).
    assert ends[-1][0] == "story" and ends[-1][1] != "error", ends
    assert {e.get("stream_id") for e in seen} == {"story", "quick", None}
    for lane, text in (("quick", "Quick answer."), (None, "Default.")):
        mine = lane_of(seen, lane)
        assert mine[-1]["type"] == "response.completed"
        assert mine[-1]["response"]["output"][0]["content"][0]["text"] == text
        rid = mine[0]["response"]["id"]  # every event of a lane belongs to that lane's response
        assert all(e["response"]["id"] == rid for e in mine if "response" in e)
        assert all(rid.removeprefix("resp_") in e["item_id"] for e in mine if "item_id" in e)


def test_one_lane_runs_its_responses_in_order(api):
    with ws(api) as conn:
        for n in range(3):
            conn.send(create(f"question {n}", f"answer {n}", lane="fifo"))
        seen = until_ends(conn, 3)
    kinds = [(e["type"], e["response"]["id"]) for e in seen if e["type"] in ("response.created", "response.completed")]
    ids = [rid for kind, rid in kinds if kind == "response.created"]
    # created, completed, created, completed, ...: never two at once
    assert kinds == [(k, rid) for rid in ids for k in ("response.created", "response.completed")]
    texts = [e["response"]["output"][0]["content"][0]["text"] for e in seen if e["type"] == "response.completed"]
    assert texts == ["answer 0", "answer 1", "answer 2"]


@pytest.mark.parametrize("bad", ["", "has space", "x" * 257, 7, ["a"], "naïve"])
def test_an_invalid_stream_id_is_an_error_and_the_connection_serves_on(api, bad):
    with ws(api) as conn:
        conn.send(json.dumps({"type": "response.create", "model": "loopwire", "input": "hi", "stream_id": bad}))
        error = next(events(conn))
        assert error["type"] == "error" and error["status"] == 400 and "stream_id" not in error
        assert (error["error"]["code"], error["error"]["param"]) == ("invalid_stream_id", "stream_id")
        conn.send(create("hi", "fine", lane="x." + "y" * 254))  # the longest valid id
        done = until_ends(conn, 1)[-1]
        assert done["type"] == "response.completed" and done["stream_id"] == "x." + "y" * 254


def test_a_33rd_named_lane_is_refused_and_the_others_serve_on(api):
    with ws(api) as conn:
        # 32 lanes, each opened by a request the api refuses itself (no gateway stream needed)
        for n in range(32):
            conn.send(create("hi", lane=f"l{n}", bogus=1))
        refused = until_ends(conn, 32)
        assert {e["stream_id"] for e in refused} == {f"l{n}" for n in range(32)}
        assert {e["error"]["code"] for e in refused} == {"unknown_parameter"}
        conn.send(create("hi", "never", lane="l32"))
        limit = next(events(conn))
        assert limit["type"] == "error" and limit["status"] == 400 and limit["stream_id"] == "l32"
        assert (limit["error"]["code"], limit["error"]["param"]) == ("websocket_stream_limit_reached", "stream_id")
        conn.send(create("hi", "lane 5 again", lane="l5"))  # a known lane still serves
        conn.send(create("hi", "default lane"))  # and the default lane is not a named one
        done = until_ends(conn, 2)
    assert {(e.get("stream_id"), e["response"]["output"][0]["content"][0]["text"]) for e in done
            if e["type"] == "response.completed"} == {("l5", "lane 5 again"), (None, "default lane")}


def test_at_most_16_responses_run_at_once(api):
    with ws(api) as conn:
        for n in range(17):
            conn.send(create(f"Story {n}.", lane=f"s{n}", max_output_tokens=150))
        seen = until_ends(conn, 17)
    created = [e["stream_id"] for e in seen if e["type"] == "response.created"]
    assert sorted(created) == sorted(f"s{n}" for n in range(17))
    assert all(e["type"] in ("response.completed", "response.incomplete") for e in seen if e["type"] in ENDS)
    # The 17th started only after one of the 16 ended.
    running = 0
    peak = 0
    for e in seen:
        if e["type"] == "response.created":
            running += 1
            peak = max(peak, running)
        elif e["type"] in ENDS:
            running -= 1
    assert peak == 16


def test_a_failed_fork_on_another_lane_leaves_the_parent_to_its_lane(api):
    with ws(api) as conn:
        conn.send(create("Plan a trip.", "Go to Rome.", lane="planner", store=False))
        parent = until_ends(conn, 1)[-1]["response"]["id"]
        # store: false lives on its own lane's stream: the fork cannot find it ...
        conn.send(create("Critique it.", "Too hot.", lane="critic", store=False, previous_response_id=parent))
        error = until_ends(conn, 1)[-1]
        assert error["type"] == "error" and error["stream_id"] == "critic"
        assert error["error"]["code"] == "previous_response_not_found"
        # ... and its failure does not evict the parent from the lane that made it.
        conn.send(create("Add a day.", "Three days in Rome.", lane="planner", store=False,
                         previous_response_id=parent))
        done = until_ends(conn, 1)[-1]
    assert done["type"] == "response.completed" and done["stream_id"] == "planner"
    assert done["response"]["previous_response_id"] == parent


def test_a_failed_continuation_on_its_own_lane_evicts_the_id(api):
    with ws(api) as conn:
        conn.send(create("Plan a trip.", "Go to Rome.", lane="planner"))
        parent = until_ends(conn, 1)[-1]["response"]["id"]
        conn.send(create("x", lane="planner", previous_response_id=parent, tool_choice="required"))
        failed = until_ends(conn, 1)[-1]
        assert failed["type"] == "error" and failed["stream_id"] == "planner"
        conn.send(create("Again.", "Rome.", lane="planner", previous_response_id=parent))
        again = until_ends(conn, 1)[-1]
    assert again["type"] == "error" and again["error"]["code"] == "previous_response_not_found"
    assert again["stream_id"] == "planner"


def test_an_old_idle_connection_is_told_and_closed(aged):
    with ws(aged) as conn:
        event = json.loads(conn.recv(timeout=AGE_S * 20))  # nothing sent: the limit's event comes by itself
        assert event["type"] == "error" and event["status"] == 400 and "stream_id" not in event
        assert event["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosed) as closed:
            conn.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_at_the_age_limit_responses_in_flight_finish_and_later_ones_are_refused(aged):
    """Long stories on one lane, one always queued behind the running one, so the connection is
    never idle: whenever the limit comes, a story is in flight (it must finish uncut) and one waits
    (it must be refused). No timing assumption: the loop goes on until the limit's event arrives."""
    story = create("Write a long story.", lane="late", max_output_tokens=1200)
    with ws(aged) as conn:
        conn.send(story)
        conn.send(story)
        ended: list[dict[str, Any]] = []
        refused: list[dict[str, Any]] = []
        for event in events(conn):
            assert event.get("stream_id", "late") == "late"
            if event["type"] == "error" and "stream_id" not in event:
                limit = event
                break
            if event["type"] == "error":
                refused.append(event)
            elif event["type"] in ENDS:
                ended.append(event)
                if not refused:
                    try:
                        conn.send(story)  # keep one queued behind the story now running
                    except ConnectionClosed:
                        pass  # the limit closed it first: its events are still buffered, read on
        with pytest.raises(ConnectionClosed) as closed:
            conn.recv(timeout=30)
    assert ended, "the limit came before any story ended"
    for end in ended:  # the story in flight at the limit included: none was cut by it
        assert end["type"] in ("response.completed", "response.incomplete"), end
        assert end["response"]["usage"]["output_tokens"] == 1200
    assert refused and {(e["status"], e["error"]["code"]) for e in refused} == {
        (400, "websocket_connection_limit_reached")}
    assert limit["error"]["code"] == "websocket_connection_limit_reached" and limit["status"] == 400
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
