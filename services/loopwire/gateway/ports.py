"""What a response may ask of the rest of the gateway: verbs, built once per gateway.

The relay and its placement (relay.py, failover.py) never see the servicer, the router or the
store whole: they are handed ``ResponsePorts``, whose members are verbs (route, mark a replica
down, prefill elsewhere, count, keep a conversation) and the configuration, which they only
read. Each part's state is changed only by that part's own methods, so what a response can do to
the gateway is what this module lists.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from loopwire.common.auth import Tenant
from loopwire.common.model_def import ModelDefinition
from loopwire.gateway.config import GatewayConfig
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.replica import Replica
from loopwire.gateway.safety import SafetyClassifier
from loopwire.v1 import common_pb2, inference_pb2

T = TypeVar("T")


class Routing(Protocol):
    """The router as a response sees it (router.py implements it)."""

    def choose(self, prompt_length: int, block_hashes: Callable[[int], Sequence[int]],
               exclude: Sequence[Replica] = (), shared_tokens: int = 0) -> Replica: ...

    def mark_down(self, replica: Replica) -> None: ...

    def prefill_source(self, target: Replica, prompt_length: int, cached_tokens: int) -> Replica | None: ...

    async def prefill(self, source: Replica, request_id: str, token_ids: Sequence[int],
                      params: inference_pb2.GenerationParams, cache_salt: str) -> bytes | None: ...

    def note_prefill_fallback(self) -> None: ...


class Counters(Protocol):
    """The gateway's counters (metrics.py implements it)."""

    def add(self, name: str, model: str, n: int = 1) -> None: ...


class KeepConversation(Protocol):
    """Keeps a completed response's conversation for continuations (response_store.py's ``put``)."""

    def __call__(self, response_id: str, conversation: Conversation, tenant: str, stream_id: str,
                 no_store: bool) -> None: ...


class Offload(Protocol):
    """``fn()`` for a request of ``size`` bytes on the fair work pool, in ``tenant``'s turn."""

    def __call__(self, tenant: str, size: int, fn: Callable[[], T]) -> Awaitable[T]: ...


@dataclass(frozen=True)
class ResponsePorts:
    """Everything a stream and its responses use of the gateway, built once per gateway (service.py)."""

    model: ModelDefinition
    # Ids a model would emit for a recorded turn (a replay's oracle): ChatPrompt.output_ids.
    output_ids: Callable[[str, Sequence[common_pb2.FunctionCall]], list[int]]
    routing: Routing
    counters: Counters
    keep: KeepConversation
    # Drops a closed stream's entries from the response store (response_store.py's ``drop_stream``).
    forget_stream: Callable[[str], None]
    classifier: SafetyClassifier
    offload: Offload
    # The gateway's configuration, read only: a part that assigned to it would fail test_gateway_ports.
    settings: GatewayConfig


@dataclass(frozen=True)
class Caller:
    """Who a response runs for: its stream's tenant and id, and the verb that charges the tenant's
    output-token budget. Built once per stream (session.py)."""

    tenant: Tenant
    stream_id: str
    charge_output_tokens: Callable[[int], None]
