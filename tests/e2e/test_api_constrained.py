"""Constrained decoding through `loopwire api` with the real model (SmolLM2-135M on the reference
engine): the openai SDK's tool_choice, structured outputs (Responses and Chat Completions) and an
Agents SDK agent get output their schemas accept, because the gateway's grammar allows nothing
else. Each response is bounded (enums, maxLength, max_output_tokens) so each test runs in seconds."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Literal

import jsonschema
import pytest
from api_mesh import KEYS, start_api_mesh
from openai import OpenAI
from pydantic import BaseModel, Field

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "enum": ["UTC", "CET", "PST"]}},
        "required": ["timezone"]}
TOOLS = [{"type": "function", "name": "get_weather", "description": "The current weather of a city.",
          "parameters": WEATHER},
         {"type": "function", "name": "get_time", "description": "The current time in a timezone.",
          "parameters": TIME}]
CHAT_TOOLS = [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in TOOLS]
ANSWER = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 20},
                                           "confident": {"type": "boolean"}},
          "required": ["capital", "confident"]}
QUESTION = "What is the weather in Paris?"


class Capital(BaseModel):
    capital: str = Field(max_length=20)
    confident: bool


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-constrained"), {"inference": ["--model", "default"]})
    yield m
    m.mesh.stop()


@pytest.fixture
def sdk(api) -> OpenAI:
    return OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0, timeout=240)


def test_responses_tool_choice_required_calls_a_tool_with_valid_arguments(sdk):
    r = sdk.responses.create(model="loopwire", input=QUESTION, tools=TOOLS, tool_choice="required",
                             parallel_tool_calls=False, max_output_tokens=80)
    assert r.status == "completed" and r.tool_choice == "required" and r.parallel_tool_calls is False
    assert [o.type for o in r.output] == ["function_call"]  # nothing but the call
    call = r.output[0]
    schemas = {t["name"]: t["parameters"] for t in TOOLS}
    jsonschema.validate(json.loads(call.arguments), schemas[call.name])


def test_responses_named_function_streamed(sdk):
    choice = {"type": "function", "name": "get_time"}  # not what the question asks for: the grammar decides
    events = list(sdk.responses.create(model="loopwire", input=QUESTION, tools=TOOLS, tool_choice=choice,
                                       parallel_tool_calls=False, max_output_tokens=60, stream=True))
    done = events[-1].response
    assert events[-1].type == "response.completed" and done.tool_choice.name == "get_time"
    streamed = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    [call] = done.output
    assert call.type == "function_call" and call.name == "get_time" and call.arguments == streamed
    jsonschema.validate(json.loads(call.arguments), TIME)


def test_chat_tool_choice_required_and_named(sdk):
    messages = [{"role": "user", "content": QUESTION}]
    required = sdk.chat.completions.create(model="loopwire", messages=messages, tools=CHAT_TOOLS,
                                           tool_choice="required", parallel_tool_calls=False, max_tokens=80)
    named = sdk.chat.completions.create(model="loopwire", messages=messages, tools=CHAT_TOOLS,
                                        tool_choice={"type": "function", "function": {"name": "get_time"}},
                                        parallel_tool_calls=False, max_tokens=60)
    schemas = {t["name"]: t["parameters"] for t in TOOLS}
    for done in (required, named):
        choice = done.choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        [call] = choice.message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    assert named.choices[0].message.tool_calls[0].function.name == "get_time"


def test_responses_json_schema_strict_output_validates(sdk):
    fmt = {"type": "json_schema", "name": "capital", "schema": ANSWER, "strict": True}
    r = sdk.responses.create(model="loopwire", input="What is the capital of France? Answer in JSON.",
                             text={"format": fmt}, max_output_tokens=60)
    assert r.status == "completed" and r.text.format.type == "json_schema" and r.text.format.strict is True
    jsonschema.validate(json.loads(r.output_text), {**ANSWER, "additionalProperties": False})
    # The SDK's own structured-output helper: a pydantic model as the format, parsed back.
    parsed = sdk.responses.parse(model="loopwire", input="What is the capital of Italy?", text_format=Capital,
                                 max_output_tokens=60)
    assert isinstance(parsed.output_parsed, Capital)


def test_chat_response_format_json_schema(sdk):
    messages = [{"role": "user", "content": "What is the capital of France? Answer in JSON."}]
    done = sdk.chat.completions.create(model="loopwire", messages=messages, max_tokens=60, response_format={
        "type": "json_schema", "json_schema": {"name": "capital", "schema": ANSWER, "strict": True}})
    assert done.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(done.choices[0].message.content), ANSWER)
    parsed = sdk.chat.completions.parse(model="loopwire", messages=messages, response_format=Capital, max_tokens=60)
    assert isinstance(parsed.choices[0].message.parsed, Capital)


def test_agents_sdk_agent_calls_its_function_tool(api):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    calls: list[dict[str, str]] = []

    @function_tool
    def get_weather(city: Annotated[str, Field(max_length=20)], unit: Literal["celsius", "fahrenheit"]) -> str:
        """The current weather of a city."""
        calls.append({"city": city, "unit": unit})
        return f"sunny and 21 degrees {unit} in {city}"

    set_tracing_disabled(True)  # the SDK would export its traces to OpenAI
    client = AsyncOpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0, timeout=240)
    agent = Agent(name="weather", instructions="Answer with the weather tool.", tools=[get_weather],
                  model=OpenAIResponsesModel(model="loopwire", openai_client=client),
                  model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False, max_tokens=80),
                  tool_use_behavior="stop_on_first_tool")  # the tool's result is the answer: one model turn
    result = asyncio.run(Runner.run(agent, QUESTION, max_turns=2))
    assert len(calls) == 1
    jsonschema.validate(calls[0], get_weather.params_json_schema)
    assert result.final_output == f"sunny and 21 degrees {calls[0]['unit']} in {calls[0]['city']}"


def test_agents_sdk_structured_output_type(api):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0, timeout=240)
    agent = Agent(name="geo", instructions="Answer geography questions.", output_type=Capital,
                  model=OpenAIResponsesModel(model="loopwire", openai_client=client),
                  model_settings=ModelSettings(max_tokens=60))
    result = asyncio.run(Runner.run(agent, "What is the capital of France?", max_turns=1))
    assert isinstance(result.final_output, Capital)
