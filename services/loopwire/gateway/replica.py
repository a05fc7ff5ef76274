"""One inference replica as this gateway sees it: its channel, health, cache contents, load and
measured speed. The router keeps its health and cache mirror; the other parts change its load
only through its verbs (``occupy``, ``prefilled``, ``vacate``, ``stream_opened``, ...)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import grpc

from loopwire.v1 import common_pb2, inference_pb2, inference_pb2_grpc

DEFAULT_BLOCK_SIZE = 16
DEFAULT_PREFILL_TPS = 10_000.0
DEFAULT_TOKEN_LATENCY_S = 0.01
_EWMA = 0.2
# Prefills shorter than this say more about overheads than about the replica's speed.
_MIN_PREFILL_SAMPLE = 256


@dataclass(eq=False)
class Replica:
    address: str
    channel: grpc.aio.Channel
    stub: inference_pb2_grpc.InferenceServiceStub
    replica_id: str = ""
    healthy: bool = True
    status: inference_pb2.GetStatusResponse = field(default_factory=inference_pb2.GetStatusResponse)
    cached_blocks: set[int] = field(default_factory=set)
    block_size: int = DEFAULT_BLOCK_SIZE
    in_flight: int = 0
    sessions: int = 0
    pending_prefill_tokens: int = 0  # routed here and not yet past their first token
    prefill_tps: float = 0.0  # measured (EWMA); 0 until the first sample
    token_latency_s: float = DEFAULT_TOKEN_LATENCY_S  # measured time per decode step (EWMA)
    routed: int = 0
    prefills_in_flight: int = 0  # this gateway's Prefill calls to it (a prefill-role replica)
    failed_polls: float = 0.0
    draining_since: float | None = None  # loop time it left DNS; None while it is listed

    @property
    def draining(self) -> bool:
        return self.draining_since is not None

    @property
    def is_prefill(self) -> bool:
        return self.status.role == inference_pb2.ENGINE_ROLE_PREFILL

    @property
    def is_decode(self) -> bool:
        return self.status.role == inference_pb2.ENGINE_ROLE_DECODE

    @property
    def name(self) -> str:
        return self.replica_id or self.address

    def cached_prefix_blocks(self, hashes: Sequence[int]) -> int:
        n = 0
        for h in hashes:
            if h not in self.cached_blocks:
                break
            n += 1
        return n

    def reachable(self) -> bool:
        """Whether the channel may still connect (not refused outright moments ago)."""
        state = self.channel.get_state(try_to_connect=False)
        return state not in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)

    def stream_opened(self) -> None:
        """A session's Generate stream opened here (it counts in the routing load until closed)."""
        self.sessions += 1

    def stream_closed(self) -> None:
        self.sessions = max(0, self.sessions - 1)

    def occupy(self, uncached: int) -> None:
        """A generation runs here with ``uncached`` prompt tokens still to prefill (the router reads it)."""
        self.in_flight += 1
        self.pending_prefill_tokens += uncached

    def prefilled(self, tokens: int) -> None:
        """``tokens`` of an occupying generation's prompt are prefilled (its first token came)."""
        self.pending_prefill_tokens -= tokens

    def vacate(self) -> None:
        """A generation counted by ``occupy`` ended here (its prompt already counted as prefilled)."""
        self.in_flight -= 1

    def begin_prefill(self, tokens: int) -> None:
        """This gateway sent a ``Prefill`` of ``tokens`` here (a prefill-role replica)."""
        self.prefills_in_flight += 1
        self.pending_prefill_tokens += tokens

    def end_prefill(self, tokens: int) -> None:
        self.prefills_in_flight -= 1
        self.pending_prefill_tokens -= tokens

    def note_routed(self) -> None:
        """Work was placed here (a session or a prefill): ties between equal replicas go to the other."""
        self.routed += 1

    def load(self) -> float:
        return self.in_flight + self.status.waiting

    def prefill_speed(self) -> float:
        return self.prefill_tps or DEFAULT_PREFILL_TPS

    def observe(self, usage: common_pb2.Usage, timings: common_pb2.Timings) -> None:
        """Learn this replica's speed from one finished generation."""
        uncached = usage.input_tokens - usage.cached_input_tokens
        if uncached >= _MIN_PREFILL_SAMPLE and timings.prefill_us:
            sample = uncached / (timings.prefill_us / 1e6)
            self.prefill_tps = sample if not self.prefill_tps else (1 - _EWMA) * self.prefill_tps + _EWMA * sample
        if usage.output_tokens > 1 and timings.decode_us:
            sample = timings.decode_us / 1e6 / (usage.output_tokens - 1)
            self.token_latency_s = (1 - _EWMA) * self.token_latency_s + _EWMA * sample
