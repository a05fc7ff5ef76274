"""Constraint grammars as llguidance reads them, shared by the gateway (which builds and checks
them before anything runs) and inference (which compiles them against the model's tokenizer,
``inference.constraint.compiled``)."""

from __future__ import annotations

import json
from typing import Any

from loopwire.v1 import inference_pb2


class ConstraintError(ValueError):
    """A grammar that does not compile (the message names llguidance's reason)."""


def llguidance() -> Any:
    import llguidance as llg  # imported on first use: a service that never constrains never loads it

    return llg


def grammar_text(constraint: inference_pb2.Constraint) -> str:
    """The llguidance grammar of a Constraint message ('' when it sets none)."""
    llg = llguidance()
    kind = constraint.WhichOneof("grammar")
    try:
        if kind == "lark":
            return str(llg.LLMatcher.grammar_from_lark(constraint.lark))
        if kind == "json_schema":
            json.loads(constraint.json_schema)
            return str(llg.LLMatcher.grammar_from_json_schema(constraint.json_schema))
        if kind == "regex":
            return str(llg.LLMatcher.grammar_from_regex(constraint.regex))
    except ValueError as e:
        raise ConstraintError(f"{kind}: {e}") from None
    return ""


def check_grammar(grammar: str) -> None:
    """ConstraintError unless llguidance compiles ``grammar`` (for any tokenizer)."""
    error = llguidance().LLMatcher.validate_grammar(grammar, None)
    if error:
        raise ConstraintError(str(error))


def check_constraint(constraint: inference_pb2.Constraint) -> None:
    """ConstraintError unless the Constraint sets a grammar that compiles."""
    text = grammar_text(constraint)
    if not text:
        raise ConstraintError("set lark, json_schema or regex")
    check_grammar(text)
