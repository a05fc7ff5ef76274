"""``background: true`` on ``POST /v1/responses``, as an attacker with two tenants sees it: the
create answers at once (``in_progress``, ``background: true``), ``GET /v1/responses/{id}`` polls it
to its end, ``cancel`` stops it mid-flight (on a slow replica, so the cancel surely lands while it
runs), another tenant's GET/cancel of the id answers the same 404 as a never-made id, a tenant's
background responses are capped (429 beyond; another tenant is not affected), ``store: false``
is a 400 (and a WebSocket refuses it), a streamed one goes on when its client hangs up, and a
stopping api cancels them.
Every wait polls a condition with a deadline."""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from types import SimpleNamespace
from typing import Any

import pytest
from api_mesh import KEYS, start_api_mesh, start_extra_api
from test_api_conformance import REPLY, check_response, check_stream, create, request, sse_events
from test_api_endpoints import LONG_PROMPT, NEVER, not_found_shape, ws_connect, ws_turn

pytestmark = [pytest.mark.e2e]

FINISHED = {"completed", "incomplete", "failed", "cancelled"}
CAP = 2


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-background"))
    yield m
    m.mesh.stop()


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-background-slow"), extra_args={
        "inference": ["--engine", "simulated", "--gpu", "l40s", "--model-params", "70b", "--kv-blocks", "4096",
                      "--time-scale", "1"],
        "api": ["--sse-keepalive-s", "0", "--background-responses", str(CAP)],
    })
    yield m
    m.mesh.stop()


def started(api, tenant: str = "alpha", **fields: Any) -> dict[str, Any]:
    """A background response, as the create answers it."""
    status, r, _ = request(api, "POST", "/v1/responses", json.dumps(
        {"model": "loopwire", "input": LONG_PROMPT, "background": True, **fields}), key=KEYS[tenant])
    assert status == 200, r
    check_response(r)
    assert r["background"] is True and r["store"] is True and r["status"] in ("queued", "in_progress"), r
    return r


def poll(api, rid: str, tenant: str = "alpha", timeout_s: float = 120.0) -> dict[str, Any]:
    """GET the response until it is finished (every answer on the way conforms)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, r, _ = request(api, "GET", f"/v1/responses/{rid}", key=KEYS[tenant])
        assert status == 200, r
        check_response(r)
        assert r["id"] == rid and r["background"] is True
        if r["status"] in FINISHED:
            return r
        assert r["status"] in ("queued", "in_progress"), r
        assert time.monotonic() < deadline, f"{rid} still {r['status']}"
        time.sleep(0.05)


def cancel(api, rid: str, tenant: str = "alpha") -> dict[str, Any]:
    status, r, _ = request(api, "POST", f"/v1/responses/{rid}/cancel", b"", key=KEYS[tenant])
    if status == 400:  # it finished meanwhile: nothing left to cancel
        return poll(api, rid, tenant)
    assert status == 200, r
    check_response(r)
    return r


# -- create, poll, stream ---------------------------------------------------------------------------


def test_background_create_answers_at_once_and_polls_to_completed(api):
    status, r, _ = request(api, "POST", "/v1/responses", create(background=True, metadata={"k": "v"}))
    assert status == 200, r
    check_response(r)
    assert r["background"] is True and r["status"] in ("queued", "in_progress") and r["metadata"] == {"k": "v"}
    assert r["completed_at"] is None and r["usage"] is None
    done = poll(api, r["id"])
    assert done["status"] == "completed" and done["background"] is True
    assert done["output"][-1]["content"][0]["text"] == REPLY
    assert done["usage"]["output_tokens"] > 0 and done["metadata"] == {"k": "v"}
    # Stored as any response: its input items, and continued by previous_response_id.
    status, page, _ = request(api, "GET", f"/v1/responses/{r['id']}/input_items")
    assert status == 200 and page["data"][0]["content"][0]["text"] == "Capital of France?"
    status, nxt, _ = request(api, "POST", "/v1/responses", create(previous_response_id=r["id"]))
    assert status == 200 and nxt["previous_response_id"] == r["id"] and nxt["background"] is False


def test_background_stream_streams_events_as_usual(api):
    status, _, data = request(api, "POST", "/v1/responses", create(background=True, stream=True))
    assert status == 200
    events = sse_events(data)
    check_stream(events)
    assert all(e["response"]["background"] is True for e in events if "response" in e)
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"][-1]["content"][0]["text"] == REPLY
    status, got, _ = request(api, "GET", f"/v1/responses/{final['id']}")
    assert status == 200 and got == final


@pytest.mark.parametrize("fields", [{"store": False}, {"store": False, "stream": True}])
def test_background_needs_store(api, fields):
    status, reply, _ = request(api, "POST", "/v1/responses", create(background=True, **fields))
    assert status == 400, reply
    assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert (reply["error"]["code"], reply["error"]["param"]) == ("invalid_value", "background")
    assert "store" in reply["error"]["message"]


def test_background_false_is_an_ordinary_response(api):
    status, r, _ = request(api, "POST", "/v1/responses", create(background=False))
    assert status == 200 and r["status"] == "completed" and r["background"] is False


# -- cancel, other tenants, the cap (a slow replica) -------------------------------------------------


def test_cancel_stops_a_background_response_mid_flight(slow):
    r = started(slow)
    rid = r["id"]
    status, running, _ = request(slow, "GET", f"/v1/responses/{rid}")
    assert status == 200 and running["status"] in ("queued", "in_progress")
    check_response(running)
    # Another tenant's GET and cancel answer what a never-made id answers, and change nothing.
    for method, route in (("GET", "/v1/responses/{}"), ("POST", "/v1/responses/{}/cancel"),
                          ("GET", "/v1/responses/{}/input_items"), ("DELETE", "/v1/responses/{}")):
        theirs = not_found_shape(slow, method, route.format(rid), rid, tenant="beta")
        assert theirs == not_found_shape(slow, method, route.format(NEVER), NEVER, tenant="beta")
        assert theirs == not_found_shape(slow, method, route.format(NEVER), NEVER)
    assert request(slow, "GET", f"/v1/responses/{rid}")[1]["status"] in ("queued", "in_progress")
    status, cancelled, _ = request(slow, "POST", f"/v1/responses/{rid}/cancel", b"")
    assert status == 200, cancelled
    check_response(cancelled)
    assert cancelled["id"] == rid and cancelled["status"] == "cancelled" and cancelled["background"] is True
    got = poll(slow, rid)
    assert got["status"] == "cancelled"
    status, again, _ = request(slow, "POST", f"/v1/responses/{rid}/cancel", b"")
    assert status == 400 and "cancelled" in again["error"]["message"]


def test_background_responses_are_capped_per_tenant(slow):
    mine = [started(slow, "beta")["id"] for _ in range(CAP)]
    try:
        status, reply, _ = request(slow, "POST", "/v1/responses", json.dumps(
            {"model": "loopwire", "input": "one more", "background": True}), key=KEYS["beta"])
        running = [request(slow, "GET", f"/v1/responses/{rid}", key=KEYS["beta"])[1]["status"] for rid in mine]
        if all(s in ("queued", "in_progress") for s in running):  # (else one ended first: nothing to say)
            assert status == 429, reply
            assert (reply["error"]["type"], reply["error"]["code"]) == ("rate_limit_exceeded", "rate_limit_exceeded")
        # Another tenant's background responses are not counted against this one.
        other = started(slow, "alpha")["id"]
        assert cancel(slow, other)["status"] in FINISHED
        # A cancelled one gives its slot back.
        assert cancel(slow, mine[0], "beta")["status"] in FINISHED
        mine.append(started(slow, "beta")["id"])
    finally:
        for rid in mine:
            assert cancel(slow, rid, "beta")["status"] in FINISHED


def test_streamed_background_response_goes_on_when_its_client_leaves(slow):
    host, port = slow.api.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/responses", body=json.dumps(
        {"model": "loopwire", "input": LONG_PROMPT, "background": True, "stream": True, "max_output_tokens": 4}),
        headers={"content-type": "application/json", "authorization": f"Bearer {KEYS['alpha']}"})
    reply = conn.getresponse()
    assert reply.status == 200
    data = b""
    while b"\n\n" not in data:
        line = reply.fp.readline()
        assert line, data
        data += line
    created = sse_events(data.split(b"\n\n")[0] + b"\n\n")[0]
    assert created["type"] == "response.created" and created["response"]["background"] is True
    rid = created["response"]["id"]
    reply.close()
    conn.close()  # the client hangs up before the prefill is over ...
    done = poll(slow, rid)  # ... and the response still runs to its end
    assert done["status"] == "incomplete" and done["incomplete_details"] == {"reason": "max_output_tokens"}
    assert done["usage"]["output_tokens"] == 4


def test_stopping_the_api_cancels_its_background_responses(slow):
    proc, address = start_extra_api(slow, [{"text": "never told"}], "bg-stop")
    try:
        r = started(SimpleNamespace(api=address))
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(60) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (slow.state / "logs" / "bg-stop.log").read_text(errors="replace")
    assert "shutdown: cancelling 1 background responses" in log, log
    assert f"id={r['id']} status=cancelled" in log, log
    # The gateway stopped it: the slow replica serves the next response of the tenant as usual.
    status, nxt, _ = request(slow, "POST", "/v1/responses", create(max_output_tokens=1))
    assert status == 200 and nxt["status"] in ("completed", "incomplete"), (r["id"], nxt)


def test_background_over_a_websocket_is_refused(api):
    with ws_connect(api) as ws:
        error = ws_turn(ws, input="hi", background=True, loopwire_replay={"text": "x"})[-1]
        assert error["type"] == "error" and error["status"] == 400, error
        assert (error["error"]["code"], error["error"]["param"]) == ("unsupported_parameter", "background")
        # The connection serves on.
        assert ws_turn(ws, input="hi", loopwire_replay={"text": "x"})[-1]["type"] == "response.completed"
