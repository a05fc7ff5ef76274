"""A model's own Jinja ``chat_template``, rendered the way transformers' ``apply_chat_template`` does.

Same environment (sandboxed, ``trim_blocks``, ``lstrip_blocks``, loop controls), same
helpers (``raise_exception``, ``tojson`` without ASCII escaping, ``strftime_now``) and the
same variables (``messages``, ``tools``, ``add_generation_prompt``, ``bos_token``,
``eos_token``), and the same ``{% generation %}`` tag, so a template behaves here as it does
in the ecosystem it came from.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The think markers of reasoning templates (Qwen3, DeepSeek-R1 and their kin): the model writes
# its reasoning between them, before the answer.
THINK_MARKERS = (("<think>", "</think>"),)


def think_markers(source: str) -> tuple[str, str] | None:
    """The (opener, closer) a template's model reasons between, None for a template that does not think."""
    for opener, closer in THINK_MARKERS:
        if opener in source and closer in source:
            return opener, closer
    return None


class ChatTemplateError(ValueError):
    """The template does not compile, or raised while rendering (names the cause)."""


class GenerationTag(Extension):
    """``{% generation %}...{% endgeneration %}``, which training templates wrap around the
    assistant's turns so transformers can build an assistant-token mask. Rendering is not
    affected: the body renders unchanged, in its own scope, as transformers' call block does."""

    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    @staticmethod
    def _render_body(caller: Any) -> str:
        return str(caller())


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols", GenerationTag])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(f"chat template does not compile: {e}") from None
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        # Whether the template lays out tools and tool calls itself (else the prompt layer does).
        self.handles_tools = "tools" in source
        self.handles_tool_calls = "tool_calls" in source
        self.think = think_markers(source)
        self._opens_think: bool | None = None
        # Whether the template reads ``enable_thinking`` (Qwen3-style: false skips the think block).
        self.takes_enable_thinking = "enable_thinking" in source
        self.variables: dict[str, Any] = {}  # extra variables every render gets (see ``variant``)
        self._variants: dict[tuple[tuple[str, Any], ...], ChatTemplate] = {}

    def variant(self, **variables: Any) -> ChatTemplate:
        """This template rendered with extra variables (``enable_thinking``), sharing its compiled
        form; one object per set of values, so what is learnt about a template's renderings (the
        gateway's windowed rendering) is kept per variant."""
        if not variables:
            return self
        key = tuple(sorted(variables.items()))
        got = self._variants.get(key)
        if got is None:
            got = ChatTemplate.__new__(ChatTemplate)
            got.__dict__.update(self.__dict__)
            got.variables, got._variants, got._opens_think = dict(variables), {}, None
            self._variants[key] = got
        return got

    @property
    def opens_think(self) -> bool:
        """Whether the generation prompt itself opens the think block (the output starts inside it)."""
        if self._opens_think is None:
            opened = False
            if self.think is not None:
                try:
                    prompt = self.render([{"role": "user", "content": "x"}], add_generation_prompt=True)
                except ChatTemplateError:
                    prompt = ""
                opened = prompt.rstrip().endswith(self.think[0])
            self._opens_think = opened
        return self._opens_think

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = False) -> str:
        try:
            return self._template.render(
                messages=messages,
                tools=tools or None,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **self.variables,
            )
        except jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(f"chat template failed to render: {e}") from None
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            raise ChatTemplateError(f"chat template failed to render: {type(e).__name__}: {e}") from None
