"""The harness's estimate of a tool pause errs early (a late prefetch costs the whole copy in the
next TTFT, an early one only keeps the blocks on the device longer), and an approval's pause ends
with the decided tools' own, or at once when they are short."""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwire.harness import kv_hints
from loopwire.harness.kv_hints import KvHints, PauseEstimate
from loopwire.v1 import common_pb2

pytestmark = pytest.mark.timeout(60)
PAUSE, RESUME = common_pb2.KV_HINT_PHASE_PAUSE, common_pb2.KV_HINT_PHASE_RESUME


def shell(cmd: str) -> common_pb2.FunctionCall:
    return common_pb2.FunctionCall(name="shell", arguments=json.dumps({"command": cmd}))


def test_an_unseen_command_is_expected_at_the_early_quantile_of_the_default() -> None:
    expected = PauseEstimate().expected_ms(shell("pytest -x"))
    assert expected == int(kv_hints.DEFAULT_PAUSE_MS * math.exp(-kv_hints.EARLY_QUANTILE_Z * kv_hints.PRIOR_LOG_SPREAD))
    assert expected < kv_hints.DEFAULT_PAUSE_MS


def test_a_command_that_always_takes_as_long_is_expected_to_take_that_long() -> None:
    estimate = PauseEstimate()
    for _ in range(kv_hints.MIN_SPREAD_RUNS):
        estimate.observe(shell("pytest tests/a.py"), 4.0)
    assert estimate.expected_ms(shell("pytest -k other")) in (3999, 4000)  # the program is the key
    assert estimate.expected_ms(shell("ls")) < 1000  # another program: unseen


@given(st.lists(st.floats(0.01, 3600), min_size=1, max_size=12))
def test_the_estimate_is_never_later_than_the_runs_geometric_mean(runs: list[float]) -> None:
    estimate = PauseEstimate()
    for s in runs:
        estimate.observe(shell("make"), s)
    kept = runs[-kv_hints.RUNS_KEPT:]
    geometric_mean_ms = math.exp(sum(math.log(s) for s in kept) / len(kept)) * 1000
    assert estimate.expected_ms(shell("make")) <= geometric_mean_ms + 1


def test_on_spread_out_tool_times_few_pauses_end_before_their_estimate() -> None:
    """Lognormal run times (σ 1, a 20 s median): the next run is shorter than the estimate from
    the runs before it in about 1 pause in 10 at most (a mean would be late half the time)."""
    rng = np.random.default_rng(7)
    early = late = 0
    for _ in range(400):
        estimate = PauseEstimate()
        for s in 20 * np.exp(rng.standard_normal(6)):
            estimate.observe(shell("pytest"), float(s))
        nxt = 20 * math.exp(rng.standard_normal()) * 1000
        early += estimate.expected_ms(shell("pytest")) <= nxt
        late += estimate.expected_ms(shell("pytest")) > nxt
    assert late / (early + late) < 0.1


def test_a_session_remembers_a_bounded_number_of_commands_the_latest_run() -> None:
    estimate = PauseEstimate()
    for n in range(kv_hints.KEYS_KEPT + 50):
        estimate.observe(common_pb2.FunctionCall(name=f"tool{n}"), 30.0)
    assert len(estimate._log_s) == kv_hints.KEYS_KEPT
    assert estimate.expected_ms(common_pb2.FunctionCall(name=f"tool{kv_hints.KEYS_KEPT + 49}")) > 1000
    assert estimate.expected_ms(common_pb2.FunctionCall(name="tool0")) < 1000  # forgotten: unseen again


def test_an_exec_calls_yield_window_caps_the_estimate() -> None:
    estimate = PauseEstimate()
    call = common_pb2.FunctionCall(name="exec_command", arguments=json.dumps({"cmd": "sleep 100", "yield_time_ms": 1500}))
    for _ in range(3):
        estimate.observe(call, 100.0)
    assert estimate.expected_ms(call) == 1500


class FakeConversation:
    stateful = True
    last_response_id = "resp-1"

    def __init__(self) -> None:
        self.hints: list[tuple[int, common_pb2.KvHint]] = []
        self.sent = asyncio.Event()

    async def hold_kv(self, seconds: int, hint: common_pb2.KvHint | None = None) -> None:
        assert hint is not None
        self.hints.append((seconds, hint))
        self.sent.set()


def hints_of(conversation: FakeConversation) -> KvHints:
    return KvHints(SimpleNamespace(conversation=conversation, max_retention=600))  # type: ignore[arg-type]


async def test_decided_short_tools_end_the_approvals_pause_at_once() -> None:
    conversation = FakeConversation()
    tool_ends = asyncio.Event()
    task = asyncio.ensure_future(tool_ends.wait())
    sent = hints_of(conversation).around([shell("ls")], [task], after_approval=True)
    await asyncio.wait_for(conversation.sent.wait(), 30)
    assert [h.phase for _, h in conversation.hints] == [RESUME]  # before the tool ended
    assert not task.done()
    tool_ends.set()
    await sent


async def test_an_approval_that_denied_every_call_ends_its_pause_at_once() -> None:
    conversation = FakeConversation()
    await hints_of(conversation).around([], [], after_approval=True)
    assert [h.phase for _, h in conversation.hints] == [RESUME]


async def test_a_short_tool_that_outruns_its_estimate_gets_a_late_pause_then_its_resume() -> None:
    """Without the late hint a tool expected short but running for minutes had its blocks neither
    kept nor brought back; the late one expects it back any moment (it is already past its estimate)."""
    conversation = FakeConversation()
    hints = hints_of(conversation)
    hints.estimate.observe(shell("python -c 'print(1)'"), 0.2)
    tool_ends = asyncio.Event()
    task = asyncio.ensure_future(tool_ends.wait())
    sent = hints.around([shell("python -c 'import time; time.sleep(60)'")], [task])
    await asyncio.wait_for(conversation.sent.wait(), 30)
    (seconds, pause), = conversation.hints
    assert pause.phase == PAUSE and seconds == 600
    assert pause.expected_pause_ms == 1  # past its estimate: back any moment
    assert not task.done()
    tool_ends.set()
    await sent
    assert [h.phase for _, h in conversation.hints] == [PAUSE, RESUME]


async def test_decided_long_tools_pause_until_they_end() -> None:
    conversation = FakeConversation()
    hints = hints_of(conversation)
    for _ in range(3):
        hints.estimate.observe(shell("pytest"), 30.0)
    tool_ends = asyncio.Event()
    task = asyncio.ensure_future(tool_ends.wait())
    sent = hints.around([shell("pytest -x")], [task], after_approval=True)
    await asyncio.wait_for(conversation.sent.wait(), 30)
    (seconds, pause), = conversation.hints
    assert pause.phase == PAUSE and 29_000 <= pause.expected_pause_ms <= 30_000 and seconds == 600
    tool_ends.set()
    await sent
    assert [h.phase for _, h in conversation.hints] == [PAUSE, RESUME]


async def test_short_tools_outside_an_approval_send_nothing() -> None:
    conversation = FakeConversation()
    task = asyncio.ensure_future(asyncio.sleep(0))
    await task  # ended before the hint looks: no wait on the late hint's window decides this
    await hints_of(conversation).around([shell("ls")], [task])
    assert conversation.hints == []
