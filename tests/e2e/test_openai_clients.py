"""Clients no one here wrote, against `loopwire api` on a real mesh: chat completions and models
through the openai SDK, an Agents SDK agent with a function tool, and Codex CLI (`codex exec`
with a custom model provider). Outputs are replays of recorded turns (`loopwire api --replay`),
so the runs are deterministic while the engine does the real work."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import openai
import pytest
from api_mesh import KEYS, start_api_mesh, start_extra_api
from openai import AsyncOpenAI, OpenAI
from required import missing

pytestmark = [pytest.mark.e2e]

CODEX = Path(__file__).resolve().parents[1] / "codex" / "node_modules" / ".bin" / "codex"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-clients"))
    yield m
    m.mesh.stop()


def test_chat_completions_streamed_and_not(api):
    c = OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    done = c.chat.completions.create(model="loopwire", messages=messages,
                                     extra_body={"loopwire_replay": {"text": "Paris."}})
    assert done.choices[0].message.content == "Paris." and done.choices[0].finish_reason == "stop"
    assert done.usage.prompt_tokens > 0 and done.usage.completion_tokens > 0
    stats = done.model_extra["loopwire"]  # the gateway's own counts, as on a Response
    assert stats["tokens_tokenized"] > 0 and stats["bytes_received_by_gateway"] > 0
    chunks = list(c.chat.completions.create(model="loopwire", messages=messages, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"loopwire_replay": {"text": "Paris."}}))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "Paris."
    assert chunks[-1].usage.prompt_tokens == done.usage.prompt_tokens
    assert chunks[-1].model_extra["loopwire"]["bytes_received_by_gateway"] > 0
    # Stateless, yet the replica's prefix cache served the repeated prompt.
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0


def test_chat_tool_call_round_trip(api):
    c = OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0)
    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
    messages = [{"role": "user", "content": "2+3?"}]
    first = c.chat.completions.create(model="loopwire", messages=messages, tools=tools, extra_body={
        "loopwire_replay": {"function_calls": [{"call_id": "call_add", "name": "add", "arguments": '{"a":2,"b":3}'}]}})
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "add"
    assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "5"}]
    second = c.chat.completions.create(model="loopwire", messages=messages, tools=tools,
                                       extra_body={"loopwire_replay": {"text": "5"}})
    assert second.choices[0].message.content == "5"


def test_models(api):
    c = OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0)
    assert [m.id for m in c.models.list()] == ["loopwire"]
    assert c.models.retrieve("loopwire").owned_by == "loopwire"
    with pytest.raises(openai.NotFoundError):
        c.models.retrieve("gpt-9")
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=api.base_url, api_key="wrong", max_retries=0).models.list()


def test_agents_sdk_runs_an_agent_with_a_function_tool(api):
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    proc, address = start_extra_api(api, [
        {"function_calls": [{"call_id": "call_weather", "name": "get_weather", "arguments": '{"city": "Paris"}'}]},
        {"text": "It is sunny in Paris."},
    ], "agents-api")
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather of a city."""
        asked.append(city)
        return f"sunny in {city}"

    try:
        set_tracing_disabled(True)  # the SDK would export its traces to OpenAI
        client = AsyncOpenAI(base_url=f"http://{address}/v1", api_key=KEYS["alpha"], max_retries=0)
        agent = Agent(name="weather", instructions="Answer with the weather tool.", tools=[get_weather],
                      model=OpenAIResponsesModel(model="loopwire", openai_client=client))
        result = asyncio.run(Runner.run(agent, "What is the weather in Paris?"))
    finally:
        proc.terminate()
        proc.wait(15)
    assert asked == ["Paris"]
    assert result.final_output == "It is sunny in Paris."
    assert len(result.raw_responses) == 2


def test_codex_exec_completes_a_turn(api, tmp_path):
    if not CODEX.exists():
        missing("Codex CLI not installed: scripts/install_tools.sh runs npm ci in tests/codex")
    proc, address = start_extra_api(api, [{"text": "Hello from loopwire."}], "codex-api")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "loopwire"\nmodel_provider = "loopwire"\n\n[model_providers.loopwire]\nname = "loopwire"\n'
        f'base_url = "http://{address}/v1"\nenv_key = "LOOPWIRE_API_KEY"\nwire_api = "responses"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home),
           "LOOPWIRE_API_KEY": KEYS["alpha"]}
    log_file = api.state / "logs" / "codex-api.log"
    try:
        out = subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "Say hello"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
        # Codex exits on response.completed; the api logs the request once its stream has closed.
        for _ in range(150):
            if "status=completed stream=True" in log_file.read_text():
                break
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(15)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Hello from loopwire." in out.stdout
    log = log_file.read_text()
    assert "POST /v1/responses tenant=alpha" in log and "status=completed stream=True" in log
