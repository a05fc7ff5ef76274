"""The Converse events one response sends, and the signals its work queue carries.

One place builds the protos, so the relay, the safety gate and the stream plumbing
describe a response the same way.
"""

from __future__ import annotations

import asyncio
from collections import deque

from loopwire.common.errors import RequestError
from loopwire.gateway.output_parser import CallArgumentsOut, CallDoneOut, CallStartedOut, OutputEvent, TextOut
from loopwire.gateway.safety import Verdict
from loopwire.v1 import gateway_pb2


class SafetyProgress:
    """Queue signal: the safety checks advanced or found a violation."""


class Cancel:
    """Queue signal: the client cancelled the response."""


PROGRESS = SafetyProgress()
CANCEL = Cancel()


def failed(response_id: str, error: RequestError) -> gateway_pb2.ConverseResponse:
    return gateway_pb2.ConverseResponse(response_id=response_id, failed=gateway_pb2.ResponseFailed(error=error.to_proto()))


def event(response_id: str, **kwargs: object) -> gateway_pb2.ConverseResponse:
    return gateway_pb2.ConverseResponse(response_id=response_id, **kwargs)  # type: ignore[arg-type]


def output_event(response_id: str, out: OutputEvent) -> gateway_pb2.ConverseResponse:
    """A parsed piece of model output as the event the client sees (nested fields given as dicts:
    upb builds them in place, no sub-message built and copied per token)."""
    if type(out) is TextOut:
        delta: dict[str, object] = {"text": out.text}
        if out.logprobs:
            delta["logprobs"] = out.logprobs
        return gateway_pb2.ConverseResponse(response_id=response_id, text_delta=delta)  # type: ignore[arg-type]
    if type(out) is CallArgumentsOut:
        return gateway_pb2.ConverseResponse(response_id=response_id, tool_call_arguments_delta={  # type: ignore[arg-type]
            "call_id": out.call_id, "delta": out.delta})
    if isinstance(out, CallStartedOut):
        return event(response_id, tool_call_started=gateway_pb2.ToolCallStarted(
            call_id=out.call_id, name=out.name, index=out.index))
    if isinstance(out, TextOut):
        return event(response_id, text_delta=gateway_pb2.TextDelta(text=out.text))
    if isinstance(out, CallArgumentsOut):
        return event(response_id, tool_call_arguments_delta=gateway_pb2.ToolCallArgumentsDelta(
            call_id=out.call_id, delta=out.delta))
    assert isinstance(out, CallDoneOut)
    return event(response_id, tool_call_done=gateway_pb2.ToolCallDone(call=out.call, index=out.index))


def safety_event(response_id: str, stage: int, verdict: Verdict, us: int, checked: int) -> gateway_pb2.ConverseResponse:
    return event(response_id, safety=gateway_pb2.SafetyVerdict(
        stage=stage,  # type: ignore[arg-type]
        allowed=verdict.allowed,
        category=verdict.category,
        detail=verdict.detail,
        classifier_us=us,
        checked_chars=checked,
    ))


class EventOutbox:
    """The events of one Converse stream waiting for its writer.

    A text (or tool-call arguments) delta that arrives while the previous one of the same
    response (and call) still waits joins it, as the inference replica coalesces tokens:
    while gRPC is busy sending one message (a slow client, a full flow-control window, a
    burst that buffer mode releases at once) the next deltas merge, so the stream costs a
    message per write the client takes, not one per token; the first is never delayed.
    """

    def __init__(self) -> None:
        self._entries: deque[gateway_pb2.ConverseResponse | _Run | None] = deque()
        self._ready = asyncio.Event()

    def put(self, response: gateway_pb2.ConverseResponse | None) -> None:
        entries = self._entries
        if response is not None and entries:  # something waits already: this delta may join the last one
            kind = response.WhichOneof("event")
            if kind == "text_delta" or kind == "tool_call_arguments_delta":
                key = (response.response_id, kind, response.tool_call_arguments_delta.call_id)
                tail = entries[-1]
                if isinstance(tail, _Run):
                    if tail.key == key:
                        tail.parts.append(response)
                        return
                elif tail is not None and tail.WhichOneof("event") == kind and _key(tail, kind) == key:
                    entries[-1] = _Run(key, [tail, response])
                    return
        # The writer waits (the common case when it keeps up): the event goes as it is.
        entries.append(response)
        self._ready.set()

    async def take(self) -> gateway_pb2.ConverseResponse | None:
        """The next event to send (None: the stream ends)."""
        while not self._entries:
            self._ready.clear()
            await self._ready.wait()
        entry = self._entries.popleft()
        return entry.merged() if isinstance(entry, _Run) else entry


def _key(response: gateway_pb2.ConverseResponse, kind: str) -> tuple[str, str, str]:
    return response.response_id, kind, response.tool_call_arguments_delta.call_id


class _Run:
    """Consecutive deltas of one text waiting together: sent as one."""

    __slots__ = ("key", "parts")

    def __init__(self, key: tuple[str, str, str], parts: list[gateway_pb2.ConverseResponse]) -> None:
        self.key = key
        self.parts = parts

    def merged(self) -> gateway_pb2.ConverseResponse:
        if len(self.parts) == 1:
            return self.parts[0]
        response_id, kind, call_id = self.key
        if kind == "text_delta":
            merged = gateway_pb2.ConverseResponse(response_id=response_id, text_delta=gateway_pb2.TextDelta(
                text="".join(p.text_delta.text for p in self.parts)))
            for p in self.parts:  # the tokens stay with their text, in order
                merged.text_delta.logprobs.extend(p.text_delta.logprobs)
            return merged
        return gateway_pb2.ConverseResponse(response_id=response_id, tool_call_arguments_delta=(
            gateway_pb2.ToolCallArgumentsDelta(call_id=call_id, delta="".join(
                p.tool_call_arguments_delta.delta for p in self.parts))))
