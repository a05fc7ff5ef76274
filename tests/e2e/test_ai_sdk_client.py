"""The Vercel AI SDK, a client no one here wrote, against `loopwire api` on a real mesh: generateText,
streamText and a tool round trip (a zod-typed function tool the SDK runs itself, its result sent back
for the final answer) through three providers: @ai-sdk/open-responses and @ai-sdk/openai's Responses
model (POST /v1/responses) and @ai-sdk/openai's chat model (POST /v1/chat/completions).
tests/ai_sdk/run.mjs makes the calls and prints what came back; the api replays recorded turns
(`loopwire api --replay`), so outputs are deterministic while the engine does the real work."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
from api_mesh import KEYS, start_api_mesh, start_extra_api
from required import missing, require_tool

pytestmark = [pytest.mark.e2e]

AI_SDK = Path(__file__).resolve().parents[1] / "ai_sdk"
ANSWER = "Paris."
STREAMED = "Paris is the capital of France."
FINAL = "It is sunny in Paris."
# The script's calls in order: generateText, streamText, then the tool call and the answer after its result.
REPLAY = [
    {"text": ANSWER},
    {"text": STREAMED},
    {"function_calls": [{"call_id": "call_weather", "name": "get_weather", "arguments": '{"city": "Paris"}'}]},
    {"text": FINAL},
]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-ai-sdk"))
    yield m
    m.mesh.stop()


def run_script(api, provider: str) -> dict:
    node = require_tool("node", why="Node.js is not installed (the AI SDK tests run tests/ai_sdk/run.mjs with it)")
    if not (AI_SDK / "node_modules" / "ai" / "package.json").exists():
        missing("the AI SDK is not installed: scripts/install_tools.sh runs npm ci in tests/ai_sdk")
    proc, address = start_extra_api(api, REPLAY, f"ai-sdk-{provider}")
    env = {"PATH": os.environ["PATH"], "LOOPWIRE_BASE_URL": f"http://{address}/v1", "LOOPWIRE_API_KEY": KEYS["alpha"]}
    try:
        out = subprocess.run([node, "run.mjs", provider], cwd=AI_SDK, env=env, capture_output=True, text=True,
                             timeout=180, stdin=subprocess.DEVNULL)
    finally:
        proc.terminate()
        proc.wait(15)
    assert out.returncode == 0, out.stderr[-4000:]
    lines = out.stdout.strip().splitlines()
    assert lines, out.stderr[-4000:]
    return json.loads(lines[-1])


def tool_result_sent(body: dict, call_id: str, output: str) -> bool:
    """Whether a request body carries ``call_id``'s result: a function_call_output item (Responses)
    or a tool message (chat completions)."""
    for item in body.get("input", []):
        if item.get("type") == "function_call_output" and item.get("call_id") == call_id:
            return item.get("output") == output or output in json.dumps(item.get("output"))
    for message in body.get("messages", []):
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            return output in json.dumps(message.get("content"))
    return False


def tool_schema(body: dict, name: str) -> dict:
    """The parameters schema the SDK sent for the function tool ``name``."""
    for t in body["tools"]:
        fn = t.get("function", t)  # chat completions nests it under "function"
        if fn.get("name") == name:
            return fn["parameters"]  # type: ignore[no-any-return]
    raise AssertionError(f"tool {name} not in the request: {body['tools']}")


@pytest.mark.parametrize("provider", ["open-responses", "openai-responses", "openai-chat"])
def test_ai_sdk_generate_stream_and_tool_round_trip(api, provider):
    r = run_script(api, provider)
    assert r["provider"] == provider
    endpoint_field = "messages" if provider == "openai-chat" else "input"

    gen = r["generate"]
    assert gen["ok"], gen
    assert gen["text"] == ANSWER and gen["finishReason"] == "stop"
    assert gen["usage"]["inputTokens"] > 0 and gen["usage"]["outputTokens"] > 0

    stream = r["stream"]
    assert stream["ok"], stream
    assert stream["deltas"] and "".join(stream["deltas"]) == stream["text"] == STREAMED
    assert stream["finishReason"] == "stop" and stream["usage"]["outputTokens"] > 0

    tool = r["tool"]
    assert tool["ok"], tool
    assert tool["executed"] == [{"city": "Paris"}]  # the SDK ran the tool once, with the model's arguments
    first, second = tool["steps"]  # exactly two model calls: the tool call, then the answer
    assert first["finishReason"] == "tool-calls" and first["toolErrors"] == []
    [call] = first["toolCalls"]
    assert call["toolName"] == "get_weather" and call["toolCallId"] == "call_weather"
    assert call["input"] == {"city": "Paris"} and not call["invalid"] and call["schemaValid"]
    assert endpoint_field in first["requestBody"]
    jsonschema.validate(call["input"], tool_schema(first["requestBody"], "get_weather"))
    assert first["toolResults"] == [{"toolName": "get_weather", "toolCallId": "call_weather",
                                     "output": "sunny in Paris"}]
    # The final answer came from the call that carried the tool's result.
    assert not tool_result_sent(first["requestBody"], "call_weather", "sunny in Paris")
    assert tool_result_sent(second["requestBody"], "call_weather", "sunny in Paris")
    assert second["toolCalls"] == [] and second["text"] == FINAL
    assert tool["text"] == FINAL and tool["finishReason"] == "stop"
