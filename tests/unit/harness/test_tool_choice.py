"""Tool choice in the harness: a `required` session calls a tool every turn and ends with `finish`."""

from __future__ import annotations

from harness_testkit import answer, call, harness_env, kinds, of

from loopwire.harness import tools
from loopwire.harness.config import REQUIRED_TOOLS_INSTRUCTIONS
from loopwire.v1 import common_pb2, harness_pb2

REQUIRED = common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_REQUIRED)


async def test_a_required_session_acts_first_and_ends_with_finish(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.script = [answer("", call("shell", '{"command": "echo hi > hello.txt"}')),
                            answer("", call("finish", '{"answer": "hello.txt holds hi"}'))]
        events = await h.start("Create hello.txt containing hi", model=harness_pb2.ModelOptions(tool_choice=REQUIRED))
        assert kinds(events)[-1] == "completed", events
        assert of(events, "completed")[0].final_text == "hello.txt holds hi"
        first, second = h.gateway.requests
        assert first.tool_choice.mode == common_pb2.TOOL_CHOICE_MODE_REQUIRED
        # The first call cannot be finish; after an action it can.
        assert tools.FINISH not in first.tool_choice.allowed_tools and "shell" in first.tool_choice.allowed_tools
        assert list(second.tool_choice.allowed_tools) == []
        assert tools.FINISH in [t.name for t in first.tools] and first.instructions == REQUIRED_TOOLS_INSTRUCTIONS
        sid = of(events, "started")[0].session_id
        assert (tmp_path / "workspaces" / "tenant-t1" / sid / "hello.txt").read_text() == "hi\n"


async def test_the_harness_default_applies_only_when_the_session_does_not_choose(tmp_path):
    async with harness_env(tmp_path, tool_choice="required") as h:
        h.gateway.script = [answer("", call("finish", '{"answer": "x"}')), answer("plain answer")]
        await h.start("by default")
        chosen = harness_pb2.ModelOptions(tool_choice=common_pb2.ToolChoice(mode=common_pb2.TOOL_CHOICE_MODE_UNSPECIFIED))
        events = await h.start("auto, chosen", model=chosen)
        assert of(events, "completed")[0].final_text == "plain answer"
        by_default, auto = h.gateway.requests
        assert by_default.tool_choice.mode == common_pb2.TOOL_CHOICE_MODE_REQUIRED
        assert auto.tool_choice.mode == common_pb2.TOOL_CHOICE_MODE_UNSPECIFIED
        assert tools.FINISH not in [t.name for t in auto.tools]  # an auto session answers in text


async def test_a_named_function_is_refused_for_a_session(tmp_path):
    async with harness_env(tmp_path) as h:
        named = harness_pb2.ModelOptions(tool_choice=common_pb2.ToolChoice(
            mode=common_pb2.TOOL_CHOICE_MODE_FUNCTION, function_name="shell"))
        failed = of(await h.start("x", model=named), "failed")
        assert failed and failed[0].error.field == "start.model.tool_choice" and h.gateway.requests == []


async def test_the_shell_tool_set_offers_shell_and_finish_only(tmp_path):
    async with harness_env(tmp_path, tool_set="shell") as h:
        h.gateway.script = [answer("", call("finish", '{"answer": "x"}')), answer("plain")]
        await h.start("required", model=harness_pb2.ModelOptions(tool_choice=REQUIRED))
        await h.start("auto")
        required, auto = h.gateway.requests
        assert [t.name for t in required.tools] == ["finish", "shell"]
        assert list(required.tool_choice.allowed_tools) == ["shell"]
        assert [t.name for t in auto.tools] == ["shell"]


async def test_one_line_says_when_loopwire_lays_out_the_tools_for_the_model(tmp_path):
    for lays_out in (False, True):
        (tmp_path / str(lays_out)).mkdir()
        async with harness_env(tmp_path / str(lays_out)) as h:
            h.gateway.template_lays_out_tools = lays_out
            h.gateway.script = [answer("done")]
            events = await h.start("say done")
            assert kinds(events)[-1] == "completed"
            said = [d.message for d in of(events, "diagnostic") if "no tool support" in d.message]
            if lays_out:
                assert said == []
            else:
                assert len(said) == 1 and said[0].startswith("fake's chat template has no tool support")
                assert "parses hermes calls" in said[0]


async def test_a_new_session_asks_the_gateway_what_it_serves_again(tmp_path):
    """What a gateway says of its model is the session's, not the process's: a gateway that now
    serves a template without tool support (another model at the same address) is seen as such."""
    async with harness_env(tmp_path) as h:
        h.gateway.template_lays_out_tools = True
        h.gateway.script = [answer("done")]
        first = await h.start("say done")
        assert not [d for d in of(first, "diagnostic") if "no tool support" in d.message]
        h.gateway.template_lays_out_tools = False
        h.gateway.script = [answer("done")]
        second = await h.start("say done")
        said = [d.message for d in of(second, "diagnostic") if "no tool support" in d.message]
        assert len(said) == 1
