"""The outbox of a Generate stream: its responses waiting for the stream's writer, with the
tokens of one request coalesced into as few messages as the coalescing window allows."""

from __future__ import annotations

import asyncio
import time
from collections import deque

from loopwire.inference.logprobs import TokenLogprobs
from loopwire.v1 import inference_pb2

# Coalescing window: tokens of a generation that follow its first wait up to this long for more
# of the same request to join their message (0: a message per engine step unless the writer lags).
# Chosen by bench/bench_relay.py: a gateway's CPU goes to per-message work, and 8 ms joins about
# two steps of an 8B decode (4-6 ms a step on an H200) and several of a 1B one, at most 8 ms late
# per token (under one 60 Hz frame); 2 ms barely changes an 8B stream. Time to first token is untouched.
COALESCE_WINDOW_S = 0.008
COALESCE_MAX_TOKENS = 16  # a pending batch this long leaves at once, window or not


class _TokenRun:
    __slots__ = ("request_id", "token_ids", "due", "logprobs")

    def __init__(self, request_id: str, token_ids: list[int], due: float,
                 logprobs: list[TokenLogprobs] | None = None) -> None:
        self.request_id = request_id
        self.token_ids = token_ids
        self.due = due  # when it may leave (0: now)
        self.logprobs = logprobs  # one per token when the request asked, joined with them

    def batch(self) -> inference_pb2.TokenBatch:
        batch = inference_pb2.TokenBatch(token_ids=self.token_ids)
        for lp in self.logprobs or ():
            batch.logprobs.add(logprob=lp.logprob, top=[{"token_id": t, "logprob": v} for t, v in lp.top])
        return batch


class Outbox:
    """The responses of one stream waiting for its writer. Tokens of a request that arrive
    while an earlier batch of it is still queued join that batch (coalescing); a later
    response of the request (finish, error) closes the batch so order is kept.

    With a window, a batch that is not a generation's first waits up to ``window_s`` (or
    until it holds ``max_tokens``, or the request's next response closes it) for more tokens
    of its request, so a fast decode costs a message per window rather than per step. The
    first tokens of a generation never wait: time to first token is not traded away."""

    def __init__(self, window_s: float = 0.0, max_tokens: int = COALESCE_MAX_TOKENS) -> None:
        self._entries: deque[_TokenRun | inference_pb2.GenerateResponse | None] = deque()
        self._open: dict[str, _TokenRun] = {}
        self._ready = asyncio.Event()
        self.window_s = window_s
        self.max_tokens = max(1, max_tokens)
        self._started: set[str] = set()  # requests whose first tokens were queued
        self._timer: asyncio.TimerHandle | None = None

    def tokens(self, request_id: str, token_ids: list[int], logprobs: list[TokenLogprobs] | None = None) -> None:
        if not token_ids:
            return
        run = self._open.get(request_id)
        if run is not None:
            run.token_ids.extend(token_ids)
            if logprobs is not None:
                if run.logprobs is None:
                    run.logprobs = []
                run.logprobs.extend(logprobs)
            if run.due and len(run.token_ids) >= self.max_tokens:
                run.due = 0.0
                self._ready.set()
            return
        due = 0.0
        if self.window_s > 0:
            if request_id in self._started:
                if len(token_ids) < self.max_tokens:
                    due = time.monotonic() + self.window_s
            else:
                self._started.add(request_id)
        run = self._open[request_id] = _TokenRun(request_id, list(token_ids), due,
                                                 None if logprobs is None else list(logprobs))
        self._entries.append(run)
        self._ready.set()

    def put(self, response: inference_pb2.GenerateResponse) -> None:
        run = self._open.pop(response.request_id, None)
        if run is not None:
            run.due = 0.0  # what follows it may not wait behind it
        if response.WhichOneof("event") in ("finished", "error"):
            self._started.discard(response.request_id)
        self._entries.append(response)
        self._ready.set()

    def close(self) -> None:
        for run in self._open.values():
            run.due = 0.0  # the stream ends: nothing waits any more
        self._entries.append(None)
        self._ready.set()

    async def take(self) -> inference_pb2.GenerateResponse | None:
        entries = self._entries
        while True:
            while not entries:
                self._ready.clear()
                await self._ready.wait()
            head = entries[0]
            if not isinstance(head, _TokenRun) or not head.due or head.due <= time.monotonic():
                entry = entries.popleft()
                break
            # The head batch waits for more tokens: what another request has ready need not wait behind it.
            at, due = self._ready_behind(time.monotonic())
            if at >= 0:
                entry = entries[at]
                del entries[at]
                break
            self._ready.clear()
            if self._timer is not None:
                self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_later(due - time.monotonic(), self._ready.set)
            await self._ready.wait()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if isinstance(entry, _TokenRun):
            if self._open.get(entry.request_id) is entry:
                del self._open[entry.request_id]
            return inference_pb2.GenerateResponse(request_id=entry.request_id, tokens=entry.batch())
        return entry

    def _ready_behind(self, now: float) -> tuple[int, float]:
        """The first entry that may leave now with nothing of its request before it (-1 if none),
        and when the soonest waiting batch is due."""
        waiting: set[str] = set()
        soonest = float("inf")
        for i, entry in enumerate(self._entries):
            if entry is None:
                break  # the end of the stream leaves last
            rid = entry.request_id
            if rid in waiting:
                continue
            if isinstance(entry, _TokenRun) and entry.due > now:
                waiting.add(rid)
                soonest = min(soonest, entry.due)
                continue
            return i, soonest
        return -1, soonest
