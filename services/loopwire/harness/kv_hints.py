"""KV hints around a tool pause: while a turn's tools run, the session's KV need not stay on the
device, but it must be there again when the next request arrives.

When the model's response is done and some of its tool calls still run, the harness tells the
gateway the session pauses, and for about how long: an exec call's yield window, else what the
same command (or tool) took earlier in this session, else a default. The replica that holds the
conversation then lets its blocks leave the device first under memory pressure, for the host
tier, instead of keeping them pinned, and starts bringing them back shortly before the expected
end. The moment the last of those tools ends, the harness says so (a resume hint), so the
replica copies what is left back while the harness stores the outputs and builds the request.

A hint never holds a session up: one the gateway refuses or cannot deliver is logged and the
turn goes on. Hints are sent only when the tenant's policy allows KV retention at all
(max_retention_seconds), and a pause never counts longer than that ceiling.
"""

from __future__ import annotations

import asyncio
import logging
import math
import shlex
import statistics
from collections import OrderedDict
from typing import TYPE_CHECKING

from loopwire.common import json_limits
from loopwire.harness.command_keys import command_keys
from loopwire.harness.conversation import GatewayError
from loopwire.v1 import common_pb2

if TYPE_CHECKING:
    from loopwire.harness.loop import SessionRun

log = logging.getLogger("loopwire.harness")

MIN_PAUSE_MS = 1000  # a shorter pause is not worth a round trip: the blocks would not move
LATE_PAUSE_MS = 1  # a late pause hint's expected pause: its tools are past their estimate, back any moment
DEFAULT_PAUSE_MS = 5000  # a command or tool never seen before in the session: its likely length
PRIOR_LOG_SPREAD = 1.0  # the spread (σ of the log) of a command's run times, until its own is known
MIN_SPREAD_RUNS = 3  # runs of a command before their own spread is used
RUNS_KEPT = 8  # the last runs of each command an estimate is fitted to
KEYS_KEPT = 512  # commands a session's estimate remembers (a bound, whatever the session runs)
EARLY_QUANTILE_Z = 2.0  # the estimate is the 2.3% quantile: about 39 pauses in 40 last at least that long
EXEC_TOOLS = ("exec_command", "write_stdin")  # wait at most their yield window
COMMAND_TOOLS = ("shell", "exec_command")  # their arguments name the program they run


def call_keys(call: common_pb2.FunctionCall) -> list[str]:
    """What a call's duration is remembered by, most specific first: for a shell command, what its
    line runs (``command_keys``: ``pip install``, then ``pip``; the tool's name when it names no
    program); other tools by their name alone (their arguments are never parsed here: an edit's
    can be megabytes)."""
    if call.name not in COMMAND_TOOLS:
        return [call.name]
    try:
        args = json_limits.loads(call.arguments or "{}")
    except ValueError:
        return [call.name]
    cmd = args.get("cmd") or args.get("command") if isinstance(args, dict) else None
    if isinstance(cmd, list):
        cmd = shlex.join(str(c) for c in cmd)
    if not isinstance(cmd, str):
        return [call.name]
    return [f"{call.name}:{key}" for key in command_keys(cmd)] or [call.name]


class PauseEstimate:
    """How long a session's tool calls will at least run, most of the time: the replica starts
    bringing the blocks back then, so the estimate errs early. Tool times spread several-fold
    (the same ``pytest`` takes 3 s or 60 s), so a mean would be late about half the time and a
    late prefetch costs the whole copy in the next TTFT, while an early one only keeps the blocks
    on the device a while longer. From what the same command took earlier in the session (by the
    most specific of its ``call_keys`` seen before): the low ``EARLY_QUANTILE_Z`` quantile of a
    lognormal fitted to its last runs (their own spread once there are ``MIN_SPREAD_RUNS``, else
    ``PRIOR_LOG_SPREAD``); never seen: the same quantile of ``DEFAULT_PAUSE_MS``. An exec call
    returns by its yield window at the latest, so the window caps it. At most ``KEYS_KEPT`` keys
    are remembered, the least recently run forgotten first."""

    def __init__(self) -> None:
        self._log_s: OrderedDict[str, list[float]] = OrderedDict()

    def observe(self, call: common_pb2.FunctionCall, seconds: float) -> None:
        for key in call_keys(call):
            runs = self._log_s.pop(key, [])
            runs.append(math.log(max(seconds, 1e-3)))
            del runs[:-RUNS_KEPT]
            self._log_s[key] = runs
        while len(self._log_s) > KEYS_KEPT:
            self._log_s.popitem(last=False)

    def expected_ms(self, call: common_pb2.FunctionCall) -> int:
        runs = next((r for key in call_keys(call) if (r := self._log_s.get(key))), None)
        if runs:
            spread = statistics.stdev(runs) if len(runs) >= MIN_SPREAD_RUNS else PRIOR_LOG_SPREAD
            early_s = math.exp(statistics.fmean(runs) - EARLY_QUANTILE_Z * spread)
            expected = int(early_s * 1000)
        else:
            expected = int(DEFAULT_PAUSE_MS * math.exp(-EARLY_QUANTILE_Z * PRIOR_LOG_SPREAD))
        window = _yield_window_ms(call)
        return min(expected, window) if window else expected


def _yield_window_ms(call: common_pb2.FunctionCall) -> int:
    """An exec call's ``yield_time_ms`` (0: not an exec call, or none given)."""
    if call.name not in EXEC_TOOLS:
        return 0
    try:
        args = json_limits.loads(call.arguments or "{}")
    except ValueError:
        return 0
    window = args.get("yield_time_ms") if isinstance(args, dict) else None
    return int(window) if isinstance(window, (int, float)) and window > 0 else 0


class KvHints:
    """One session's hints: the durations its tools took (``PauseEstimate``), and the hints it sends."""

    def __init__(self, run: SessionRun) -> None:
        self.run = run
        self.estimate = PauseEstimate()

    @property
    def enabled(self) -> bool:
        conversation = self.run.conversation
        return bool(conversation.stateful and self.run.max_retention > 0 and conversation.last_response_id)

    def observe(self, call: common_pb2.FunctionCall, seconds: float) -> None:
        """A tool ended: the next call of the same command is expected to take about as long."""
        if self.enabled:
            self.estimate.observe(call, seconds)

    async def pause(self, calls: list[common_pb2.FunctionCall], late: bool = False) -> bool:
        """The session pauses for the running ``calls``: say so when it is likely long enough to
        matter, or ``late``, once they have outrun ``MIN_PAUSE_MS`` against their estimate (then
        they are past it and expected back any moment: their blocks are kept, brought back at
        once, and stay until the resume). Whether a hint was accepted (a resume hint is then due)."""
        expected = LATE_PAUSE_MS if late else max((self.estimate.expected_ms(c) for c in calls), default=0)
        if not self.enabled or (not late and expected < MIN_PAUSE_MS):
            return False
        # It counts until the resume hint, which always follows: the tenant's ceiling only bounds
        # a pause whose harness went away (a shorter one let long tools' blocks lose their place).
        seconds = self.run.max_retention
        reason = "exec_yield" if all(c.name in EXEC_TOOLS for c in calls) else "command"
        hint = common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_PAUSE, expected_pause_ms=expected, reason=reason)
        return await self._send(seconds, hint)

    async def resume(self) -> None:
        await self._send(0, common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_RESUME))

    def around(self, calls: list[common_pb2.FunctionCall],
               tasks: list[asyncio.Task[common_pb2.FunctionCallOutput]],
               after_approval: bool = False) -> asyncio.Task[None]:
        """In the background, so the turn never waits on the gateway for it: the pause hint for
        the running ``calls``, then, if it was accepted, the resume hint as soon as the last of
        ``tasks`` ends (not after their outputs are stored). Calls expected to be short get no
        pause hint unless they outrun ``MIN_PAUSE_MS`` (a late one: the estimate was wrong, and
        without it their blocks would be neither kept nor brought back). ``after_approval``: the
        session was paused for an approval, now decided; the tools' pause replaces it, and when
        they are too short for one the resume comes at once (the decision is the earliest sign
        the session is back). Awaited before the next request uses the gateway stream."""
        async def pause_then_resume() -> None:
            paused = await self.pause(calls)
            if not paused:
                if after_approval and self.enabled:
                    await self.resume()
                if tasks and self.enabled:  # (an approval may have denied them all: nothing runs)
                    _, running = await asyncio.wait(tasks, timeout=MIN_PAUSE_MS / 1000)
                    paused = bool(running) and await self.pause(calls, late=True)
            if paused:
                await asyncio.wait(tasks)
                await self.resume()
        return asyncio.ensure_future(pause_then_resume())

    async def _send(self, seconds: int, hint: common_pb2.KvHint) -> bool:
        try:
            await self.run.conversation.hold_kv(seconds, hint=hint)
        except GatewayError as e:
            log.info("KV hint not applied: %s", e.error.message)
            return False
        return True
