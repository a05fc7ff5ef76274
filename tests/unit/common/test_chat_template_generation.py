"""Chat templates with ``{% generation %}`` (assistant-mask markers) render as transformers
renders them.

Reference: tests/fixtures/chat_templates/expected.json, written by
scripts/transformers_chat_templates.py with transformers' own renderer from the four real
templates of the llama-cpp-python 0.3.36 sdist that use the tag (LFM2.5-8B-A1B and three
poolside Laguna), four conversations each (16 renderings, tools and tool calls included).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwire.common.chat_template import ChatTemplate, ChatTemplateError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "chat_templates"
DATA = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: f"{c['template']}:{c['conversation']}")
def test_renders_like_transformers(case: dict) -> None:
    source = (FIXTURES / case["template"]).read_text(encoding="utf-8")
    template = ChatTemplate(source, DATA["specials"]["bos_token"], DATA["specials"]["eos_token"])
    rendered = template.render(case["messages"], tools=case["tools"],
                               add_generation_prompt=case["add_generation_prompt"])
    assert rendered == case["rendered"]


def test_fixture_covers_generated_spans() -> None:
    """transformers parsed the tag in these cases (it reported assistant spans), so the
    comparison above exercises the tag's body, not only the text around it."""
    assert len(DATA["cases"]) == 16
    assert sum(bool(c["generation_spans"]) for c in DATA["cases"]) == 12


def test_body_renders_unchanged_in_its_own_scope() -> None:
    source = ("{% for m in messages %}{% generation %}{% set inner = 1 %}[{{ m.content }}]{% endgeneration %}"
              "{% endfor %}{{ inner is defined }}")
    assert ChatTemplate(source).render([{"role": "assistant", "content": "a"}]) == "[a]False"


def test_unclosed_generation_is_a_compile_error() -> None:
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% generation %}x")
