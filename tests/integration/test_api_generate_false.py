"""``generate: false`` in WebSocket mode prefills the held prompt through the real mesh (gateway
and a dummy-model replica), so the request continuing it finds that prompt in the replica's
prefix cache: its ``usage.input_tokens_details.cached_tokens`` covers the held prompt."""

from __future__ import annotations

import json
import secrets

import pytest
from api_mesh import sdk, start_api_mesh, until_end
from test_api_conformance import request

pytestmark = [pytest.mark.e2e]

BLOCK = 16  # the replica's KV block: the prefix cache hits whole blocks


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-generate-false"))
    yield m
    m.mesh.stop()


def context_text() -> str:
    """A prompt no other test sent (the replica's cache is shared by the module)."""
    return f"Context {secrets.token_hex(4)}: the answer is 42. " * 30


def counted(api, body: dict) -> int:
    status, reply, raw = request(api, "POST", "/v1/responses/input_tokens", json.dumps(body))
    assert status == 200, raw
    return reply["input_tokens"]


def test_the_held_prompt_is_cached_for_the_request_that_continues_it(api):
    held_input = [{"role": "user", "content": context_text()}]
    prompt = counted(api, {"model": "loopwire", "instructions": "Be brief.", "input": held_input})
    with sdk(api).responses.connect() as conn:
        conn.send({"type": "response.create", "model": "loopwire", "instructions": "Be brief.", "input": held_input,
                   "generate": False})
        held_events = until_end(conn)
        held = held_events[-1].response
        assert [e.type for e in held_events] == ["response.created", "response.completed"]
        assert held.status == "completed" and held.output == [] and held.usage.output_tokens == 0
        # The prefill ran on a replica: the gateway tokenized the whole held prompt.
        assert held.model_extra["loopwire"]["tokens_tokenized"] > 0 and held.model_extra["loopwire"]["replica"]
        conn.send({"type": "response.create", "model": "loopwire", "previous_response_id": held.id,
                   "input": [{"role": "user", "content": "What is the answer?"}],
                   "loopwire_replay": {"text": "42"}})
        answer = until_end(conn)[-1].response
    assert answer.output_text == "42"
    # The held prompt (less the generation prompt after it, and the partial last block) was cached.
    assert answer.usage.input_tokens > prompt
    assert answer.usage.input_tokens_details.cached_tokens >= (prompt - 8) // BLOCK * BLOCK > 0, answer.usage


def test_without_generate_false_the_same_prompt_is_not_cached(api):
    """The control: the same two requests' content sent as one, on a cold cache, caches nothing of it."""
    with sdk(api).responses.connect() as conn:
        conn.send({"type": "response.create", "model": "loopwire", "instructions": "Be brief.",
                   "input": [{"role": "user", "content": context_text()},
                             {"role": "user", "content": "What is the answer?"}],
                   "loopwire_replay": {"text": "42"}})
        answer = until_end(conn)[-1].response
    assert answer.usage.input_tokens_details.cached_tokens < answer.usage.input_tokens // 4, answer.usage


def test_a_held_continuation_of_a_stored_response_is_cached_past_it(api):
    c = sdk(api)
    root = c.responses.create(model="loopwire", input=context_text(), extra_body={"loopwire_replay": {
        "text": "Noted."}})
    more = [{"role": "user", "content": context_text()}]
    with c.responses.connect() as conn:
        conn.send({"type": "response.create", "model": "loopwire", "previous_response_id": root.id, "input": more,
                   "generate": False})
        held = until_end(conn)[-1].response
        assert held.status == "completed"
        conn.send({"type": "response.create", "model": "loopwire", "previous_response_id": held.id,
                   "input": [{"role": "user", "content": "And now?"}], "loopwire_replay": {"text": "42"}})
        answer = until_end(conn)[-1].response
    assert answer.output_text == "42" and answer.previous_response_id == held.id
    # cached past the root's prompt and output: most of the held items too
    assert answer.usage.input_tokens_details.cached_tokens > root.usage.input_tokens + 200, answer.usage
    # The root still continues as stored (the prefill made an unstored response, not a turn of it).
    again = c.responses.create(model="loopwire", previous_response_id=root.id, input="Again?",
                               extra_body={"loopwire_replay": {"text": "Yes."}})
    assert again.output_text == "Yes." and again.usage.input_tokens < answer.usage.input_tokens


def test_a_held_request_that_cannot_run_is_an_error_at_once(api):
    with sdk(api).responses.connect() as conn:
        conn.send({"type": "response.create", "model": "loopwire", "previous_response_id": "resp_feedfacefeedface",
                   "input": "hi", "generate": False})
        error = until_end(conn)[-1]
        assert error.type == "error" and error.error.code == "previous_response_not_found"
        conn.send({"type": "response.create", "model": "loopwire", "input": "hi", "loopwire_replay": {"text": "ok"}})
        assert until_end(conn)[-1].response.output_text == "ok"
