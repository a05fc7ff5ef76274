"""One response's output assembled: generated ids -> parsed events (with log-probabilities) ->
the safety gate, which lets them out.

The relay (relay.py) hands each batch of ids the replica streams to ``ResponseOutput.feed``; the
parser (output_parser.py) turns them into text and tool-call events, each given the entries of
the tokens that spelled it when log-probabilities were asked for, and the events wait in the
safety gate (safety_gate.py) until the response's safety mode lets them out. The ids generated
are kept here too: the completed turn enters the conversation as those ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopwire.common.model_def import ModelDefinition
from loopwire.gateway.events import output_event, safety_event
from loopwire.gateway.logprobs import TextLogprobs
from loopwire.gateway.output_parser import OutputEvent, OutputParser, TextOut
from loopwire.gateway.safety import INPUT
from loopwire.gateway.safety_gate import SafetyGate
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2


class ResponseOutput:
    """The parser, the log-probabilities and the safety gate's release of one response's output."""

    def __init__(self, model: ModelDefinition, create: gateway_pb2.CreateResponse, response_id: str,
                 tools: Sequence[common_pb2.Tool], safety: SafetyGate) -> None:
        replay_ids = [c.call_id for c in create.replay.function_calls] if create.HasField("replay") else []
        self.model = model
        self.response_id = response_id
        self.safety = safety
        self.parser = OutputParser(
            model,
            stops=list(create.sampling.stop),
            call_id_for=lambda n: replay_ids[n] if n < len(replay_ids) and replay_ids[n] else f"call_{response_id}_{n}",
            tools=tools,
        )
        self.generated: list[int] = []
        # Log-probabilities asked for: tokens are parsed one by one, so each goes with its text.
        self.text_logprobs = TextLogprobs(model) if create.sampling.HasField("top_logprobs") else None
        self._pending_logprobs: list[dict[str, object]] = []  # entries of tokens whose text is not out yet
        self._stop_ids = frozenset(model.stop_token_ids)
        self._input_reported = False

    @property
    def done(self) -> bool:
        return self.parser.done

    def feed(self, token_ids: Sequence[int], logprobs: Sequence[inference_pb2.TokenLogprobs] = ()) -> bool:
        """Parse new tokens into events held by the safety gate; True when a stop string ended the
        output (the ids past it are dropped: the turn counts the same however they were batched)."""
        before = len(self.generated)
        self.generated.extend(token_ids)
        safety_from = len(self.parser.safety_text)
        if self.text_logprobs is not None and len(logprobs) == len(token_ids):
            outs = self._feed_with_logprobs(token_ids, logprobs)
        else:
            outs = self.parser.feed(token_ids)
        self._hold(outs, safety_from)
        if self.parser.stopped_by_string and len(token_ids) > 1:
            del self.generated[self._tokens_to_stop(before):]
        return self.parser.stopped_by_string

    def end(self) -> None:
        """The generation ended: the parser's tail goes to the gate (the caller then closes its output check)."""
        safety_from = len(self.parser.safety_text)
        tail = self.parser.finish()
        if self.text_logprobs is not None:
            self._attach_logprobs(tail)
        self._hold(tail, safety_from)

    def releasable(self) -> list[gateway_pb2.ConverseResponse]:
        """The input check's verdict once it came, and the output events safety lets out now."""
        safety = self.safety
        out = []
        if safety.input_verdict is not None and not self._input_reported:
            self._input_reported = True
            out.append(safety_event(self.response_id, INPUT, safety.input_verdict.verdict, safety.input_verdict.us, 0))
        out.extend(safety.releasable())
        return out

    def _hold(self, outs: list[OutputEvent], safety_from: int) -> None:
        for out in outs:
            self.safety.hold(out.safety_offset, output_event(self.response_id, out))
        if self.safety.checker is not None:
            self.safety.add_output("".join(self.parser.safety_text[safety_from:]))

    def _feed_with_logprobs(self, token_ids: Sequence[int],
                            logprobs: Sequence[inference_pb2.TokenLogprobs]) -> list[OutputEvent]:
        """Parse token by token (the text is the same however the ids are batched), so each
        token's entry goes with the text it releases; entries of tokens that became a tool call
        (those since the last text when a call event comes) and the stop token are left out."""
        assert self.text_logprobs is not None
        stops = self._stop_ids
        outs: list[OutputEvent] = []
        for token, lp in zip(token_ids, logprobs, strict=True):
            if token not in stops:
                self._pending_logprobs.append(self.text_logprobs.entry(token, lp))
            events = self.parser.feed((token,))
            self._attach_logprobs(events)
            outs += events
            if self.parser.done:
                break
        return outs

    def _attach_logprobs(self, events: list[OutputEvent]) -> None:
        """Pending entries go to the text events in order, as many as spell each one's bytes (the
        last text event takes the rest); a call event drops those not yet out (the call's)."""
        last = max((i for i, ev in enumerate(events) if type(ev) is TextOut), default=-1)
        for i, ev in enumerate(events):
            if type(ev) is not TextOut:
                self._pending_logprobs = []
                continue
            if i == last:
                taken, self._pending_logprobs = self._pending_logprobs, []
            else:
                need, got, n = len(ev.text.encode()), 0, 0
                while n < len(self._pending_logprobs) and got < need:
                    got += len(self._pending_logprobs[n]["bytes"])  # type: ignore[arg-type]
                    n += 1
                taken, self._pending_logprobs = self._pending_logprobs[:n], self._pending_logprobs[n:]
            if taken:
                ev.logprobs = taken

    def _tokens_to_stop(self, before: int) -> int:
        """How many generated ids it took to reach the stop string that ended the output, when the
        batch that held it held more: the turn counts the same however the replica batched it."""
        lo, hi = before + 1, len(self.generated)
        while lo < hi:  # the fewest ids whose text reaches a stop string (once per response)
            mid = (lo + hi) // 2
            probe = OutputParser(self.model, stops=self.parser.stops, tools=self.parser.tools)
            probe.feed(self.generated[:mid])
            if probe.stopped_by_string:
                hi = mid
            else:
                lo = mid + 1
        return lo
