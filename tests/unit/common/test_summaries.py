"""When a summary is unusable, and the masked conversation that stands in for it (the api's
``/v1/responses/compact`` answers it rather than an error)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common import masking
from loopwire.common.summaries import degenerate, masked_history
from loopwire.v1 import common_pb2


def msg(role: int, text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=role, content=[common_pb2.ContentPart(text=text)]))  # type: ignore[arg-type]


def call(cid: str, name: str = "shell", arguments: str = "{}") -> common_pb2.Item:
    return common_pb2.Item(function_call=common_pb2.FunctionCall(call_id=cid, name=name, arguments=arguments))


def out(cid: str, text: str) -> common_pb2.Item:
    return common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(call_id=cid, output=text))


USER, ASSISTANT = common_pb2.ROLE_USER, common_pb2.ROLE_ASSISTANT
LOG = "\n".join(f"line {i} of the build: ok" for i in range(400))


def test_loops_are_degenerate_and_prose_is_not():
    assert degenerate(" ".join(f"{i}. {i}. {i}." for i in range(1, 40)), 200, 512).startswith("it repeats itself")
    assert degenerate("- done\n" * 60, 200, 512).startswith("it repeats itself")
    prose = ("The task: make the parser accept trailing commas in services/parse.py. I read parse.py and "
             "test_parse.py, ran pytest (3 failures: test_trailing, test_nested, test_empty), changed "
             "_items() to skip a comma before a closing bracket, and reran: all 41 tests pass. Decided to "
             "keep the strict mode flag. Remaining: update the changelog and the README's grammar section.")
    assert not degenerate(prose, 90, 512)


def test_read_outputs_are_elided_the_unread_one_kept_and_the_kept_users_left_out():
    items = [msg(USER, "TASK: build it"), call("c1"), out("c1", LOG), msg(ASSISTANT, "Built; testing next."),
             msg(USER, "a middle request"), msg(USER, "LATEST: run the tests"), call("c2", arguments='{"command": "make test"}'),
             out("c2", "2 failed")]
    text = masked_history(items, "it hit the 512-token output cap", 2048)
    lines = text.splitlines()
    assert lines[0] == ("[No summary was written (it hit the 512-token output cap). The conversation so far, with "
                        "the tool outputs already read elided:]")
    assert lines[1:] == ["call shell (c1): {}", f"output of c1: {masking.elided('c1', 'shell', masking.count(LOG))}",
                         "assistant: Built; testing next.", "user: a middle request",
                         'call shell (c2): {"command": "make test"}', "output of c2: 2 failed"]


def test_a_short_read_output_stays_as_it_is_and_long_entries_are_cut():
    items = [msg(USER, "go"), call("c1"), out("c1", "ok"), msg(ASSISTANT, LOG)]
    text = masked_history(items, "why", 4096, entry_tokens=64)
    assert "output of c1: ok" in text  # its pointer would be longer
    assert "tokens cut here]" in text and masking.count(text) < masking.count(LOG) // 4


def test_only_the_newest_entries_that_fit_are_kept():
    items = [msg(USER, "go"), *[x for i in range(30) for x in (call(f"c{i}", arguments=f'{{"n": {i}}}'),
                                                               out(f"c{i}", f"result {i}"))]]
    text = masked_history(items, "why", 100)
    body = text.split(":]\n", 1)[1]
    assert masking.count(body) <= 100
    assert "oldest entries dropped" in text.splitlines()[0] and body.endswith("output of c29: result 29")


ROLES = st.sampled_from([USER, ASSISTANT, common_pb2.ROLE_SYSTEM])
TEXT = st.text(min_size=0, max_size=300)
ENTRY = st.one_of(st.tuples(st.just("message"), ROLES, TEXT), st.tuples(st.just("call"), st.integers(0, 5), TEXT),
                  st.tuples(st.just("output"), st.integers(0, 5), TEXT))


def _items(entries: list[tuple]) -> list[common_pb2.Item]:
    made = []
    for kind, a, text in entries:
        made.append(msg(a, text) if kind == "message" else call(f"c{a}", arguments=text) if kind == "call"
                    else out(f"c{a}", text))
    return made


@settings(max_examples=60, deadline=None)
@given(st.lists(ENTRY, max_size=25), st.integers(0, 600))
def test_the_masked_text_is_deterministic_and_within_its_budget(entries, budget):
    items = _items(entries)
    text = masked_history(items, "why", budget)
    assert text == masked_history(list(items), "why", budget)
    header, _, body = text.partition("\n")
    assert header.startswith("[No summary was written (why).")
    # Each kept entry was counted with a newline: the body never exceeds the budget by more than
    # what joining them can merge (at most one token per entry).
    entries_shown = len(body.split("\n")) if body else 0
    assert masking.count(body) <= budget + entries_shown
