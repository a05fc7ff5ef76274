"""The constraint of a response: its tool choice and text format as one grammar.

The gateway knows the tools, the model's tool-call format and what the client asked for, so
it builds the grammar and the engine only applies it. For the Hermes format a call is
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` and the grammar covers all of
it: ``name`` is one of the tools, ``arguments`` that tool's schema made strict (objects get
``additionalProperties: false`` where the schema leaves them open, as OpenAI's strict mode does,
so a small model cannot pour other JSON into them).

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

import copy
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from loopwire.common.errors import Code, RequestError, invalid
from loopwire.common.grammar import ConstraintError, check_constraint
from loopwire.common.model_def import ModelDefinition
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

Mode = common_pb2.ToolChoiceMode
_FIELD = "create_response.tool_choice"
# Compact JSON: separators as the Hermes examples write them, no runs of whitespace for a
# small model to loop in.
_JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_REGEX_META = set("\\.+*?()|[]{}^$#&-~")


class Formats:
    """Call syntax of a tool-call format: opener, closer, separator between parallel calls."""

    def __init__(self, opener: str, closer: str, separator: str) -> None:
        self.opener, self.closer, self.separator = opener, closer, separator


FORMATS = {
    "hermes": Formats("<tool_call>\n", "\n</tool_call>", "\n"),
    # The whole reply is the call (several joined by "; "); a leading <|python_tag|> is allowed.
    "llama3_json": Formats("", "", "; "),
    # One opener for the list of calls: [TOOL_CALLS][{...}, {...}]
    "mistral": Formats("[TOOL_CALLS][", "]", ", "),
    "qwen3_coder": Formats("<tool_call>\n", "\n</tool_call>", "\n"),
}
_XML_CLOSE = "\n</parameter>\n"
_MISTRAL_ID = {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}
# llama3_json free text: anything that does not begin (after whitespace) with a call's "{" or "<|".
_LLAMA_FREE = "/\\s*(([^{\\s<]|<[^|])(.|\\n)*|<)?/"


def strict_schema(schema: Any) -> Any:
    """A copy with ``additionalProperties: false`` on every object schema that leaves it open."""
    if isinstance(schema, list):
        return [strict_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) if k in ("properties", "items", "anyOf", "oneOf", "allOf", "prefixItems",
                                        "$defs", "definitions", "not", "if", "then", "else") else copy.deepcopy(v)
           for k, v in schema.items()}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: strict_schema(s) for name, s in schema[key].items()}
    required = out.get("required")
    if isinstance(out.get("properties"), dict) and isinstance(required, list):
        # Required properties first (the grammar writes them in this order): a small model fills
        # what the call needs before it can wander into optional fields, and may stop after them.
        props = out["properties"]
        out["properties"] = {**{k: props[k] for k in required if k in props},
                             **{k: v for k, v in props.items() if k not in required}}
    kinds = out.get("type")
    is_object = kinds == "object" or (isinstance(kinds, list) and "object" in kinds) or "properties" in out
    if is_object and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _call_schema(tool: common_pb2.Tool, key: str = "arguments", id_schema: Any = None) -> dict[str, Any]:
    params = json.loads(tool.parameters) if tool.parameters else {"type": "object", "properties": {}}
    props = {"name": {"const": tool.name}, key: strict_schema(params)}
    if id_schema is not None:  # Mistral's past calls carry a 9-character id after the arguments
        props["id"] = id_schema
    return {"type": "object", "properties": props, "required": ["name", key], "additionalProperties": False}


def _json(schema: dict[str, Any]) -> str:
    return "%json " + json.dumps({**schema, "x-guidance": _JSON_OPTIONS}, ensure_ascii=False)


def _avoiding(word: str) -> str:
    """A regex of every text that does not contain ``word`` (whose first character occurs only
    first in it): runs of the first character, each followed by a wrong continuation, or at the end
    a proper prefix."""
    head, rest = word[0], word[1:]
    assert head not in rest
    esc = ("\\" + head) if head in _REGEX_META else head

    def lit(s: str) -> str:
        return "".join("\\" + c if c in _REGEX_META else ("\\n" if c == "\n" else c) for c in s)

    def cls(c: str) -> str:
        return "\\" + c if c in _REGEX_META or c == "]" else ("\\n" if c == "\n" else c)

    wrong = "|".join(f"{lit(rest[:k])}[^{cls(rest[k])}{cls(head)}]" for k in range(len(rest)))
    tail = "|".join(lit(rest[:k]) for k in range(1, len(rest)))
    return f"([^{cls(head)}]|{esc}+({wrong}))*({esc}+({tail})?)?"


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
    body = f"lw_think[max_tokens={int(budget)}]: /{_avoiding(closer).replace('/', chr(92) + '/')}/"
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
    fmt = FORMATS.get(model.tool_call_format)
    if fmt is None:
        raise RequestError(Code.ERROR_CODE_FAILED_PRECONDITION,
                           f"{_FIELD}: model {model.name!r} has no tool-call format loopwire can constrain "
                           f"({model.tool_call_format or 'none'!r})", _FIELD)
    parallel = create.parallel_tool_calls if create.HasField("parallel_tool_calls") else True
    if model.tool_call_format != "hermes":
        return inference_pb2.Constraint(lark=_family_grammar(model.tool_call_format, mode, tools, parallel, text))
    body = _json({"anyOf": [_call_schema(t) for t in tools]})
    more = f' ({json.dumps(fmt.separator)} call)*' if parallel else ""
    rules = [f"call: {json.dumps(fmt.opener)} body {json.dumps(fmt.closer)}", f"body: {body}"]
    if mode == Mode.TOOL_CHOICE_MODE_UNSPECIFIED:  # auto
        opener, after = fmt.opener.rstrip(), fmt.opener[len(fmt.opener.rstrip()):]
        rules += [f"first: opened {json.dumps(after)} body {json.dumps(fmt.closer)}" if after
                  else f"first: opened body {json.dumps(fmt.closer)}",
                  f"opened[lazy]: TEXT {json.dumps(opener)}",
                  "TEXT: /(.|\\n)*/"]
        free = text if text is not None else "TEXT"
        start = f"start: {free} | first{more}"
    else:
        start = f"start: call{more}"
    return inference_pb2.Constraint(lark="\n".join(["%llguidance {}", start, *rules]) + "\n")


def _family_grammar(name: str, mode: int, tools: list[common_pb2.Tool], parallel: bool, text: str | None) -> str:
    """The grammar of the other families' calls: auto (free text, a call forced to its end once its
    opener comes), required and a named function (calls only)."""
    fmt = FORMATS[name]
    rules: list[str] = []
    if name == "qwen3_coder":
        rules += _xml_rules(tools)
    elif name == "llama3_json":
        rules.append(f"body: {_json({'anyOf': [_call_schema(t, 'parameters') for t in tools]})}")
    else:
        rules.append(f"body: {_json({'anyOf': [_call_schema(t, id_schema=_MISTRAL_ID) for t in tools]})}")
    sep = json.dumps(fmt.separator)
    if name == "mistral":
        calls = f"body ({sep} body)*" if parallel else "body"
        rules.append(f"calls: {json.dumps(fmt.opener)} {calls} {json.dumps(fmt.closer)}")
    elif name == "llama3_json":
        rules.append(f'calls: "<|python_tag|>"? body ({sep} body)*' if parallel else 'calls: "<|python_tag|>"? body')
    else:
        rules.append(f"call: {json.dumps(fmt.opener)} body {json.dumps(fmt.closer)}")
        rules.append(f"calls: call ({sep} call)*" if parallel else "calls: call")
    if mode != Mode.TOOL_CHOICE_MODE_UNSPECIFIED:
        start = "start: calls"
    elif name == "llama3_json":  # the call is the whole reply: its first character decides
        start = f"start: {text if text is not None else 'FREE'} | calls"
        rules.append(f"FREE: {_LLAMA_FREE}")
    else:
        opener = fmt.opener.rstrip("\n[")
        after = fmt.opener[len(opener):]
        rest = rules[-1].split(": ", 1)[1] if name == "mistral" else f"call ({sep} call)*" if parallel else "call"
        if name == "mistral":
            first = f"first: opened {json.dumps(after)} " + rest.split(" ", 1)[1]
        else:
            more = f" ({sep} call)*" if parallel else ""
            first = f"first: opened {json.dumps(after)} body {json.dumps(fmt.closer)}{more}"
        rules += [first, f"opened[lazy]: TEXT {json.dumps(opener)}", "TEXT: /(.|\\n)*/"]
        start = f"start: {text if text is not None else 'TEXT'} | first"
    return "\n".join(["%llguidance {}", start, *rules]) + "\n"


def _xml_rules(tools: list[common_pb2.Tool]) -> list[str]:
    """qwen3_coder bodies: ``<function=NAME>\\n`` then each parameter once, required ones first and
    present, in the strict schema's order; strings as written, other values as their JSON."""
    rules, names = [], []
    for i, tool in enumerate(tools):
        params = json.loads(tool.parameters) if tool.parameters else {"type": "object", "properties": {}}
        schema = strict_schema(params)
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        required = set(schema.get("required", [])) if isinstance(schema, dict) else set()
        parts = []
        for j, (key, prop) in enumerate(props.items()):
            rule = f"t{i}p{j}"
            rules.append(f"{rule}: {json.dumps(f'<parameter={key}>' + chr(10))} {rule}v")
            value = _xml_value(prop)
            if value.startswith("/"):  # a string: one lexeme up to the first closer
                rules.append(f"{rule}v: {value}")
            else:
                rules += [f"{rule}v: {rule}j {json.dumps(_XML_CLOSE)}", f"{rule}j: {value}"]
            parts.append(rule if key in required else f"{rule}?")
        head = json.dumps(f"<function={tool.name}>\n")
        rules.append(f"t{i}: {head} {' '.join(parts)} \"</function>\"")
        names.append(f"t{i}")
    return [f"body: {' | '.join(names)}", *rules]


def _xml_value(prop: Any) -> str:
    kinds = prop.get("type") if isinstance(prop, dict) else None
    if kinds == "string" and isinstance(prop, dict):
        if isinstance(prop.get("enum"), list) and all(isinstance(v, str) for v in prop["enum"]):
            return " | ".join(json.dumps(v) for v in prop["enum"])
        avoid = _avoiding(_XML_CLOSE.rstrip()) + _XML_CLOSE
        return "/" + avoid.replace(chr(10), "\\n").replace("/", "\\/") + "/"
    if kinds == "boolean":
        return '"true" | "false" | "True" | "False"'
    return _json(prop if isinstance(prop, dict) else {})


def _text_rule(create: gateway_pb2.CreateResponse) -> str | None:
    """The text format as a grammar expression (None: free text)."""
    if not create.HasField("text_format"):
        return None
    fmt = create.text_format
    field = "create_response.text_format.json_schema"
    if not fmt.json_schema:
        return _json({"type": "object"})
    try:
        schema = json.loads(fmt.json_schema)
    except ValueError as e:
        raise invalid(field, f"not valid JSON: {e}") from None
    if not isinstance(schema, dict):
        raise invalid(field, "a JSON Schema must be an object")
    return _json(strict_schema(schema) if fmt.strict else schema)


def _none_grammar(model: ModelDefinition) -> str:
    if model.tool_call_format == "llama3_json":
        return f"start: FREE\nFREE: {_LLAMA_FREE}\n"
    fmt = FORMATS.get(model.tool_call_format)
    opener = fmt.opener.strip() if fmt else "<tool_call>"
    if model.tool_call_format == "mistral":
        opener = "[TOOL_CALLS]"
    return f"start: TEXT\nTEXT: /{_avoiding(opener)}/\n"
