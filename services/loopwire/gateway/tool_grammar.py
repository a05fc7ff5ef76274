"""The constraint of a response: its tool choice and text format as one grammar.

The gateway knows the tools, the model's tool-call format and what the client asked for, so
it builds the grammar and the engine only applies it. The call syntax is the format's
(``tool_formats``: for Hermes ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``)
and covers all of the call: ``name`` is one of the tools, the arguments that tool's schema made
strict (objects get ``additionalProperties: false`` where the schema leaves them open, as
OpenAI's strict mode does, so a small model cannot pour other JSON into them). This module
keeps what is the same for every format:

* auto: free text, and once the text reaches ``<tool_call>`` the call is forced to the end (a
  lazy lexeme: the opener is the trigger), so an opened call always has valid arguments;
* required: calls only (one, or several separated by newlines with parallel tool calls);
* a named function: that one call;
* none: text that never opens a call;
* allowed_tools: any of the above over a subset of the tools (the prompt keeps them all);
* a text format (JSON Schema): the whole text is one such JSON value.

A model whose template thinks (``<think>...</think>``) can be given a thinking budget
(``think_budget``): the output opens with the think block, whose body may take at most that many
tokens (llguidance's ``max_tokens`` on its rule) before the closer is the only thing allowed,
then the answer under the constraint above (or free text).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence

from loopwire.common.errors import Code, RequestError, invalid
from loopwire.common.grammar import ConstraintError, check_constraint
from loopwire.common.model_def import ModelDefinition
from loopwire.gateway import tool_formats
from loopwire.gateway.tool_formats.grammar import avoiding, json_rule, strict_schema
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

Mode = common_pb2.ToolChoiceMode
_FIELD = "create_response.tool_choice"
__all__ = ["constraint", "strict_schema", "think_budget"]


def think_budget(answer: inference_pb2.Constraint | None, model: ModelDefinition,
                 budget: int) -> inference_pb2.Constraint | None:
    """``answer`` (None: free text) after a think block of at most ``budget`` tokens, always
    closed; ``answer`` itself for a model whose template does not think. Only Lark answers
    compose (the ones ``constraint`` builds)."""
    markers = model.template.think
    if markers is None or budget <= 0:
        return answer
    opener, closer = markers
    rules: list[str] = []
    if answer is None:
        rules.append("lw_answer: /(.|\\n)*/")
        gap = ""
    else:
        if answer.WhichOneof("grammar") != "lark":
            raise ValueError("only a Lark constraint composes with a thinking budget")
        for line in answer.lark.splitlines():
            if line.startswith("%llguidance"):
                continue
            rules.append("lw_answer:" + line[len("start:"):] if line.startswith("start:") else line)
        rules.append("lw_gap: /[ \\t\\n]*/")  # the newlines models write after the closer
        gap = " lw_gap"
    head = "" if model.template.opens_think else json.dumps(opener) + " "
    start = f"start: {head}lw_think {json.dumps(closer)}{gap} lw_answer"
    body = f"lw_think[max_tokens={int(budget)}]: /{avoiding(closer).replace('/', chr(92) + '/')}/"
    built = inference_pb2.Constraint(lark="\n".join(["%llguidance {}", start, body, *rules]) + "\n")
    built.generated_token_ids.extend(answer.generated_token_ids if answer is not None else ())
    return built


def constraint(create: gateway_pb2.CreateResponse, model: ModelDefinition,
               tools: Sequence[common_pb2.Tool], think: int = 0) -> inference_pb2.Constraint | None:
    """The Constraint of this request (None: free text) over the conversation's ``tools``, or an
    in-stream error naming the field; the grammar is checked by llguidance before anything runs.
    A session asks with the same tools and choice every turn, so a built and checked grammar is
    kept (a few ms of gateway CPU per turn otherwise); refusals are not kept. ``think``: a thinking
    budget in tokens (0: none), see ``think_budget``."""
    key = (model.name, model.tool_call_format, tuple(t.SerializeToString(deterministic=True) for t in tools),
           create.tool_choice.SerializeToString(deterministic=True),
           create.parallel_tool_calls if create.HasField("parallel_tool_calls") else None,
           create.text_format.SerializeToString(deterministic=True) if create.HasField("text_format") else None,
           think, model.chat_template if think else "")
    if key in _BUILT:
        _BUILT.move_to_end(key)
        return _BUILT[key]
    built = _constraint(create, model, list(tools))
    if think:
        try:
            built = think_budget(built, model, think)
        except ValueError as e:
            raise invalid("create_response.sampling.reasoning_budget_tokens", str(e)) from None
    if built is not None:
        try:
            check_constraint(built)
        except ConstraintError as e:
            field = "create_response.text_format" if create.HasField("text_format") else "create_response.tools"
            raise invalid(field, f"the constraint does not compile: {e}"[:800]) from None
    _BUILT[key] = built
    if len(_BUILT) > _BUILT_MAX:
        _BUILT.popitem(last=False)
    return built


# Built constraints by what they are built from (LRU): the callers copy them, never change them.
_BUILT: OrderedDict[tuple, inference_pb2.Constraint | None] = OrderedDict()
_BUILT_MAX = 256


def _constraint(create: gateway_pb2.CreateResponse, model: ModelDefinition,
                tools: list[common_pb2.Tool]) -> inference_pb2.Constraint | None:
    choice = create.tool_choice
    mode = choice.mode
    if mode not in Mode.values():
        raise invalid(f"{_FIELD}.mode", f"unknown value {mode}")
    if mode == Mode.TOOL_CHOICE_MODE_FUNCTION:
        if not choice.function_name:
            raise invalid(f"{_FIELD}.function_name", "required with a named function")
        tools = [t for t in tools if t.name == choice.function_name]
        if not tools:
            raise invalid(f"{_FIELD}.function_name", f"{choice.function_name!r} is not among the request's tools")
    elif choice.function_name:
        raise invalid(f"{_FIELD}.function_name", "only with TOOL_CHOICE_MODE_FUNCTION")
    if choice.allowed_tools:
        unknown = sorted(set(choice.allowed_tools) - {t.name for t in tools})
        if unknown:
            raise invalid(f"{_FIELD}.allowed_tools", f"{', '.join(map(repr, unknown))} not among the request's tools")
        tools = [t for t in tools if t.name in set(choice.allowed_tools)]
    if mode == Mode.TOOL_CHOICE_MODE_REQUIRED and not tools:
        raise invalid(_FIELD, "required needs at least one tool")
    text = _text_rule(create)
    if not tools or mode == Mode.TOOL_CHOICE_MODE_NONE:
        if text is not None:
            return inference_pb2.Constraint(lark=f"start: {text}\n")
        if mode == Mode.TOOL_CHOICE_MODE_NONE and tools:
            return inference_pb2.Constraint(lark=_none_grammar(model))
        return None
    fmt = tool_formats.get(model.tool_call_format)
    if fmt is None:
        raise RequestError(Code.ERROR_CODE_FAILED_PRECONDITION,
                           f"{_FIELD}: model {model.name!r} has no tool-call format loopwire can constrain "
                           f"({model.tool_call_format or 'none'!r})", _FIELD)
    parallel = create.parallel_tool_calls if create.HasField("parallel_tool_calls") else True
    auto = mode == Mode.TOOL_CHOICE_MODE_UNSPECIFIED
    return inference_pb2.Constraint(lark=fmt.grammar(auto, tools, parallel, text))


def _text_rule(create: gateway_pb2.CreateResponse) -> str | None:
    """The text format as a grammar expression (None: free text)."""
    if not create.HasField("text_format"):
        return None
    fmt = create.text_format
    field = "create_response.text_format.json_schema"
    if not fmt.json_schema:
        return json_rule({"type": "object"})
    try:
        schema = json.loads(fmt.json_schema)
    except ValueError as e:
        raise invalid(field, f"not valid JSON: {e}") from None
    if not isinstance(schema, dict):
        raise invalid(field, "a JSON Schema must be an object")
    return json_rule(strict_schema(schema) if fmt.strict else schema)


def _none_grammar(model: ModelDefinition) -> str:
    fmt = tool_formats.get(model.tool_call_format) or tool_formats.FORMATS[tool_formats.DEFAULT]
    return fmt.no_calls_grammar()
