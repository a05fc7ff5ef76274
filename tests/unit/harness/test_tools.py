"""File tools and edits: confined to the workspace, readable errors for any bad input."""

from __future__ import annotations

import difflib
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwire.harness import tools
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.file_edit import apply_diff
from loopwire.harness.sandbox import Sandbox
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ctx(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return tools.ToolContext(ws, Sandbox(output_limit=2048), BackgroundTasks(), shell_timeout=10, background_after=5)


async def run(ctx, name: str, **args: object) -> tools.ToolOutcome:
    return await tools.execute(common_pb2.FunctionCall(call_id="c", name=name, arguments=json.dumps(args)), ctx)


def test_tool_list_is_sorted_and_fixed():
    assert [t.name for t in tools.tool_list()] == sorted(set(tools.TOOLS) - {tools.FINISH})
    assert tools.tool_list() == tools.tool_list()
    required = harness_pb2.StartTask(model=harness_pb2.ModelOptions(
        tool_choice=common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_REQUIRED)))
    assert [t.name for t in tools.tool_list(None, required)] == sorted(tools.TOOLS)  # finish ends such a session
    for t in tools.tool_list():
        assert json.loads(t.parameters)["type"] == "object"


async def test_edit_then_read_then_grep_then_list(ctx):
    assert not (await run(ctx, "edit_file", path="src/a.py", replace="x = 1\ny = 2\n")).is_error
    out = await run(ctx, "edit_file", path="src/a.py", search="y = 2", replace="y = 3")
    assert "1 replacement" in out.output
    assert "     2\ty = 3" in (await run(ctx, "read_file", path="src/a.py")).output
    assert (await run(ctx, "grep", pattern=r"y = \d")).output == "src/a.py:2:y = 3"
    assert (await run(ctx, "list")).output.splitlines() == ["src/", "src/a.py"]
    diff = "--- a/src/a.py\n+++ b/src/a.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 10\n y = 3\n"
    assert not (await run(ctx, "edit_file", path="src/a.py", diff=diff)).is_error
    assert (ctx.workspace / "src/a.py").read_text() == "x = 10\ny = 3\n"


@pytest.mark.parametrize(("name", "args", "message"), [
    ("edit_file", {"path": "a.txt", "search": "zzz", "replace": "q"}, "not found"),
    ("edit_file", {"path": "a.txt", "search": "ab", "replace": "q"}, "found 2 times"),
    ("edit_file", {"path": "a.txt", "diff": "@@ -1 +1 @@\n-nothing\n+x\n"}, "does not match"),
    ("edit_file", {"path": "a.txt", "diff": "just text"}, "no hunks"),
    ("read_file", {"path": "missing.txt"}, "no such file"),
    ("read_file", {"path": "../outside"}, "outside the workspace"),
    ("read_file", {"path": "link/passwd"}, "outside the workspace"),
    ("read_file", {"path": "bin.dat"}, "binary file"),
    ("read_file", {"path": "."}, "is a directory"),
    ("grep", {"pattern": "("}, "invalid regular expression"),
    ("list", {"path": "a.txt"}, "not a directory"),
    ("wait", {"handle": "bg-9"}, "no background command"),
    ("shell", {}, "missing required argument `command`"),
    ("shell", {"command": "true", "timeout_seconds": "soon"}, "wrong type"),
])
async def test_bad_calls_explain_themselves(ctx, name, args, message):
    (ctx.workspace / "a.txt").write_text("ab ab\n")
    (ctx.workspace / "bin.dat").write_bytes(b"\0\1\2")
    os.symlink("/etc", ctx.workspace / "link")
    out = await run(ctx, name, **args)
    assert out.is_error and message in out.output


async def test_non_utf8_file_names_are_listed_and_searched(ctx):
    raw = os.fsencode(str(ctx.workspace)) + b"/caf\xe9.txt"
    with open(raw, "wb") as f:
        f.write(b"needle\n")
    listed = (await run(ctx, "list")).output
    assert listed == "caf\\udce9.txt"  # escaped, so the transcript stays valid UTF-8
    found = (await run(ctx, "grep", pattern="needle")).output
    assert found.endswith(":1:needle") and found.encode("utf-8")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["read_file", "edit_file", "list", "grep", "wait", "nope", ""]),
       arguments=st.one_of(st.text(max_size=60), st.dictionaries(
           st.sampled_from(["path", "search", "replace", "diff", "pattern", "depth", "offset", "limit", "handle",
                            "glob", "replace_all", "timeout_seconds"]),
           st.one_of(st.text(max_size=20), st.integers(-5, 5), st.booleans(), st.none(), st.floats(0, 0.01)),
       ).map(json.dumps)))
async def test_fuzzed_calls_always_get_a_result(ctx, name, arguments):
    out = await tools.execute(common_pb2.FunctionCall(call_id="c", name=name, arguments=arguments), ctx)
    assert isinstance(out.output, str) and out.output
    out.output.encode("utf-8")


@given(old=st.lists(st.sampled_from(["a", "b", "c", "def f():", "    return 1", ""]), max_size=30),
       new=st.lists(st.sampled_from(["a", "b", "x", "def g():", "    return 2", ""]), max_size=30),
       context=st.integers(0, 3))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_unified_diffs_apply_exactly(tmp_path, old, new, context):
    path = tmp_path / "f.txt"
    path.write_text("".join(line + "\n" for line in old))
    diff = "".join(difflib.unified_diff([x + "\n" for x in old], [x + "\n" for x in new], "a/f.txt", "b/f.txt",
                                        n=context))
    if diff:
        apply_diff(tmp_path, "f.txt", diff)
    assert path.read_text() == "".join(line + "\n" for line in new)
