"""Log-probabilities and reasoning-token usage through the real api process: the mesh serves the
dummy model on the reference engine (real logits), and every way a client asks is checked:
Responses over HTTP (whole and SSE), WebSocket mode, Chat Completions (whole and streamed), and
the official openai SDK's typed objects.

What is checked holds whatever the random weights say: each entry's bytes are its token's, the
entries' bytes spell exactly the text they came with (per delta and per part), ``top_logprobs``
has the asked count, most likely first, with the chosen token first at temperature 0, and one
prompt gives the same entries in every mode."""

from __future__ import annotations

import codecs
import http.client
import json
import math
from typing import Any

import pytest
from api_mesh import ENDS, KEYS, start_api_mesh
from openai import OpenAI
from websockets.sync.client import connect

pytestmark = [pytest.mark.e2e]

INCLUDE = ["message.output_text.logprobs"]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-logprobs"))
    yield m
    m.mesh.stop()


def _conn(api) -> http.client.HTTPConnection:
    host, port = api.api.split(":")
    return http.client.HTTPConnection(host, int(port), timeout=60)


def _headers() -> dict[str, str]:
    return {"content-type": "application/json", "authorization": f"Bearer {KEYS['alpha']}"}


def post(api, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    conn = _conn(api)
    conn.request("POST", path, body=json.dumps(body), headers=_headers())
    reply = conn.getresponse()
    data = json.loads(reply.read())
    conn.close()
    return reply.status, data


def sse(api, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``data:`` payloads of a streamed reply, up to its end (``[DONE]`` or the stream closing)."""
    conn = _conn(api)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}), headers=_headers())
    reply = conn.getresponse()
    assert reply.status == 200, reply.read()
    out = []
    for raw in reply:
        line = raw.decode().rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            break
        out.append(json.loads(data))
    conn.close()
    return out


def websocket(api, body: dict[str, Any]) -> list[dict[str, Any]]:
    host, port = api.api.split(":")
    with connect(f"ws://{host}:{port}/v1/responses",
                 additional_headers={"authorization": f"Bearer {KEYS['alpha']}"}) as ws:
        ws.send(json.dumps({"type": "response.create", **body}))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in ENDS:
            events.append(json.loads(ws.recv(timeout=60)))
    return events


def responses_body(prompt: str, k: int | None = 3, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "loopwire", "input": prompt, "temperature": 0, "max_output_tokens": 12, **fields}
    if k is not None:
        body.update(include=INCLUDE, top_logprobs=k)
    return body


def chat_body(prompt: str, k: int | None = 3, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "loopwire", "messages": [{"role": "user", "content": prompt}],
                            "temperature": 0, "max_tokens": 12, **fields}
    if k is not None:
        body.update(logprobs=True, top_logprobs=k)
    return body


def spelled(entries: list[dict[str, Any]]) -> str:
    """The text the entries' bytes make, as the gateway decodes output (a byte that is no part of
    a whole character is U+FFFD: the random weights do emit such tokens)."""
    return b"".join(bytes(e["bytes"]) for e in entries).decode("utf-8", "replace")


def check_pieces(pieces: list[tuple[str, list[dict[str, Any]]]]) -> None:
    """Streamed (text, entries) pieces: each piece's entries are the tokens that released its
    text, so decoding their bytes piece by piece (a character split over tokens comes out with its
    last byte; the end flushes what is left) gives each piece's text exactly."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for n, (text, entries) in enumerate(pieces):
        assert decoder.decode(b"".join(bytes(e["bytes"]) for e in entries), final=n == len(pieces) - 1) == text


def check_entries(entries: list[dict[str, Any]], k: int) -> None:
    """Each entry well formed: its token is its bytes, a log-probability, ``k`` alternatives most
    likely first whose probabilities sum to at most 1, the chosen token first (greedy)."""
    for e in entries:
        assert e["token"] == bytes(e["bytes"]).decode("utf-8", "backslashreplace")
        assert e["logprob"] <= 0.0
        top = e["top_logprobs"]
        assert len(top) == k
        values = [c["logprob"] for c in top]
        assert values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1.0 + 1e-6
        for c in top:
            assert c["token"] == bytes(c["bytes"]).decode("utf-8", "backslashreplace")
        if k:
            assert (top[0]["bytes"], top[0]["logprob"]) == (e["bytes"], e["logprob"])


def message_part(response: dict[str, Any]) -> dict[str, Any]:
    [message] = [item for item in response["output"] if item["type"] == "message"]
    [part] = message["content"]
    assert part["type"] == "output_text"
    return part


def check_response(response: dict[str, Any], k: int) -> list[dict[str, Any]]:
    part = message_part(response)
    assert part["text"] and spelled(part["logprobs"]) == part["text"]
    check_entries(part["logprobs"], k)
    usage = response["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0  # no think block
    # One entry per output token of the text: all of them when the cap ended it, all but the
    # stop token (no entry) when the model stopped.
    if response["status"] == "incomplete":
        assert response["incomplete_details"]["reason"] == "max_output_tokens"
        assert len(part["logprobs"]) == usage["output_tokens"]
    else:
        assert response["status"] == "completed" and len(part["logprobs"]) == usage["output_tokens"] - 1
    assert response["top_logprobs"] == k
    return part["logprobs"]


def check_stream(events: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """A streamed response: every delta's entries spell that delta, the done event and the final
    part hold them all, in order."""
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas
    check_pieces([(d["delta"], d["logprobs"]) for d in deltas])
    streamed = [entry for d in deltas for entry in d["logprobs"]]
    [done] = [e for e in events if e["type"] == "response.output_text.done"]
    assert done["logprobs"] == streamed and spelled(streamed) == done["text"]
    final = events[-1]
    assert final["type"] in ("response.incomplete", "response.completed")
    assert check_response(final["response"], k) == streamed
    return streamed


def same_values(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    """One prompt, two ways of asking: the same tokens and alternatives, the same values (to the
    rounding a prefix-cache hit may bring)."""
    assert [e["bytes"] for e in a] == [e["bytes"] for e in b]
    assert [[c["bytes"] for c in e["top_logprobs"]] for e in a] == [[c["bytes"] for c in e["top_logprobs"]] for e in b]
    assert [e["logprob"] for e in a] == pytest.approx([e["logprob"] for e in b], abs=1e-4)


def test_responses_logprobs_spell_the_text_over_http_sse_and_websocket(api):
    body = responses_body("Tell me about rivers.", 3)
    status, whole = post(api, "/v1/responses", body)
    assert status == 200, whole
    plain = check_response(whole, 3)
    streamed = check_stream(sse(api, "/v1/responses", body), 3)
    over_ws = check_stream(websocket(api, body), 3)
    same_values(plain, streamed)
    same_values(plain, over_ws)


@pytest.mark.parametrize("k", [0, 1, 20])
def test_top_logprobs_count_is_what_was_asked(api, k):
    status, r = post(api, "/v1/responses", responses_body(f"Count {k} sheep.", k))
    assert status == 200, r
    check_response(r, k)


def test_chat_completions_logprobs_whole_and_streamed(api):
    body = chat_body("Tell me about lakes.", 3)
    status, whole = post(api, "/v1/chat/completions", body)
    assert status == 200, whole
    [choice] = whole["choices"]
    entries = choice["logprobs"]["content"]
    assert spelled(entries) == choice["message"]["content"]
    check_entries(entries, 3)
    assert len(entries) == whole["usage"]["completion_tokens"] - (choice["finish_reason"] == "stop")
    assert whole["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0

    chunks = sse(api, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    pieces = [(c["delta"]["content"], c["logprobs"]["content"])
              for chunk in chunks for c in chunk["choices"] if c["delta"].get("content")]
    check_pieces(pieces)
    streamed = [entry for _, entries in pieces for entry in entries]
    assert "".join(text for text, _ in pieces) == choice["message"]["content"] == spelled(streamed)
    same_values(entries, streamed)
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


def test_nothing_unless_asked(api):
    # top_logprobs 0 without the include asks for nothing either.
    for body in (responses_body("Say hi.", None), responses_body("Say hi.", None, top_logprobs=0)):
        status, r = post(api, "/v1/responses", body)
        assert status == 200, r
        assert message_part(r)["text"] and message_part(r)["logprobs"] == []
        assert r["top_logprobs"] == 0 and r["usage"]["output_tokens_details"]["reasoning_tokens"] == 0
    events = sse(api, "/v1/responses", responses_body("Say hi.", None))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all(d["logprobs"] == [] for d in deltas)
    status, c = post(api, "/v1/chat/completions", chat_body("Say hi.", None))
    assert status == 200 and c["choices"][0]["message"]["content"] and c["choices"][0]["logprobs"] is None
    status, c = post(api, "/v1/chat/completions", chat_body("Say hi.", None, logprobs=False))
    assert status == 200 and c["choices"][0]["logprobs"] is None
    chunks = sse(api, "/v1/chat/completions", chat_body("Say hi.", None))
    assert all(ch["logprobs"] is None for chunk in chunks for ch in chunk["choices"])


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/responses", responses_body("x", 21), "top_logprobs"),
    ("/v1/responses", responses_body("x", -1), "top_logprobs"),
    ("/v1/responses", responses_body("x", None, top_logprobs="3"), "top_logprobs"),
    ("/v1/chat/completions", chat_body("x", 21), "top_logprobs"),
    ("/v1/chat/completions", chat_body("x", -1), "top_logprobs"),
    ("/v1/chat/completions", chat_body("x", None, top_logprobs=3), "top_logprobs"),
    ("/v1/chat/completions", chat_body("x", None, logprobs=False, top_logprobs=3), "top_logprobs"),
    ("/v1/chat/completions", chat_body("x", None, logprobs="yes"), "logprobs"),
])
def test_bad_logprobs_parameters_are_400_naming_them(api, path, body, param):
    status, r = post(api, path, body)
    assert status == 400, r
    assert r["error"]["param"] == param and r["error"]["type"] == "invalid_request_error"


def test_openai_sdk_parses_logprobs_and_reasoning_tokens(api):
    client = OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0)
    r = client.responses.create(model="loopwire", input="Name a colour.", temperature=0, max_output_tokens=8,
                                include=["message.output_text.logprobs"], top_logprobs=3)
    part = r.output[0].content[0]
    assert part.type == "output_text" and part.text == r.output_text
    assert part.logprobs and b"".join(bytes(lp.bytes) for lp in part.logprobs).decode("utf-8", "replace") == part.text
    for lp in part.logprobs:
        assert len(lp.top_logprobs) == 3 and lp.top_logprobs[0].token == lp.token
        assert lp.top_logprobs[0].logprob == lp.logprob <= 0.0
    assert r.usage.output_tokens_details.reasoning_tokens == 0 and r.top_logprobs == 3

    c = client.chat.completions.create(model="loopwire", messages=[{"role": "user", "content": "Name a colour."}],
                                       temperature=0, max_tokens=8, logprobs=True, top_logprobs=3)
    choice = c.choices[0]
    content = choice.logprobs.content
    assert content and b"".join(bytes(t.bytes) for t in content).decode("utf-8", "replace") == choice.message.content
    for t in content:
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token and t.logprob <= 0.0
    assert c.usage.completion_tokens_details.reasoning_tokens == 0
