"""What the parts of a response see of the gateway and of its Converse stream.

prepare, relay, failover, kv_hold and count_tokens are handed these narrow views, never the
servicer or the session object itself: each names exactly what they read (and, for the
stream, the two things they change: its conversation and its replica link), and none of them imports the modules
that drive them, so the gateway's modules form no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from loopwire.common.auth import Tenant
from loopwire.common.model_def import ModelDefinition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway.config import GatewayConfig
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.generate_link import GenerateLink
from loopwire.gateway.metrics import GatewayMetrics
from loopwire.gateway.rate_limit import TenantLimiter
from loopwire.gateway.response_store import ResponseStore
from loopwire.gateway.router import Router
from loopwire.gateway.safety import SafetyClassifier

T = TypeVar("T")


class Gateway(Protocol):
    """The state all streams share (read-only for the parts)."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def model(self) -> ModelDefinition: ...
    @property
    def prompt(self) -> ChatPrompt: ...
    @property
    def router(self) -> Router: ...
    @property
    def store(self) -> ResponseStore: ...
    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def classifier(self) -> SafetyClassifier: ...

    def limiter(self, tenant: Tenant) -> TenantLimiter: ...

    async def offload(self, tenant: str, size: int, fn: Callable[[], T]) -> T:
        """``fn()`` for a request of ``size`` bytes: on the fair work pool in ``tenant``'s turn, or
        inline when small (the event loop serves every stream; see common/work_pool.py)."""
        ...


class Stream(Protocol):
    """One Converse stream as a response on it sees it."""

    @property
    def gw(self) -> Gateway: ...
    @property
    def tenant(self) -> Tenant: ...
    @property
    def stream_id(self) -> str: ...
    @property
    def limiter(self) -> TenantLimiter: ...

    # The conversation the stream holds: the last completed response's, kept by the relay.
    conversation: Conversation | None
    # The stream's Generate link to its replica: set when routed, replaced on failover.
    link: GenerateLink | None
