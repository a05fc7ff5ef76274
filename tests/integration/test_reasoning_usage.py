"""Log-probabilities and reasoning tokens end to end on loopback: a real gateway in front of a
real reference replica (tiny random weights) serving a Qwen3-style thinking template, and the
api's builders on the gateway's events.

The references are independent of the code under test: the think block's tokens are counted
from the generated ids' bytes (where ``</think>`` ends), and the logprobs' bytes must spell the
text the client got."""

from __future__ import annotations

import dataclasses

import grpc
import pytest

from loopwire.api.chat import ChatBuilder
from loopwire.api.create import parse_create
from loopwire.api.events import ResponseBuilder
from loopwire.common.auth import Authenticator
from loopwire.common.model_def import dummy_definition
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.inference.config import EngineConfig, model_preset
from loopwire.inference.engine import AsyncEngine
from loopwire.inference.model import LlamaModel
from loopwire.inference.reference_engine import reference_core
from loopwire.inference.server import add_servicer
from loopwire.inference.weights import dummy_weights
from loopwire.v1 import gateway_pb2

THINKING_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)
MODEL = dataclasses.replace(dummy_definition(), chat_template=THINKING_TEMPLATE)


@pytest.fixture
async def gateway():
    config = model_preset("tiny")
    model = LlamaModel(config, dummy_weights(config, 1))
    engine = AsyncEngine(reference_core(EngineConfig(model=config, num_kv_blocks=512, max_batch_tokens=256), model),
                         "reference", "tiny", MODEL, offload=True)
    server = grpc.aio.server()
    add_servicer(server, engine, coalesce_window_s=0.0)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    gw = await start_gateway([f"127.0.0.1:{port}"], poll_interval_s=0.05, model=MODEL,
                             authenticator=Authenticator.open(), config=GatewayConfig())
    yield gw
    await gw.channel.close()
    await gw.server.stop(0)
    await gw.servicer.router.close()
    await server.stop(0)
    await engine.close()


async def converse(gw, create: gateway_pb2.CreateResponse) -> list[gateway_pb2.ConverseResponse]:
    call = gw.stub.Converse()
    await call.write(gateway_pb2.ConverseRequest(create_response=create))
    events = []
    while True:
        event = await call.read()
        assert event is not grpc.aio.EOF
        events.append(event)
        if event.WhichOneof("event") in ("completed", "failed"):
            break
    await call.done_writing()
    return events


def think_block_tokens(entries) -> int:  # noqa: ANN001
    """Output tokens (one entry each) up to the one holding the end of the first ``</think>``."""
    data = b""
    for n, e in enumerate(entries, 1):
        data += e.bytes
        if b"</think>" in data:
            return n
    return len(entries)


def body(**fields):
    return {"model": "loopwire", "input": "Say hi.", **fields}


@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_reasoning_tokens_and_logprobs_through_gateway_and_api(gateway, seed):
    parsed = parse_create(body(reasoning={"effort": "minimal"}, top_logprobs=3,
                               include=["message.output_text.logprobs"], max_output_tokens=40,
                               temperature=1.0), models=[])
    parsed.create.sampling.seed = seed
    parsed.create.sampling.reasoning_budget_tokens = 6  # the closer is forced soon: there is an answer
    assert parsed.create.sampling.enable_thinking and parsed.create.sampling.top_logprobs == 3
    events = await converse(gateway, parsed.create)
    done = events[-1].completed
    # The gateway's text deltas carry every text token once, in order: their bytes spell the text.
    deltas = [e.text_delta for e in events if e.WhichOneof("event") == "text_delta"]
    text = "".join(d.text for d in deltas)
    entries = [lp for d in deltas for lp in d.logprobs]
    assert b"".join(e.bytes for e in entries).decode() == text
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        tops = [c.logprob for c in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert e.token == e.bytes.decode("utf-8", "backslashreplace")
    # Reasoning tokens: the think block's share of the output, counted from the bytes.
    assert text.startswith("<think>") and "</think>" in text
    assert done.usage.reasoning_tokens == think_block_tokens(entries)
    assert 0 < done.usage.reasoning_tokens < done.usage.output_tokens
    # The api: the answer's logprobs on output_text (its bytes spell it), none for the reasoning.
    builder = ResponseBuilder(parsed)
    out = [ev for event in events for ev in builder.feed(event)]
    response = builder.response()
    message = next(i for i in response["output"] if i["type"] == "message")
    part = message["content"][0]
    # A token that straddles the closer and the answer (">In") goes with the answer: only its head is extra.
    joined = bytes(b for e in part["logprobs"] for b in e["bytes"]).decode()
    assert joined.rstrip().endswith(part["text"].strip())
    assert len(joined.strip()) - len(part["text"].strip()) < len(bytes(part["logprobs"][0]["bytes"]))
    streamed = [lp for ev in out if ev["type"] == "response.output_text.delta" for lp in ev["logprobs"]]
    assert streamed == part["logprobs"]
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] == done.usage.reasoning_tokens
    assert response["top_logprobs"] == 3
    chat = ChatBuilder("loopwire", logprobs=True)
    for event in events:
        chat.feed(event)
    completion = chat.completion()
    assert completion["usage"]["completion_tokens_details"]["reasoning_tokens"] == done.usage.reasoning_tokens
    assert len(completion["choices"][0]["logprobs"]["content"]) == len(entries)


async def test_no_logprobs_and_no_reasoning_unless_there(gateway):
    parsed = parse_create(body(max_output_tokens=8, temperature=1.0), models=[])
    events = await converse(gateway, parsed.create)
    deltas = [e.text_delta for e in events if e.WhichOneof("event") == "text_delta"]
    assert deltas and all(not d.logprobs for d in deltas)
    builder = ResponseBuilder(parsed)
    for event in events:
        builder.feed(event)
    for item in builder.response()["output"]:
        if item["type"] == "message":
            assert item["content"][0]["logprobs"] == []


async def test_enable_thinking_false_renders_the_closed_block_into_the_prompt(gateway):
    off = parse_create(body(reasoning={"effort": "none"}, max_output_tokens=4), models=[])
    assert off.create.sampling.enable_thinking is False
    events = await converse(gateway, off.create)
    assert events[-1].WhichOneof("event") == "completed"
    # The template was given enable_thinking=false: the prompt ends with the empty think block,
    # one more rendering of the generation prompt than with thinking on.
    on = parse_create(body(reasoning={"effort": "high"}, max_output_tokens=4), models=[])
    count_off = await gateway.stub.CountTokens(gateway_pb2.CountTokensRequest(request=off.create))
    count_on = await gateway.stub.CountTokens(gateway_pb2.CountTokensRequest(request=on.create))
    closed = len(MODEL.tokenizer.encode("<think>\n\n</think>\n\n"))
    assert count_off.input_tokens - count_on.input_tokens == closed
    assert events[-1].completed.usage.input_tokens == count_off.input_tokens
