"""Constrained decoding in the numpy engine: outputs valid by construction, speculation unchanged.

The references are independent of the code under test: ``jsonschema`` validates what the
engine produced under a grammar built from real tool catalogs (BFCL); the same requests without
the constraint (the mask removed) do not validate; constrained greedy decoding with drafts must
equal constrained greedy decoding without them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inference_helpers import make_core, run_all

from loopwire.common.grammar import grammar_text
from loopwire.common.model_def import dummy_definition
from loopwire.gateway import tool_grammar
from loopwire.harness import tool_eval
from loopwire.inference.constraint import Grammar, TokenMatcher, ll_tokenizer
from loopwire.inference.sampling import SamplingSettings
from loopwire.inference.sequence import FinishReason, GenerationRequest
from loopwire.v1 import common_pb2, gateway_pb2

DEFINITION = dummy_definition()
STOP = DEFINITION.stop_token_ids[0]
CALL = re.compile(r"^<tool_call>\n(.*)\n</tool_call>$", re.DOTALL)


@pytest.fixture(scope="module")
def bfcl_tools() -> list[common_pb2.Tool]:
    docs, _ = tool_eval.load()
    return [common_pb2.Tool(name=d.name, description=d.description, parameters=d.parameters) for d in docs]


def grammar_for(tools: list[common_pb2.Tool], mode: int = common_pb2.TOOL_CHOICE_MODE_REQUIRED,
                parallel: bool = False) -> Grammar:
    create = gateway_pb2.CreateResponse(tools=tools, tool_choice=common_pb2.ToolChoice(mode=mode),
                                        parallel_tool_calls=parallel)
    constraint = tool_grammar.constraint(create, DEFINITION, tools)
    assert constraint is not None
    return Grammar(grammar_text(constraint), ll_tokenizer(DEFINITION.tokenizer, STOP))


def request(rid: str, grammar: Grammar | None, *, seed: int, temperature: float = 1.0, speculative: bool = False,
            prompt: list[int] | None = None, max_tokens: int = 160) -> GenerationRequest:
    return GenerationRequest(rid, prompt or [100, 200, 300, 400, 500], max_tokens=max_tokens,
                             sampling=SamplingSettings(temperature=temperature, seed=seed), stop_token_ids=(STOP,),
                             speculative=speculative, grammar=grammar)


def decode(ids: list[int]) -> str:
    """The text of ``ids``; an id the vocabulary does not have (the random model's free output can
    pick one) reads as U+FFFD."""
    enc = DEFINITION.tokenizer._enc  # type: ignore[attr-defined]
    out = b""
    for t in ids:
        if t == STOP:
            continue
        try:
            out += enc.decode_single_token_bytes(t)
        except KeyError:
            out += "\ufffd".encode()
    return out.decode("utf-8", "replace")


def valid_call(text: str, tools: dict[str, dict]) -> bool:
    """A Hermes call whose name is a tool and whose arguments the tool's strict schema accepts."""
    m = CALL.match(text)
    if m is None:
        return False
    try:
        call = json.loads(m.group(1))
    except ValueError:
        return False
    if set(call) != {"name", "arguments"} or call["name"] not in tools:
        return False
    try:
        jsonschema.validate(call["arguments"], tools[call["name"]])
    except jsonschema.ValidationError:
        return False
    return True


@pytest.fixture(scope="module")
def mcp_tools() -> list[common_pb2.Tool]:
    """What the MCP servers of the tests list (tests/fixtures/mcp; kept equal to the live servers)."""
    listed = json.loads((Path(__file__).parents[2] / "fixtures" / "mcp" / "tool_schemas.json").read_text())
    return [common_pb2.Tool(name=t["name"], parameters=json.dumps(t["parameters"])) for t in listed]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_constrained_call_validates_against_its_tools_schema(tiny_model, bfcl_tools, data):
    tools = data.draw(st.lists(st.sampled_from(bfcl_tools), min_size=1, max_size=3, unique_by=lambda t: t.name))
    _check_constrained_calls(tiny_model, tools, data)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_constrained_call_validates_against_an_mcp_servers_schema(tiny_model, mcp_tools, data):
    tools = data.draw(st.lists(st.sampled_from(mcp_tools), min_size=1, max_size=3, unique_by=lambda t: t.name))
    _check_constrained_calls(tiny_model, tools, data)


def _check_constrained_calls(tiny_model, tools: list[common_pb2.Tool], data: st.DataObject) -> None:  # noqa: ANN001
    seed = data.draw(st.integers(0, 2**31 - 1))
    schemas = {t.name: tool_grammar.strict_schema(json.loads(t.parameters)) for t in tools}
    grammar = grammar_for(tools)
    core = make_core(tiny_model, num_draft_tokens=0)
    tokens, finished = run_all(core, [request("c", grammar, seed=seed, max_tokens=400),
                                      request("free", None, seed=seed, max_tokens=60)])
    if finished["c"].reason is FinishReason.STOP:  # a call that fits the budget is whole and valid
        assert valid_call(decode(tokens["c"]), schemas), decode(tokens["c"])
    else:  # cut by the budget: still a prefix of a valid call
        assert decode(tokens["c"]).startswith('<tool_call>\n{"name": "')
    # The mask removed: the same random model writes no valid call.
    assert not valid_call(decode(tokens["free"]), schemas)


def test_constrained_greedy_is_the_same_with_and_without_speculation(tiny_model, bfcl_tools):
    tools = bfcl_tools[:4]
    grammar = grammar_for(tools, parallel=True)
    rng = np.random.default_rng(3)
    # A prompt that repeats a call's text, so the drafters propose (and the grammar rejects some).
    ids = DEFINITION.tokenizer.encode(f'<tool_call>\n{{"name": "{tools[0].name}", "arguments": {{}}}}\n</tool_call>')
    prompt = ids * 6 + [int(t) for t in rng.integers(0, 5000, 20)]
    plain = make_core(tiny_model, num_draft_tokens=0)
    spec = make_core(tiny_model, num_draft_tokens=6, drafter="prompt_lookup")
    a, fa = run_all(plain, [request("x", grammar, seed=0, temperature=0.0, prompt=prompt, max_tokens=120)])
    b, fb = run_all(spec, [request("x", grammar, seed=0, temperature=0.0, prompt=prompt, max_tokens=120,
                                   speculative=True)])
    assert a["x"] == b["x"] and fa["x"].reason == fb["x"].reason
    assert fb["x"].usage.draft_tokens_proposed > 0  # speculation really ran
    assert decode(a["x"]).startswith("<tool_call>\n")


def test_a_batch_mixes_constrained_and_free_sequences(tiny_model, bfcl_tools):
    grammar = grammar_for(bfcl_tools[:2])
    core = make_core(tiny_model, num_draft_tokens=0)
    reqs = [request(f"r{i}", grammar if i % 2 == 0 else None, seed=i, max_tokens=40) for i in range(6)]
    tokens, _ = run_all(core, reqs)
    alone = make_core(tiny_model, num_draft_tokens=0)
    for i in range(6):  # each equals the same request run by itself (batch invariance under masks)
        single, _ = run_all(alone, [request(f"s{i}", grammar if i % 2 == 0 else None, seed=i, max_tokens=40)])
        assert tokens[f"r{i}"] == single[f"s{i}"]
    assert all(decode(tokens[f"r{i}"]).startswith("<tool_call>") for i in (0, 2, 4))


def test_auto_leaves_text_free_until_the_model_opens_a_call(tiny_model, bfcl_tools):
    tools = bfcl_tools[:2]
    grammar = grammar_for(tools, mode=common_pb2.TOOL_CHOICE_MODE_UNSPECIFIED)
    m = grammar.matcher()
    vocab = DEFINITION.vocab_size
    assert m.mask(vocab).sum() > vocab // 2  # free text: nearly everything allowed
    for t in DEFINITION.tokenizer.encode('I will call a tool. <tool_call>\n{"'):
        assert m.consume(t)
    allowed = np.nonzero(m.mask(vocab))[0]
    texts = {DEFINITION.tokenizer._enc.decode([int(t)]) for t in allowed}  # type: ignore[attr-defined]
    assert texts and all("name".startswith(x) or x.startswith("name") for x in texts), sorted(texts)[:20]


class _Dead(TokenMatcher):
    """A grammar position that allows nothing."""

    def __init__(self) -> None:
        pass

    def mask(self, n_logits: int) -> np.ndarray:
        return np.zeros(n_logits, dtype=bool)

    def consume(self, token: int) -> bool:
        return False


def test_a_grammar_that_allows_no_token_ends_the_generation_with_an_error(tiny_model, bfcl_tools, monkeypatch):
    grammar = grammar_for(bfcl_tools[:1])
    monkeypatch.setattr(Grammar, "matcher", lambda self: _Dead())
    import loopwire.inference.engine_core as engine_core

    monkeypatch.setattr(engine_core, "batch_masks", lambda ms, n: [m.mask(n) for m in ms])
    core = make_core(tiny_model, num_draft_tokens=0)
    tokens, finished = run_all(core, [request("dead", grammar, seed=0), request("free", None, seed=0, max_tokens=5)])
    assert finished["dead"].reason is FinishReason.CONSTRAINT_FAILED and tokens["dead"] == []
    assert "no token is allowed" in finished["dead"].error
    assert finished["free"].reason is FinishReason.LENGTH  # the rest of the batch goes on
    assert not core.has_work() and core.blocks.num_free == core.config.num_kv_blocks  # nothing leaked
