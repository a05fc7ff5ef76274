"""Tool arguments that are not Unicode text (JSON "\\ud800" escapes decode to lone surrogates,
which no path, file body or command can hold) are tool errors the model reads, never a crash."""

from __future__ import annotations

import pytest
from harness_testkit import answer, call, harness_env, kinds, of

from loopwire.harness import tools
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.sandbox import Sandbox
from loopwire.v1 import common_pb2

pytestmark = pytest.mark.timeout(120)

LONE = "\\ud800"  # as JSON text: the escape of a lone high surrogate


@pytest.mark.parametrize(("name", "arguments", "field"), [
    ("edit_file", f'{{"path": "a.txt", "search": "ab", "replace": "{LONE}"}}', "replace"),
    ("edit_file", f'{{"path": "new.txt", "replace": "x{LONE}y"}}', "replace"),
    ("edit_file", f'{{"path": "a.txt", "search": "{LONE}", "replace": "q"}}', "search"),
    ("edit_file", f'{{"path": "{LONE}.txt", "replace": "q"}}', "path"),
    ("edit_file", f'{{"path": "b.txt", "diff": "@@ -0,0 +1 @@\\n+{LONE}\\n"}}', "diff"),
    ("read_file", f'{{"path": "{LONE}"}}', "path"),
    ("list", f'{{"path": "{LONE}"}}', "path"),
    ("grep", f'{{"pattern": "{LONE}"}}', "pattern"),
    ("grep", f'{{"pattern": "a", "path": "{LONE}"}}', "path"),
    ("shell", f'{{"command": "echo {LONE}"}}', "command"),
    ("shell", f'{{"command": "true", "{LONE}": 1}}', "\\ud800"),
])
async def test_lone_surrogates_in_arguments_are_tool_errors(tmp_path, name, arguments, field):
    (tmp_path / "a.txt").write_text("ab\n")
    ctx = tools.ToolContext(tmp_path, Sandbox(output_limit=2048), BackgroundTasks(), shell_timeout=10,
                            background_after=5)
    out = await tools.execute(common_pb2.FunctionCall(call_id="c", name=name, arguments=arguments), ctx)
    assert out.is_error and f"{field} is not valid Unicode text" in out.output
    out.output.encode("utf-8")
    assert (tmp_path / "a.txt").read_text() == "ab\n"


async def test_deeply_nested_arguments_are_a_tool_error(tmp_path):
    ctx = tools.ToolContext(tmp_path, Sandbox(output_limit=2048), BackgroundTasks(), shell_timeout=10,
                            background_after=5)
    out = await tools.execute(common_pb2.FunctionCall(call_id="c", name="list", arguments="[" * 100_000), ctx)
    assert out.is_error and "not valid JSON" in out.output


async def test_a_run_survives_a_lone_surrogate_edit(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [
            answer("", call("edit_file", f'{{"path": "a.txt", "replace": "{LONE}"}}')),
            answer("survived"),
        ]
        events = await h.start("write a surrogate")
        assert kinds(events)[-1] == "completed"
        ended = of(events, "tool_call_ended")
        assert ended[0].is_error and "replace is not valid Unicode text" in ended[0].output
