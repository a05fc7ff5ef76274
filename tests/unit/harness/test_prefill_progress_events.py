"""A turn's prefill progress reaches the Run stream (with its turn) and the terminal: a bar on a
terminal, a line per tenth of the prompt when piped, gone once the model's text starts."""

from __future__ import annotations

import io

from harness_testkit import answer, harness_env, kinds, of
from rich.console import Console

from loopwire.console import EventPrinter
from loopwire.v1 import common_pb2, harness_pb2


async def test_prefill_progress_is_relayed_with_its_turn_before_the_text(tmp_path):
    async with harness_env(tmp_path) as h:
        h.gateway.prefill_progress = [(128, 1000), (512, 1000), (896, 1000)]
        h.gateway.script = [answer("all done")]
        events = await h.start("summarize")
        assert kinds(events)[-1] == "completed"
        progress = of(events, "prefill_progress")
        assert [(p.turn, p.progress.processed_tokens, p.progress.total_tokens) for p in progress] == [
            (1, 128, 1000), (1, 512, 1000), (1, 896, 1000)]
        order = kinds(events)
        assert max(i for i, k in enumerate(order) if k == "prefill_progress") < order.index("text_delta")


def _progress(done: int, total: int = 1000) -> harness_pb2.RunResponse:
    return harness_pb2.RunResponse(prefill_progress=harness_pb2.RunPrefillProgress(
        turn=2, progress=common_pb2.PrefillProgress(processed_tokens=done, total_tokens=total)))


def test_piped_output_says_each_tenth_once_then_the_text():
    out = io.StringIO()
    printer = EventPrinter(Console(file=out, force_terminal=False, width=120))
    for done in (50, 120, 150, 199, 200, 650, 990):
        printer(_progress(done))
    printer(harness_pb2.RunResponse(text_delta=harness_pb2.RunTextDelta(turn=2, text="hello")))
    lines = out.getvalue().splitlines()
    assert lines[:5] == [f"prefill turn 2: {n}/1000 prompt tokens" for n in (50, 120, 200, 650, 990)]
    assert lines[5] == "assistant hello"


def test_a_terminal_gets_a_bar_that_goes_away_when_the_text_starts():
    out = io.StringIO()
    printer = EventPrinter(Console(file=out, force_terminal=True, width=120))
    printer(_progress(300))
    printer(_progress(700))
    assert printer._prefill is not None  # a live bar while the prefill runs
    printer(harness_pb2.RunResponse(text_delta=harness_pb2.RunTextDelta(turn=2, text="hello")))
    assert printer._prefill is None
    assert "prompt tokens" in out.getvalue() and out.getvalue().rstrip().endswith("hello")
