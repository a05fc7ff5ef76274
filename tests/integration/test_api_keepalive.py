"""SSE keepalive during a long prefill: a slow replica (the simulated engine sleeping its modelled
step times, scaled up) and a front door with a short ``--sse-keepalive-s``. Comment lines flow
while the prompt is prefilled, and clients that parse SSE (the openai SDK) never see them."""

from __future__ import annotations

import http.client
import json
import re

import pytest
from api_mesh import KEYS, start_api_mesh
from openai import OpenAI

pytestmark = [pytest.mark.e2e]

# Prefill of this prompt on the simulated H200 + 8B is ~50 ms modelled, ~2.5 s at time scale 50:
# fifty times the keepalive interval, so keepalives come however loaded the machine is.
LONG_INPUT = "Summarize the following log line by line. " * 400
KEEPALIVE_S = 0.05
KEEPALIVE_LINE = b": keepalive\n"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-keepalive"), extra_args={
        "inference": ["--engine", "simulated", "--time-scale", "50"],
        "api": ["--sse-keepalive-s", str(KEEPALIVE_S)],
    })
    yield m
    m.mesh.stop()


def stream_lines(api, path: str, body: dict, stop: bytes) -> list[bytes]:
    """The raw lines of a streamed response, up to and including the first line starting with ``stop``."""
    host, port = api.api.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", path, body=json.dumps(body), headers={
        "content-type": "application/json", "authorization": f"Bearer {KEYS['alpha']}"})
    reply = conn.getresponse()
    assert reply.status == 200 and reply.getheader("content-type", "").startswith("text/event-stream")
    lines = []
    try:
        while line := reply.readline():
            lines.append(line)
            if line.startswith(stop):
                break
    finally:
        conn.close()
    return lines


def first(lines: list[bytes], prefix: bytes) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith(prefix))


def test_responses_stream_sends_comment_lines_while_the_prompt_prefills(api):
    lines = stream_lines(api, "/v1/responses", {"model": "loopwire", "input": LONG_INPUT, "stream": True,
                                                 "loopwire_replay": {"text": "A summary."}},
                         stop=b"event: response.completed")
    created, delta = first(lines, b"event: response.created"), first(lines, b"event: response.output_text.delta")
    keepalives = [i for i, line in enumerate(lines) if line == KEEPALIVE_LINE]
    assert keepalives and created < keepalives[0] < delta
    # Each keepalive is a whole SSE comment (blank line after it), never inside an event.
    assert all(lines[i + 1] == b"\n" and (i == 0 or lines[i - 1] == b"\n") for i in keepalives)


def test_chat_completions_stream_sends_them_too(api):
    lines = stream_lines(api, "/v1/chat/completions", {
        "model": "loopwire", "stream": True, "messages": [{"role": "user", "content": LONG_INPUT + " chat"}],
        "loopwire_replay": {"text": "Short."}}, stop=b"data: [DONE]")
    first_content = next(i for i, line in enumerate(lines) if re.search(rb'"content":"[^"]', line))
    assert any(line == KEEPALIVE_LINE for line in lines[:first_content])


def test_the_openai_sdk_streams_through_keepalives(api):
    client = OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0)
    events = list(client.responses.create(model="loopwire", input=LONG_INPUT + " sdk", stream=True,
                                          extra_body={"loopwire_replay": {"text": "Fine."}}))
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Fine."
    assert [e.sequence_number for e in events] == list(range(len(events)))
