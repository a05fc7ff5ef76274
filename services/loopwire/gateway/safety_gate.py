"""One response's safety checks beside inference, and which output may leave yet.

The input check races prefill (or runs first, the naive way), a window at a time, each window
of a local classifier on the gateway's fair work pool (a long prompt is never classified on
the event loop); the output checker reads the text as it is generated. Events wait here until the mode lets them out: nothing
before the input check passed, and in buffer mode no text past what the checker passed.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from loopwire.gateway.events import PROGRESS
from loopwire.gateway.safety import (
    ALLOWED,
    INPUT,
    OUTPUT,
    LocalClassifier,
    OutputChecker,
    SafetyClassifier,
    Verdict,
)
from loopwire.v1 import gateway_pb2

# Runs a classification of so many characters on the work pool, in the caller's tenant's turn.
Offload = Callable[[int, Callable[[], Verdict]], Awaitable[Verdict]]


@dataclass
class InputVerdict:
    verdict: Verdict
    us: int


class SafetyGate:
    def __init__(self, classifier: SafetyClassifier, mode: int, queue: asyncio.Queue[object],
                 offload: Offload) -> None:
        self.classifier = classifier
        self._offload = offload
        self.on = mode != gateway_pb2.SAFETY_MODE_OFF
        self.buffered = mode == gateway_pb2.SAFETY_MODE_BUFFER_UNTIL_PASS
        self.queue = queue  # the response's work queue: verdicts and progress wake it
        self.input_verdict: InputVerdict | None = None
        self.input_task: asyncio.Task[None] | None = None
        self.checker: OutputChecker | None = None
        self.pending: deque[tuple[int, gateway_pb2.ConverseResponse]] = deque()
        # Output text the checker cannot use yet (less than a chunk past what it checked): it is
        # handed over a chunk at a time, so the checker's task wakes per chunk, not per token.
        self._unsent: list[str] = []
        self._unsent_chars = 0
        self._chunk_chars = 1

    async def start(self, text: str, chunk_chars: int, overlap_chars: int, serial: bool,
                    input_window_chars: int) -> None:
        """Start the input check on ``text`` (awaited when ``serial``) and the output checker."""
        self.checker = OutputChecker(self.classifier, chunk_chars, overlap_chars,
                                     lambda: self.queue.put_nowait(PROGRESS))
        self._chunk_chars = max(1, chunk_chars)
        check = self._check_input(text, max(1, input_window_chars), max(0, overlap_chars))
        if serial:
            await check
        else:
            self.input_task = asyncio.create_task(check)

    async def _check_input(self, text: str, window_chars: int, overlap_chars: int) -> None:
        """Windows of ``window_chars``, each starting ``overlap_chars`` before it, as the output is
        checked: one window's work is bounded, and tenants' windows take turns on the pool."""
        t0 = time.perf_counter_ns()
        verdict = ALLOWED
        for start in range(0, len(text), window_chars):
            verdict = await self._classify_input(text[max(0, start - overlap_chars) : start + window_chars])
            if not verdict.allowed:
                break
        self.input_verdict = InputVerdict(verdict, (time.perf_counter_ns() - t0) // 1000)
        self.queue.put_nowait(PROGRESS)

    async def _classify_input(self, window: str) -> Verdict:
        if isinstance(self.classifier, LocalClassifier):
            return await self._offload(len(window), functools.partial(self.classifier.classify_now, window))
        return await self.classifier.classify(window, INPUT)  # a remote classifier: awaits its own service

    def stop(self) -> None:
        if self.input_task is not None:
            self.input_task.cancel()
        if self.checker is not None:
            self.checker.cancel()

    def hold(self, safety_offset: int, event: gateway_pb2.ConverseResponse) -> None:
        """Queue an output event that ends at ``safety_offset`` characters of checked text."""
        self.pending.append((safety_offset, event))

    def add_output(self, text: str) -> None:
        checker = self.checker
        if checker is None or not text:
            return
        self._unsent.append(text)
        self._unsent_chars += len(text)
        # The checker only acts once a whole chunk lies past what it checked (or at the end).
        if len(checker.text) + self._unsent_chars - checker.checked_chars >= self._chunk_chars:
            self._hand_over()

    def _hand_over(self) -> None:
        if self.checker is not None and self._unsent:
            self.checker.add("".join(self._unsent))
        self._unsent.clear()
        self._unsent_chars = 0

    def close_output(self) -> None:
        if self.checker is not None:
            self._hand_over()
            self.checker.close()

    @property
    def checked_chars(self) -> int:
        return self.checker.checked_chars if self.checker else 0

    @property
    def us(self) -> int:
        """Classifier time spent on this response (input and output)."""
        return (self.input_verdict.us if self.input_verdict else 0) + (self.checker.classifier_us if self.checker else 0)

    def violation(self) -> tuple[int, Verdict, int] | None:
        if self.input_verdict is not None and not self.input_verdict.verdict.allowed:
            return INPUT, self.input_verdict.verdict, self.input_verdict.us
        if self.checker is not None and self.checker.violation is not None:
            return OUTPUT, self.checker.violation, self.checker.classifier_us
        return None

    def done(self) -> bool:
        if not self.on:
            return True
        assert self.checker is not None
        return self.input_verdict is not None and self.checker.finished

    def releasable(self) -> list[gateway_pb2.ConverseResponse]:
        if self.on and self.input_verdict is None:
            return []  # nothing leaves before the input check passed (it races prefill)
        limit = self.checker.checked_chars if (self.buffered and self.checker is not None) else None
        out = []
        while self.pending and (limit is None or self.pending[0][0] <= limit):
            out.append(self.pending.popleft()[1])
        return out
