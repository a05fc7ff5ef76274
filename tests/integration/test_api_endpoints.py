"""``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` and
``POST /v1/responses/{id}/cancel``, raw and through the openai SDK, as an attacker with two
tenants sees them: another tenant's id, a deleted one, a ``store: false`` one and one never made
answer the same 404. Also: ``previous_response_not_found`` is a 400 over HTTP, a failed
continuation in WebSocket mode evicts its id, and a response in flight can be cancelled (on a
slow replica, so the cancel surely lands mid-generation; every wait is on a condition)."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import openai
import pytest
from api_mesh import KEYS, start_api_mesh
from openai import OpenAI
from test_api_conformance import check_item, check_response, check_stream, create, request, sse_events
from websockets.sync.client import connect

pytestmark = [pytest.mark.e2e]

NEVER = "resp_00000000000000000000000000000000"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-endpoints"))
    yield m
    m.mesh.stop()


def sdk(api, tenant: str = "alpha") -> OpenAI:
    return OpenAI(base_url=api.base_url, api_key=KEYS[tenant], max_retries=0)


def made(api, tenant: str = "alpha", **fields: Any) -> dict[str, Any]:
    status, r, _ = request(api, "POST", "/v1/responses", create(**fields), key=KEYS[tenant])
    assert status == 200, r
    return r


def not_found_shape(api, method: str, path: str, rid: str, tenant: str = "alpha") -> dict[str, Any]:
    """The 404 with the id taken out, so the answers for different ids can be compared."""
    status, reply, raw = request(api, method, path, b"" if method == "POST" else None, key=KEYS[tenant])
    assert status == 404, reply
    assert set(reply["error"]) == {"message", "type", "param", "code"} and reply["error"]["code"] == "not_found"
    return json.loads(raw.decode().replace(rid, "<id>"))


ROUTES = [("GET", "/v1/responses/{}"), ("GET", "/v1/responses/{}/input_items"), ("DELETE", "/v1/responses/{}"),
          ("POST", "/v1/responses/{}/cancel")]


# -- retrieve ---------------------------------------------------------------------------------------


def test_get_returns_the_stored_response(api):
    r = made(api, instructions="Be brief.", metadata={"topic": "geo"})
    status, got, _ = request(api, "GET", f"/v1/responses/{r['id']}")
    assert status == 200
    check_response(got)
    assert got == r


def test_sdk_retrieve_input_items_and_delete(api):
    c = sdk(api)
    r = c.responses.create(model="loopwire", input="Capital of France?",
                           extra_body={"loopwire_replay": {"text": "Paris."}})
    got = c.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == "Paris." and got.status == "completed"
    page = c.responses.input_items.list(r.id, include=["message.output_text.logprobs"])
    assert [i.type for i in page.data] == ["message"] and page.data[0].content[0].text == "Capital of France?"
    c.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)
    with pytest.raises(openai.BadRequestError):
        c.responses.cancel(c.responses.create(model="loopwire", input="x", max_output_tokens=1).id)


@pytest.mark.parametrize(("method", "route"), ROUTES)
def test_other_tenant_deleted_unstored_and_unknown_ids_answer_the_same_404(api, method, route):
    mine = made(api, "alpha")["id"]
    unstored = made(api, "alpha", store=False)["id"]
    deleted = made(api, "alpha")["id"]
    assert request(api, "DELETE", f"/v1/responses/{deleted}")[0] == 200
    answers = [
        not_found_shape(api, method, route.format(mine), mine, tenant="beta"),  # another tenant's
        not_found_shape(api, method, route.format(deleted), deleted),
        not_found_shape(api, method, route.format(unstored), unstored),
        not_found_shape(api, method, route.format(NEVER), NEVER),
        not_found_shape(api, method, route.format(NEVER), NEVER, tenant="beta"),
    ]
    assert all(a == answers[0] for a in answers), answers
    # The other tenant's try changed nothing for the owner.
    assert request(api, "GET", f"/v1/responses/{mine}")[0] == 200


@pytest.mark.parametrize(("query", "code", "param"), [
    ("?stream=true", "unsupported_parameter", "stream"),
    ("?frobnicate=1", "unknown_parameter", "frobnicate"),
    ("?starting_after=-1", "invalid_value", "starting_after"),
])
def test_get_query_is_checked(api, query, code, param):
    rid = made(api)["id"]
    status, reply, _ = request(api, "GET", f"/v1/responses/{rid}{query}")
    assert status == 400 and (reply["error"]["code"], reply["error"]["param"]) == (code, param), reply


@pytest.mark.parametrize(("key", "status"), [("", 401), ("lw-not-a-key", 401), (KEYS["revoked"], 403)])
@pytest.mark.parametrize(("method", "route"), ROUTES)
def test_endpoints_need_a_valid_key(api, method, route, key, status):
    got, reply, _ = request(api, method, route.format(NEVER), b"" if method == "POST" else None, key=key)
    assert got == status and reply["error"]["type"] in ("authentication_error", "permission_error"), reply


# -- input items ------------------------------------------------------------------------------------

INPUT = [
    {"role": "developer", "content": "Be terse."},
    {"role": "user", "content": [{"type": "input_text", "text": "What is 2+3?"}]},
    {"type": "function_call", "call_id": "call_add", "name": "add", "arguments": '{"a":2,"b":3}'},
    {"type": "function_call_output", "call_id": "call_add", "output": "5"},
    {"role": "assistant", "phase": "final_answer", "content": "5."},
    {"role": "user", "content": "And 5+5?", "id": "msg_client_chosen"},
]


def listing(api, rid: str, query: str = "", tenant: str = "alpha") -> dict[str, Any]:
    status, page, _ = request(api, "GET", f"/v1/responses/{rid}/input_items{query}", key=KEYS[tenant])
    assert status == 200, page
    assert set(page) == {"object", "data", "first_id", "last_id", "has_more"} and page["object"] == "list"
    ids = [item["id"] for item in page["data"]]
    assert len(set(ids)) == len(ids) and (page["first_id"], page["last_id"]) == ((ids[0], ids[-1]) if ids
                                                                                 else (None, None))
    return page


def test_input_items_are_listed_newest_first_and_paginate(api):
    tools = [{"type": "function", "name": "add", "parameters": {"type": "object"}}]
    status, r, _ = request(api, "POST", "/v1/responses", json.dumps({
        "model": "loopwire", "input": INPUT, "tools": tools, "loopwire_replay": {"text": "10."}}))
    assert status == 200, r
    whole = listing(api, r["id"])
    assert whole["has_more"] is False and len(whole["data"]) == len(INPUT)
    data = whole["data"][::-1]  # desc by default
    assert [d["type"] for d in data] == ["message", "message", "function_call", "function_call_output", "message",
                                        "message"]
    assert data[0]["content"] == [{"type": "input_text", "text": "Be terse."}]  # a string became a part
    assert data[4]["content"] == [{"type": "output_text", "text": "5.", "annotations": []}] and data[4]["phase"] == "final_answer"
    assert data[5]["id"] == "msg_client_chosen" and all(d["status"] == "completed" for d in data)
    assert listing(api, r["id"], "?order=asc")["data"] == data
    # Pages of two, in both orders, join up to the whole list.
    for order, expected in (("asc", data), ("desc", data[::-1])):
        seen, after = [], ""
        while True:
            page = listing(api, r["id"], f"?order={order}&limit=2{after}")
            seen += page["data"]
            if not page["has_more"]:
                break
            assert len(page["data"]) == 2
            after = f"&after={page['last_id']}"
        assert seen == expected
    assert listing(api, r["id"], f"?after={whole['last_id']}")["data"] == []


def test_string_input_is_one_user_message(api):
    r = made(api, text="Just this.")
    page = listing(api, r["id"])
    assert len(page["data"]) == 1
    item = page["data"][0]
    assert (item["type"], item["role"], item["content"]) == ("message", "user",
                                                             [{"type": "input_text", "text": "Just this."}])
    assert item["id"].startswith("msg_")


def test_continuation_lists_its_own_input(api):
    first = made(api, text="One.")
    second = made(api, text="Two.", previous_response_id=first["id"])
    assert [i["content"][0]["text"] for i in listing(api, second["id"])["data"]] == ["Two."]


@pytest.mark.parametrize(("query", "code", "param"), [
    ("?limit=0", "invalid_value", "limit"),
    ("?limit=101", "invalid_value", "limit"),
    ("?limit=many", "invalid_value", "limit"),
    ("?order=sideways", "invalid_value", "order"),
    ("?after=msg_nowhere", "invalid_value", "after"),
    ("?cursor=1", "unknown_parameter", "cursor"),
])
def test_input_items_query_is_checked(api, query, code, param):
    rid = made(api)["id"]
    status, reply, _ = request(api, "GET", f"/v1/responses/{rid}/input_items{query}")
    assert status == 400 and (reply["error"]["code"], reply["error"]["param"]) == (code, param), reply


# -- delete ---------------------------------------------------------------------------------------


def test_delete_answers_the_deletion_object_and_the_response_is_gone(api):
    r = made(api)
    status, reply, _ = request(api, "DELETE", f"/v1/responses/{r['id']}", key=KEYS["beta"])
    assert status == 404  # not beta's to delete ...
    assert request(api, "GET", f"/v1/responses/{r['id']}")[0] == 200  # ... and still alpha's
    status, reply, _ = request(api, "DELETE", f"/v1/responses/{r['id']}")
    assert status == 200 and reply == {"id": r["id"], "object": "response", "deleted": True}
    for method, route in ROUTES:
        not_found_shape(api, method, route.format(r["id"]), r["id"])
    # Nor can it be continued through the api any more.
    status, reply, _ = request(api, "POST", "/v1/responses", create(previous_response_id=r["id"]))
    assert status == 400 and reply["error"]["code"] == "previous_response_not_found", reply


# -- previous_response_not_found, cancel of a finished response ------------------------------------


@pytest.mark.parametrize("tenant", ["alpha", "beta"])
def test_previous_response_not_found_is_400_over_http(api, tenant):
    theirs = made(api, "alpha")["id"] if tenant == "beta" else NEVER
    for previous in (theirs, made(api, "alpha", store=False)["id"] if tenant == "alpha" else NEVER):
        status, reply, _ = request(api, "POST", "/v1/responses", create(previous_response_id=previous),
                                   key=KEYS[tenant])
        assert status == 400, reply
        assert (reply["error"]["code"], reply["error"]["param"]) == ("previous_response_not_found",
                                                                     "previous_response_id")
    status, reply, _ = request(api, "POST", "/v1/responses", create(previous_response_id=NEVER, stream=True))
    assert status == 400 and reply["error"]["code"] == "previous_response_not_found"


def test_cancel_of_a_finished_response_is_an_error(api):
    r = made(api)
    status, reply, _ = request(api, "POST", f"/v1/responses/{r['id']}/cancel", b"")
    assert status == 400 and reply["error"]["type"] == "invalid_request_error", reply
    assert "completed" in reply["error"]["message"]
    assert request(api, "GET", f"/v1/responses/{r['id']}")[1]["status"] == "completed"


# -- WebSocket mode -------------------------------------------------------------------------------


def ws_turn(ws, **fields: Any) -> list[dict[str, Any]]:
    ws.send(json.dumps({"type": "response.create", "model": "loopwire", **fields}))
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] not in ("response.completed", "response.incomplete",
                                                   "response.failed", "error"):
        events.append(json.loads(ws.recv(timeout=60)))
    return events


def ws_connect(api, tenant: str = "alpha"):
    host, port = api.api.split(":")
    return connect(f"ws://{host}:{port}/v1/responses",
                   additional_headers={"authorization": f"Bearer {KEYS[tenant]}"})


def test_websocket_responses_are_stored_for_their_tenant(api):
    with ws_connect(api) as ws:
        events = ws_turn(ws, input="hi", loopwire_replay={"text": "hello"})
        unstored = ws_turn(ws, input="hi", store=False, loopwire_replay={"text": "hello"})[-1]["response"]["id"]
    check_stream(events)
    rid = events[-1]["response"]["id"]
    status, got, _ = request(api, "GET", f"/v1/responses/{rid}")
    assert status == 200 and got == events[-1]["response"]
    assert listing(api, rid)["data"][0]["content"] == [{"type": "input_text", "text": "hi"}]
    not_found_shape(api, "GET", f"/v1/responses/{rid}", rid, tenant="beta")
    not_found_shape(api, "GET", f"/v1/responses/{unstored}", unstored)


def test_failed_websocket_continuation_evicts_the_id(api):
    with ws_connect(api) as ws:
        first = ws_turn(ws, input="Tell me about Paris.", loopwire_replay={"text": "Paris is big."})[-1]["response"]
        # A continuation the gateway refuses (an output for a call nobody made) ...
        failed = ws_turn(ws, previous_response_id=first["id"], input=[
            {"type": "function_call_output", "call_id": "call_nobody", "output": "x"}])[-1]
        assert failed["type"] == "error" and failed["status"] == 400, failed
        # ... evicts the id it named from this connection: the client resends in full.
        again = ws_turn(ws, previous_response_id=first["id"], input="And Lyon?", loopwire_replay={"text": "x"})[-1]
        assert again["type"] == "error" and again["status"] == 400
        assert (again["error"]["code"], again["error"]["param"]) == ("previous_response_not_found",
                                                                      "previous_response_id")
        full = ws_turn(ws, input=[{"role": "user", "content": "Tell me about Paris."},
                                  {"role": "assistant", "content": "Paris is big."},
                                  {"role": "user", "content": "And Lyon?"}], loopwire_replay={"text": "Lyon too."})
        assert full[-1]["type"] == "response.completed"
    # Eviction is the connection's: the stored response still continues elsewhere.
    assert made(api, previous_response_id=first["id"])["previous_response_id"] == first["id"]
    with ws_connect(api) as ws:
        assert ws_turn(ws, previous_response_id=first["id"], input="More?",
                       loopwire_replay={"text": "ok"})[-1]["type"] == "response.completed"


def test_websocket_continuation_of_a_deleted_response_is_not_found(api):
    rid = made(api)["id"]
    assert request(api, "DELETE", f"/v1/responses/{rid}")[0] == 200
    with ws_connect(api) as ws:
        error = ws_turn(ws, previous_response_id=rid, input="more", loopwire_replay={"text": "x"})[-1]
    assert error["type"] == "error" and error["error"]["code"] == "previous_response_not_found"


# -- cancel in flight (a slow replica) ------------------------------------------------------------

LONG_PROMPT = "Summarize the following log line by line. " * 300  # seconds of prefill on the slow replica


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-endpoints-slow"), extra_args={
        "inference": ["--engine", "simulated", "--gpu", "l40s", "--model-params", "70b", "--kv-blocks", "4096",
                      "--time-scale", "1"],
        "api": ["--sse-keepalive-s", "0"],
    })
    yield m
    m.mesh.stop()


class StreamedRequest:
    """A streamed POST /v1/responses read on a thread, its events collected as they come."""

    def __init__(self, api, body: dict[str, Any]) -> None:
        host, port = api.api.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self.conn.request("POST", "/v1/responses", body=json.dumps(body), headers={
            "content-type": "application/json", "authorization": f"Bearer {KEYS['alpha']}"})
        self.reply = self.conn.getresponse()
        assert self.reply.status == 200
        self.created = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.id = ""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            data = b""
            for line in self.reply:
                data += line
                if line == b"\n":
                    self.events += sse_events(data)
                    data = b""
                    if self.events and not self.created.is_set():
                        self.id = self.events[0]["response"]["id"]
                        self.created.set()
        finally:
            self.created.set()
            self.conn.close()


def test_cancel_stops_a_response_in_flight(slow):
    stream = StreamedRequest(slow, {"model": "loopwire", "input": LONG_PROMPT, "stream": True})
    assert stream.created.wait(60) and stream.id
    rid = stream.id
    # While it runs: readable by its tenant only, and not cancellable by another.
    status, running, _ = request(slow, "GET", f"/v1/responses/{rid}")
    assert status == 200 and running["status"] == "in_progress"
    check_response(running)
    not_found_shape(slow, "GET", f"/v1/responses/{rid}", rid, tenant="beta")
    not_found_shape(slow, "POST", f"/v1/responses/{rid}/cancel", rid, tenant="beta")
    status, reply, _ = request(slow, "DELETE", f"/v1/responses/{rid}")
    assert status == 400 and "cancel it first" in reply["error"]["message"]
    status, cancelled, _ = request(slow, "POST", f"/v1/responses/{rid}/cancel", b"")
    assert status == 200, cancelled
    check_response(cancelled)
    assert cancelled["id"] == rid and cancelled["status"] == "cancelled"
    stream.thread.join(60)
    assert not stream.thread.is_alive()
    check_stream(stream.events)
    assert stream.events[-1]["response"]["status"] == "cancelled"
    for item in stream.events[-1]["response"]["output"]:
        check_item(item)
    assert request(slow, "GET", f"/v1/responses/{rid}")[1]["status"] == "cancelled"
    status, again, _ = request(slow, "POST", f"/v1/responses/{rid}/cancel", b"")
    assert status == 400 and "cancelled" in again["error"]["message"]


def test_cancel_of_an_unstored_response_in_flight_ends_it_but_reads_nothing_back(slow):
    stream = StreamedRequest(slow, {"model": "loopwire", "input": LONG_PROMPT, "stream": True, "store": False})
    assert stream.created.wait(60) and stream.id
    not_found_shape(slow, "GET", f"/v1/responses/{stream.id}", stream.id)
    status, cancelled, _ = request(slow, "POST", f"/v1/responses/{stream.id}/cancel", b"")
    assert status == 200 and cancelled["status"] == "cancelled" and cancelled["store"] is False
    stream.thread.join(60)
    assert stream.events[-1]["response"]["status"] == "cancelled"
    not_found_shape(slow, "GET", f"/v1/responses/{stream.id}", stream.id)
