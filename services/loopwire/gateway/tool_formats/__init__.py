"""Tool-call formats, one module each, found by the model definition's ``tool_call_format``.

A format owns how its calls are told from text and streamed (its parser, with its own state
enum) and how they are constrained (its grammar); ``output_parser`` and ``tool_grammar`` keep
only what is the same for every format. A new format is a module and a line in ``FORMATS``.
"""

from __future__ import annotations

from loopwire.gateway.tool_formats.base import FormatParser, Sink, ToolFormat
from loopwire.gateway.tool_formats.hermes import Hermes
from loopwire.gateway.tool_formats.llama3_json import Llama3Json
from loopwire.gateway.tool_formats.mistral import Mistral
from loopwire.gateway.tool_formats.qwen3_coder import Qwen3Coder

FORMATS: dict[str, ToolFormat] = {f.name: f for f in (Hermes(), Llama3Json(), Mistral(), Qwen3Coder())}
DEFAULT = "hermes"  # the layout loopwire's own tool prompt asks for


def get(name: str) -> ToolFormat | None:
    """The format a model definition names (None: one loopwire does not know)."""
    return FORMATS.get(name or DEFAULT)


def parser_for(name: str, sink: Sink) -> FormatParser:
    """A parser for one response; a format loopwire does not know is read as Hermes."""
    return (get(name) or FORMATS[DEFAULT]).parser(sink)


__all__ = ["DEFAULT", "FORMATS", "FormatParser", "Sink", "ToolFormat", "get", "parser_for"]
