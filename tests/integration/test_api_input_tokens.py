"""``POST /v1/responses/input_tokens`` counts what the request's prompt would be: the same number
the response then reports as its ``usage.input_tokens`` (fresh and continued), and another
tenant's or an unknown ``previous_response_id`` answers the same 400."""

from __future__ import annotations

import json

import pytest
from api_mesh import KEYS, start_api_mesh
from test_api_conformance import request

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-input-tokens"))
    yield m
    m.mesh.stop()


def count(api, tenant: str = "alpha", **fields) -> tuple[int, dict]:  # noqa: ANN003
    status, reply, _ = request(api, "POST", "/v1/responses/input_tokens",
                               json.dumps({"model": "loopwire", **fields}), key=KEYS[tenant])
    return status, reply


def respond(api, **fields) -> dict:  # noqa: ANN003
    status, reply, _ = request(api, "POST", "/v1/responses", json.dumps({"model": "loopwire", **fields}))
    assert status == 200, reply
    return reply


def test_the_count_is_the_prompt_the_response_then_takes(api):
    fields = {"instructions": "Answer in one word.", "input": "Capital of France?",
              "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {
                  "city": {"type": "string"}}, "required": ["city"]}}]}
    status, counted = count(api, **fields)
    assert status == 200 and counted["object"] == "response.input_tokens", counted
    first = respond(api, **fields, loopwire_replay={"text": "Paris."})
    assert counted["input_tokens"] == first["usage"]["input_tokens"] > 0
    follow = {"previous_response_id": first["id"], "input": "And of Italy?"}
    status, counted = count(api, **follow)
    assert status == 200
    second = respond(api, **follow, loopwire_replay={"text": "Rome."})
    assert counted["input_tokens"] == second["usage"]["input_tokens"] > first["usage"]["input_tokens"]


def test_another_tenants_id_reads_as_an_unknown_one(api):
    mine = respond(api, input="hello", loopwire_replay={"text": "hi"})
    theirs = count(api, "beta", previous_response_id=mine["id"], input="x")
    never = count(api, "beta", previous_response_id="resp_" + "0" * 32, input="x")
    assert theirs[0] == never[0] == 400
    assert theirs[1]["error"]["code"] == never[1]["error"]["code"] == "previous_response_not_found"
    assert count(api, previous_response_id=mine["id"], input="x")[0] == 200


@pytest.mark.parametrize("fields,param", [({"stream": True, "input": "x"}, "stream"),
                                          ({"input": [{"type": "function_call_output", "call_id": "c9",
                                                       "output": "x"}]}, None)])
def test_bad_requests_are_400(api, fields, param):
    status, reply = count(api, **fields)
    assert status == 400, reply
    if param:
        assert reply["error"]["param"] == param
