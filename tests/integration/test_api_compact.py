"""``POST /v1/responses/compact`` on the real mesh: the ``response.compaction`` object (kept user
messages and one ``compaction`` item whose summary the model wrote through the gateway, from the
harness's prompt), its id continuing as a ``previous_response_id`` and its items continuing in
``input``, the summary call extending the held prefix, a summary the model botches (a loop, empty,
cut at its cap) replaced by the masked conversation rather than an error, and as an attacker with
two tenants sees it: another tenant's, a deleted, a ``store: false`` and an unknown id answer
alike."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_mesh import KEYS, sdk, start_api_mesh, until_end
from test_api_conformance import check_response, request

from loopwire.api.compact import SUMMARY_TOKENS
from loopwire.api.items import compaction_summary
from loopwire.common.summaries import SUMMARY_INSTRUCTIONS, SUMMARY_REQUEST

pytestmark = [pytest.mark.e2e]

SUMMARY = "The user asked for the weather in Paris; get_weather reported 18C and sunny. Nothing is left to do."
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"},
    {"role": "assistant", "content": "It is 18C and sunny in Paris."},
    {"role": "user", "content": "Thanks. Should I take an umbrella?"},
]
NEVER = "resp_" + "0" * 32


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-compact"))
    yield m
    m.mesh.stop()


def post(api, path: str, tenant: str = "alpha", **body: Any) -> tuple[int, dict[str, Any]]:
    status, reply, _ = request(api, "POST", path, json.dumps(body), key=KEYS[tenant])
    return status, reply


def compact(api, tenant: str = "alpha", reply: str = SUMMARY, **body: Any) -> dict[str, Any]:
    status, r = post(api, "/v1/responses/compact", tenant, model="loopwire", loopwire_replay={"text": reply}, **body)
    assert status == 200, r
    return r


def count(api, **body: Any) -> int:
    status, reply = post(api, "/v1/responses/input_tokens", model="loopwire", **body)
    assert status == 200, reply
    return reply["input_tokens"]


def test_compaction_object_keeps_user_messages_and_the_models_summary(api):
    r = compact(api, input=HISTORY, tools=[WEATHER], instructions="Be brief.")
    assert r["object"] == "response.compaction" and r["id"].startswith("resp_")
    users, item = r["output"][:-1], r["output"][-1]
    assert [u["content"] for u in users] == [[{"type": "input_text", "text": HISTORY[0]["content"]}],
                                            [{"type": "input_text", "text": HISTORY[4]["content"]}]]
    assert all(u["role"] == "user" and u["status"] == "completed" for u in users)
    assert set(item) == {"type", "id", "encrypted_content"} and item["type"] == "compaction"
    assert compaction_summary(item["encrypted_content"]) == SUMMARY
    assert r["loopwire_compaction"] == {"method": "summary"}
    # The summary call was the conversation with the harness's request as its last user turn.
    asked = count(api, input=[*HISTORY, {"role": "user", "content": f"{SUMMARY_INSTRUCTIONS}\n\n{SUMMARY_REQUEST}"}],
                  tools=[WEATHER], instructions="Be brief.")
    u = r["usage"]
    assert u["input_tokens"] == asked and u["output_tokens"] > 0
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"]


def test_compacted_id_and_items_continue_the_conversation(api):
    r = compact(api, input=HISTORY)
    follow = [{"role": "user", "content": "And tomorrow?"}]
    full = count(api, input=[*r["output"], *follow])
    status, by_id = post(api, "/v1/responses", model="loopwire", previous_response_id=r["id"], input=follow,
                         loopwire_replay={"text": "Rain."})
    assert status == 200, by_id
    check_response(by_id)
    assert by_id["previous_response_id"] == r["id"] and by_id["usage"]["input_tokens"] == full
    status, page, _ = request(api, "GET", f"/v1/responses/{by_id['id']}/input_items?order=asc")
    assert [i["type"] for i in page["data"]] == ["message", "message", "compaction", "message"], page
    # The response made from it is an ordinary one: the gateway continues it.
    status, next_turn = post(api, "/v1/responses", model="loopwire", previous_response_id=by_id["id"],
                             input="Thanks.", loopwire_replay={"text": "Bye."})
    assert status == 200 and next_turn["usage"]["input_tokens"] > full, next_turn
    # A client that keeps its own history sends the items instead: the same prompt.
    status, by_items = post(api, "/v1/responses", model="loopwire", store=False, input=[*r["output"], *follow],
                            loopwire_replay={"text": "Rain."})
    assert status == 200 and by_items["usage"]["input_tokens"] == full, by_items
    # The id also names the compaction to count from.
    assert count(api, previous_response_id=r["id"], input=follow) == full


def test_compacting_a_stored_chain_extends_its_cached_prefix(api):
    task = "Plan a trip to Paris. " + " ".join(f"Step {i}: visit place number {i}." for i in range(60))
    status, first = post(api, "/v1/responses", model="loopwire", input=task, loopwire_replay={"text": "Done."})
    assert status == 200, first
    r = compact(api, previous_response_id=first["id"])
    assert r["output"][0]["content"] == [{"type": "input_text", "text": task}]  # found in the stored chain
    assert r["output"][-1]["type"] == "compaction"
    u = r["usage"]
    assert u["input_tokens"] > first["usage"]["input_tokens"]
    assert u["input_tokens_details"]["cached_tokens"] >= first["usage"]["input_tokens"] // 2, u
    # A compaction of a compaction: its items and the chain's user messages are kept.
    again = compact(api, previous_response_id=r["id"], input="Also Lyon.")
    assert [i["type"] for i in again["output"]] == ["message", "message", "compaction"]
    assert again["output"][1]["content"][0]["text"] == "Also Lyon."


def not_found(api, tenant: str, **body: Any) -> dict[str, Any]:
    status, reply = post(api, "/v1/responses/compact", tenant, model="loopwire", loopwire_replay={"text": SUMMARY},
                         **body)
    assert status == 400 and reply["error"]["code"] == "previous_response_not_found", reply
    return {**reply["error"], "message": reply["error"]["message"].replace(body["previous_response_id"], "<id>")}


def test_ids_of_other_tenants_deleted_unstored_and_unknown_answer_alike(api):
    status, mine = post(api, "/v1/responses", model="loopwire", input="hi", loopwire_replay={"text": "hello"})
    assert status == 200
    compaction = compact(api, input="hi")["id"]
    deleted = compact(api, input="hi")["id"]
    assert request(api, "DELETE", f"/v1/responses/{deleted}")[0] == 200
    unstored = compact(api, input="hi", store=False)["id"]
    answers = [not_found(api, "beta", previous_response_id=mine["id"]),
               not_found(api, "beta", previous_response_id=compaction),
               not_found(api, "alpha", previous_response_id=deleted),
               not_found(api, "alpha", previous_response_id=unstored),
               not_found(api, "alpha", previous_response_id=NEVER)]
    assert all(a == answers[0] for a in answers), answers
    status, reply = post(api, "/v1/responses", "beta", model="loopwire", previous_response_id=compaction, input="x")
    assert status == 400 and reply["error"]["code"] == "previous_response_not_found", reply
    # A compaction is no response: GET answers as for an unknown id; its owner still continues it.
    for path in (f"/v1/responses/{compaction}", f"/v1/responses/{compaction}/input_items"):
        got, reply, _ = request(api, "GET", path)
        assert got == 404 and reply["error"]["code"] == "not_found", reply
    assert post(api, "/v1/responses", model="loopwire", previous_response_id=compaction, input="x",
                loopwire_replay={"text": "y"})[0] == 200


@pytest.mark.parametrize(("body", "status", "code", "param"), [
    ({"input": "hi", "stream": True}, 400, "unknown_parameter", "stream"),
    ({"input": "hi", "frobnicate": 1}, 400, "unknown_parameter", "frobnicate"),
    ({"model": None, "input": "hi"}, 400, "missing_required_parameter", "model"),
    ({"model": "gpt-9", "input": "hi"}, 404, "model_not_found", "model"),
    ({"input": [{"type": "compaction", "encrypted_content": "gAAAAABpM0Yj"}]}, 400, "invalid_value",
     "input[0].encrypted_content"),
    ({"input": [{"type": "compaction", "encrypted_content": 7}]}, 400, "invalid_type", "input[0].encrypted_content"),
    ({"input": 5}, 400, "invalid_type", "input"),
])
def test_bad_requests_get_openai_errors(api, body, status, code, param):
    sent = {"model": "loopwire", **body}
    if sent["model"] is None:
        del sent["model"]
    got, reply, _ = request(api, "POST", "/v1/responses/compact", json.dumps(sent))
    assert got == status, reply
    assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert (reply["error"]["code"], reply["error"]["param"]) == (code, param)


LOG = "\n".join(f"build step {i}: compiled module_{i}.c with 0 warnings" for i in range(300))
WORK = [  # a tool output the model read (then elided), and one it has not read yet (kept)
    {"role": "user", "content": "Build the project and tell me what fails."},
    {"type": "function_call", "call_id": "call_b", "name": "shell", "arguments": '{"command": "make"}'},
    {"type": "function_call_output", "call_id": "call_b", "output": LOG},
    {"role": "assistant", "content": "The build passed; now the tests."},
    {"role": "user", "content": "Run the tests too."},
    {"type": "function_call", "call_id": "call_t", "name": "shell", "arguments": '{"command": "make test"}'},
    {"type": "function_call_output", "call_id": "call_t", "output": "FAILED test_parse: expected 3, got 4"},
]


@pytest.mark.parametrize(("reply", "reason"), [
    ("The task is still open. " * 8, "repeats itself"),
    (" ".join(f"{i}. {i}. {i}." for i in range(1, 40)), "repeats itself"),  # a counting loop
    ("", "no text"),
    (" ".join(f"word{i}" for i in range(3 * SUMMARY_TOKENS)), f"{SUMMARY_TOKENS}-token output cap"),
])
def test_a_degenerate_summary_falls_back_to_the_masked_conversation(api, reply, reason):
    r = compact(api, reply=reply, input=WORK)
    assert r["loopwire_compaction"]["method"] == "masked", r["loopwire_compaction"]
    assert reason in r["loopwire_compaction"]["reason"]
    assert r["usage"]["output_tokens"] <= SUMMARY_TOKENS  # the summary call was cut at its cap
    users, item = r["output"][:-1], r["output"][-1]
    assert [u["content"] for u in users] == [[{"type": "input_text", "text": WORK[0]["content"]}],
                                            [{"type": "input_text", "text": WORK[4]["content"]}]]
    text = compaction_summary(item["encrypted_content"])
    assert text.startswith("[No summary was written (") and reason in text.splitlines()[0]
    assert "[output of call call_b (shell), " in text and "module_299" not in text  # read: elided
    assert "FAILED test_parse: expected 3, got 4" in text  # not read yet: kept
    assert "assistant: The build passed; now the tests." in text and 'call shell (call_t): {"command": "make test"}' in text
    assert WORK[0]["content"] not in text and WORK[4]["content"] not in text  # kept beside it, not twice
    # It continues the conversation as a summary would.
    status, follow = post(api, "/v1/responses", model="loopwire", previous_response_id=r["id"], input="Fix it.",
                          loopwire_replay={"text": "Fixed."})
    assert status == 200 and follow["output"][-1]["content"][0]["text"] == "Fixed.", follow


def test_a_degenerate_summary_of_a_stored_chain_masks_the_whole_chain(api):
    status, first = post(api, "/v1/responses", model="loopwire", input=WORK[:3], loopwire_replay={"text": WORK[3]["content"]})
    assert status == 200, first
    r = compact(api, reply="", previous_response_id=first["id"], input=WORK[4:])
    assert r["loopwire_compaction"]["method"] == "masked"
    assert [u["content"][0]["text"] for u in r["output"][:-1]] == [WORK[0]["content"], WORK[4]["content"]]
    text = compaction_summary(r["output"][-1]["encrypted_content"])
    assert "[output of call call_b (shell), " in text and "FAILED test_parse" in text
    assert "assistant: The build passed; now the tests." in text  # the stored response's own output
    # Compacting the compaction again: its masked text is the earlier turns' summary, once.
    again = compact(api, reply="", previous_response_id=r["id"], input="And the docs?")
    text = compaction_summary(again["output"][-1]["encrypted_content"])
    assert text.count("summary of earlier turns: [No summary was written") == 1, text



def test_a_websocket_chain_compacts_with_a_degenerate_summary(api):
    turn = {"type": "response.create", "model": "loopwire"}
    with sdk(api).responses.connect() as conn:
        conn.send({**turn, "input": [WORK[0]], "loopwire_replay": {"text": "Building now."}})
        first = until_end(conn)[-1].response
        conn.send({**turn, "input": [{"role": "user", "content": "Any warnings?"}], "previous_response_id": first.id,
                   "loopwire_replay": {"text": "None at all."}})
        second = until_end(conn)[-1].response
    r = compact(api, reply="1. 1. 1. 2. 2. 2. " * 20, previous_response_id=second.id)
    assert r["loopwire_compaction"]["method"] == "masked" and "repeats itself" in r["loopwire_compaction"]["reason"]
    assert [u["content"][0]["text"] for u in r["output"][:-1]] == [WORK[0]["content"], "Any warnings?"]
    text = compaction_summary(r["output"][-1]["encrypted_content"])
    assert text.endswith("assistant: Building now.\nassistant: None at all."), text
