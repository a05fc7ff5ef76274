"""A thinking budget the engine enforces: the gateway's grammar lets the think block's body take at
most N tokens, then only its closer; the tiny random model (which never closes a block by itself)
must come out with a closed block of at most N tokens every time.

The reference is independent of the grammar: the generated ids are cut at the ids of the closer
found by searching the decoded text, and counted.
"""

from __future__ import annotations

import dataclasses

import pytest

from loopwire.common.grammar import grammar_text
from loopwire.common.model_def import dummy_definition
from loopwire.common.tokenizer import decode
from loopwire.gateway import tool_grammar
from loopwire.inference.config import EngineConfig, model_preset
from loopwire.inference.constraint import Grammar, ll_tokenizer
from loopwire.inference.model import LlamaModel
from loopwire.inference.reference_engine import reference_core
from loopwire.inference.sampling import SamplingSettings
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.weights import dummy_weights
from loopwire.v1 import common_pb2, gateway_pb2

# ChatML that thinks, Qwen3-style: history turns as generated, the answer after a think block.
THINKING_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)
MODEL = dataclasses.replace(dummy_definition(), chat_template=THINKING_TEMPLATE)
STOP = MODEL.stop_token_ids[0]
TOOLS = [common_pb2.Tool(name="shell", description="run", parameters='{"type": "object", "properties": '
                         '{"cmd": {"type": "string"}}, "required": ["cmd"]}')]


@pytest.fixture(scope="module")
def tiny_model() -> LlamaModel:
    config = model_preset("tiny")
    return LlamaModel(config, dummy_weights(config, 0))


def run(model: LlamaModel, grammar: Grammar | None, seed: int, max_tokens: int) -> list[int]:
    core = reference_core(EngineConfig(model=model.config, num_kv_blocks=256, max_batch_tokens=256), model)
    core.add(GenerationRequest("r", MODEL.tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
                               max_tokens=max_tokens, sampling=SamplingSettings(temperature=1.0, seed=seed),
                               stop_token_ids=(STOP,), grammar=grammar))
    out: list[int] = []
    while core.has_work():
        for step in core.step():
            out.extend(step.token_ids)
    return out


def think_tokens(ids: list[int]) -> int | None:
    """Tokens that hold any byte of the think body (between the end of ``<think>`` and the start of
    the first ``</think>``, found in the output's bytes); None: the block never closed."""
    ids = [t for t in ids if t != STOP]
    pieces = [MODEL.tokenizer.token_bytes(t) for t in ids]
    data = b"".join(pieces)
    assert data.startswith(b"<think>"), data[:40]
    body_start, body_end = len(b"<think>"), data.find(b"</think>")
    if body_end < 0:
        return None
    n, at = 0, 0
    for piece in pieces:
        if at < body_end and at + len(piece) > body_start:
            n += 1
        at += len(piece)
    return n


def grammar(constraint) -> Grammar:  # noqa: ANN001
    return Grammar(grammar_text(constraint), ll_tokenizer(MODEL.tokenizer, STOP))


def test_the_template_is_read_as_thinking():
    assert MODEL.template.think == ("<think>", "</think>")
    assert not MODEL.template.opens_think
    assert dummy_definition().template.think is None


@pytest.mark.parametrize("budget", [3, 12, 40])
def test_the_think_block_never_exceeds_its_budget_and_is_always_closed(tiny_model, budget):
    constraint = tool_grammar.think_budget(None, MODEL, budget)
    assert constraint is not None
    for seed in range(4):
        ids = run(tiny_model, grammar(constraint), seed, max_tokens=budget + 40)
        n = think_tokens(ids)
        assert n is not None, decode(MODEL.tokenizer, ids)
        assert n <= budget, (n, decode(MODEL.tokenizer, ids))
    # The same random model without the budget writes no closer in as many tokens.
    free = run(tiny_model, None, 0, max_tokens=budget + 40)
    assert "</think>" not in decode(MODEL.tokenizer, [t for t in free if t != STOP])


def test_the_budget_is_spent_before_the_closer_is_forced(tiny_model):
    """The closer comes at the budget (the random model spends it all), not earlier."""
    constraint = tool_grammar.think_budget(None, MODEL, 20)
    spent = [think_tokens(run(tiny_model, grammar(constraint), seed, max_tokens=80)) for seed in range(3)]
    assert all(n is not None and 15 <= n <= 20 for n in spent), spent


def test_a_budget_composes_with_a_tool_choice(tiny_model):
    create = gateway_pb2.CreateResponse(tools=TOOLS, tool_choice=common_pb2.ToolChoice(
        mode=common_pb2.TOOL_CHOICE_MODE_REQUIRED))
    constraint = tool_grammar.constraint(create, MODEL, TOOLS, think=8)
    assert constraint is not None
    ids = run(tiny_model, grammar(constraint), 1, max_tokens=200)
    text = decode(MODEL.tokenizer, [t for t in ids if t != STOP])
    n = think_tokens(ids)
    assert n is not None and n <= 8
    after = text.split("</think>", 1)[1].lstrip()
    assert after.startswith('<tool_call>\n{"name": "shell", "arguments": {"cmd": "'), text


def test_a_template_that_does_not_think_gets_no_budget():
    create = gateway_pb2.CreateResponse()
    assert tool_grammar.constraint(create, dummy_definition(), [], think=16) is None


@pytest.mark.parametrize("effort,budget", [("low", 1024), ("high", 16384), ("none", 0), (None, 0)])
def test_the_apis_reasoning_effort_becomes_the_gateways_thinking_budget(effort, budget):
    from loopwire.api.create import parse_create

    body = {"model": "m", "input": "hi", **({"reasoning": {"effort": effort}} if effort else {})}
    parsed = parse_create(body, models=["m"])
    assert parsed.create.sampling.reasoning_budget_tokens == budget
    assert parsed.echo["reasoning"]["effort"] == effort
