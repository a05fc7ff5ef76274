"""The harness's side of `GatewayService.Converse`.

Stateful (default): one stream per session; after the first request only the new items go
up with `previous_response_id`, and PREVIOUS_RESPONSE_NOT_FOUND (or a broken stream) gets
one full resend. Stateless: the naive way, kept to measure against: the whole transcript,
`no_store`, on a fresh channel and stream every turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc

from loopwire.common import errors, telemetry
from loopwire.common.errors import Code
from loopwire.common.grpc_server import service_channel
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

# Retryable gateway failures (no replica, rate limited, a broken stream: ``Error.retryable``, as
# the error policy in common/errors.py sets it) are retried with exponential backoff while nothing
# of the response has streamed yet.
MAX_ATTEMPTS = 5
BACKOFF_S = 0.2
MAX_BACKOFF_S = 5.0
HOLD_TIMEOUT_S = 15.0  # a KV hold is a hint: the harness never waits long for one
log = logging.getLogger("loopwire.harness")


def protocol_bytes(message: gateway_pb2.ConverseRequest) -> int:
    """Bytes of a request without replay scaffolding: the recorded output a replayed turn
    carries is test equipment, not protocol, and would halve every bytes ratio."""
    create = message.create_response
    if not create.HasField("replay"):
        return message.ByteSize()
    inner = create.ByteSize()
    without = inner - _field_bytes(create.replay.ByteSize())
    return message.ByteSize() - _field_bytes(inner) + _field_bytes(without)


def _field_bytes(n: int) -> int:
    """A length-delimited field of body size n: one tag byte, the varint length, the body."""
    return 1 + max(1, (n.bit_length() + 6) // 7) + n

class GatewayError(Exception):
    """The model call failed; ``error`` says why, in the shared Error vocabulary."""

    def __init__(self, error: common_pb2.Error) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass
class ModelTurn:
    response_id: str = ""
    output: list[common_pb2.Item] = field(default_factory=list)
    finish_reason: int = 0
    usage: common_pb2.Usage = field(default_factory=common_pb2.Usage)
    timings: common_pb2.Timings = field(default_factory=common_pb2.Timings)
    bytes_sent: int = 0
    items_sent: int = 0
    full_request: bool = False
    resends: int = 0
    ttft_us: int = 0
    diagnostics: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(p.text for i in self.output if i.WhichOneof("item") == "message" for p in i.message.content)

    @property
    def calls(self) -> list[common_pb2.FunctionCall]:
        return [i.function_call for i in self.output if i.WhichOneof("item") == "function_call"]


EventHandler = Callable[[gateway_pb2.ConverseResponse], None]
_OUTPUT_EVENTS = ("text_delta", "tool_call_started", "tool_call_done")


class Conversation:
    """One session's link to the gateway; remembers what the gateway already holds."""

    def __init__(self, target: str, api_key: str, *, stateful: bool, last_response_id: str = "",
                 held_items: int = 0) -> None:
        self.target = target
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self.stateful = stateful
        # The gateway holds the transcript up to `held_items` under `last_response_id`.
        self.last_response_id = last_response_id if stateful else ""
        self.held_items = held_items if stateful else 0
        # What the gateway said of its model, asked once per session: a process-wide cache keyed by
        # address kept a gateway's answer after another gateway (another model) took the address.
        self._model: gateway_pb2.GetModelResponse | None = None
        self._holding = asyncio.Lock()  # a tool-pause hint runs beside the turn, and may meet an approval's hold
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.StreamStreamCall | None = None

    async def model(self) -> gateway_pb2.GetModelResponse | None:
        """What the gateway serves (window, tool-call format), asked once per session; None when
        it does not answer (the run goes on without it)."""
        if self._model is None:
            try:
                async with service_channel(self.target) as channel:
                    self._model = await gateway_pb2_grpc.GatewayServiceStub(channel).GetModel(
                        gateway_pb2.GetModelRequest(), metadata=self.metadata, timeout=10)
            except grpc.aio.AioRpcError as e:
                log.warning("gateway %s did not tell what model it serves: %s", self.target, e.details())
                return None
        return self._model

    async def respond(self, base: gateway_pb2.CreateResponse, transcript: Sequence[common_pb2.Item],
                      on_event: EventHandler) -> ModelTurn:
        """Ask for one response to ``transcript``; ``on_event`` sees every streamed event."""
        turn = ModelTurn()
        use_delta = bool(self.last_response_id) and self.held_items <= len(transcript)
        for attempt in range(MAX_ATTEMPTS):
            request = gateway_pb2.CreateResponse()
            request.CopyFrom(base)
            telemetry.inject(request.trace_context)  # this turn's trace continues in the gateway
            if use_delta:
                # Only what is new: the gateway inherits model, instructions and tools.
                request.previous_response_id = self.last_response_id
                for name in ("model", "instructions", "tools"):
                    request.ClearField(name)
                request.input.extend(transcript[self.held_items:])
            else:
                request.input.extend(transcript)
                request.no_store = not self.stateful
            turn.full_request = not use_delta
            turn.items_sent += len(request.input)
            try:
                await self._exchange(request, turn, on_event)
                break
            except GatewayError as e:
                code = e.error.code
                lost_state = code == Code.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND and use_delta
                # Retry only while nothing streamed yet: tools may already run on streamed calls.
                transient = e.error.retryable and not turn.ttft_us
                if attempt + 1 >= MAX_ATTEMPTS or not (lost_state or transient):
                    raise
                if lost_state:
                    turn.diagnostics.append(f"{Code.Name(code)}: {e.error.message}; resending in full")
                    use_delta = False
                else:  # back off (the gateway's own hint first), then the same request again
                    delay = max(e.error.retry_after_ms / 1000, BACKOFF_S * 2**attempt)
                    turn.diagnostics.append(f"{Code.Name(code)}: {e.error.message}; retrying in {delay:.1f} s")
                    await asyncio.sleep(min(delay, MAX_BACKOFF_S))
                turn.resends += 1
        if self.stateful:
            self.last_response_id = turn.response_id
            self.held_items = len(transcript) + len(turn.output)
        return turn

    async def _exchange(self, request: gateway_pb2.CreateResponse, turn: ModelTurn, on_event: EventHandler) -> None:
        message = gateway_pb2.ConverseRequest(create_response=request)
        call = await self._stream()
        sent_at = time.perf_counter_ns()
        try:
            await call.write(message)
            turn.bytes_sent += protocol_bytes(message)
            if not self.stateful:
                await call.done_writing()
            while True:
                event = await call.read()
                if event is grpc.aio.EOF:
                    await self.close()
                    raise GatewayError(errors.error(Code.ERROR_CODE_UNAVAILABLE,
                                                    "the gateway closed the stream mid-response"))
                kind = event.WhichOneof("event")
                if kind in _OUTPUT_EVENTS and not turn.ttft_us:
                    turn.ttft_us = (time.perf_counter_ns() - sent_at) // 1000
                if kind == "created":
                    turn.response_id = event.created.response_id
                elif kind == "cache_break":
                    cb = event.cache_break
                    turn.diagnostics.append(f"cache break at item {cb.first_differing_item}: {cb.reason}")
                elif kind == "failed":
                    raise GatewayError(event.failed.error)
                on_event(event)
                if kind == "completed":
                    done = event.completed
                    turn.output = list(done.output)
                    turn.finish_reason, turn.usage, turn.timings = done.finish_reason, done.usage, done.timings
                    turn.response_id = turn.response_id or event.response_id
                    return
        except grpc.aio.AioRpcError as e:
            await self.close()
            # Retryable by the policy: a gateway killed or restarting (the stream reset,
            # UNAVAILABLE) is gone for now, and the session resumes from its stored items.
            raise GatewayError(errors.from_call(e, f"gateway {e.code().name}: {e.details()}")) from None
        except GatewayError:
            raise  # an in-stream error: the stream stays usable
        except BaseException:
            await self.close()  # cancelled mid-response: dropping the stream stops the generation
            raise
        finally:
            if not self.stateful:
                await self.close()

    async def hold_kv(self, seconds: int, hint: common_pb2.KvHint | None = None) -> gateway_pb2.KvHeld:
        """Ask the gateway to keep (``seconds`` > 0) or let go of (0) the KV of the last
        response, e.g. while the session waits for a human, or pass a tool-pause ``hint`` on it
        (``kv_hints``). GatewayError when it cannot."""
        if not self.last_response_id:
            return gateway_pb2.KvHeld()
        hold = gateway_pb2.HoldKv(response_id=self.last_response_id, retention_seconds=seconds, hint=hint)
        async with self._holding:  # one hold at a time on the stream: each reads its own answer
            return await self._hold(hold)

    async def _hold(self, hold: gateway_pb2.HoldKv) -> gateway_pb2.KvHeld:
        try:
            call = await self._stream()
            await call.write(gateway_pb2.ConverseRequest(hold_kv=hold))
            while True:
                event = await asyncio.wait_for(call.read(), HOLD_TIMEOUT_S)
                if event is grpc.aio.EOF:
                    await self.close()
                    raise GatewayError(errors.error(Code.ERROR_CODE_UNAVAILABLE, "the gateway closed the stream"))
                if event.WhichOneof("event") == "failed":
                    raise GatewayError(event.failed.error)
                if event.WhichOneof("event") == "kv_held":
                    return event.kv_held
        except (grpc.aio.AioRpcError, TimeoutError) as e:
            await self.close()
            raise GatewayError(errors.error(Code.ERROR_CODE_UNAVAILABLE, f"hold_kv: {e}")) from None
        finally:
            if not self.stateful:
                await self.close()

    async def _stream(self) -> grpc.aio.StreamStreamCall:
        if self._call is None:
            self._channel = service_channel(self.target)
            trace_context: dict[str, str] = {}
            telemetry.inject(trace_context)  # the gateway's stream span joins the turn that opened it
            self._call = gateway_pb2_grpc.GatewayServiceStub(self._channel).Converse(
                metadata=(*self.metadata, *trace_context.items()))
        return self._call

    async def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self._call = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
