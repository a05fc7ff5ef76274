"""GatewayService: one Converse stream per agent session (DESIGN §2, §5).

Per request the gateway validates, tokenizes only what is new, forwards only new token
ids to the session's replica, detokenizes the answer into text and tool-call events,
and runs safety checks beside inference. The work is split by concern:

- ``session.py``: one stream's plumbing (requests in order, cancel, events out, spans);
- ``prepare.py``: validation, the conversation a request continues, tokenization, admission;
- ``relay.py``: one response's state machine (opening, generating, draining), relaying the generation;
- ``generation_start.py``: what a generation's start says (append or full prompt, parameters);
- ``response_output.py``: the output assembled (parsing, log-probabilities, safety release);
- ``safety_gate.py``: the safety checks beside inference and what output may leave;
- ``failover.py``: the replica link, its load, and failover when a replica dies;
- ``count_tokens.py``: CountTokens, a request's prompt size without running it.

This module holds the servicer: authentication, the per-tenant stream limit, and the state
shared by all streams (``config.py`` its configuration, ``parts.py`` what prepare and kv_hold
may see of it and of a stream, ``ports.py`` the verbs a response may use, built here once).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import grpc

from loopwire.common import rpc_errors
from loopwire.common.auth import Authenticator, AuthError, Tenant
from loopwire.common.errors import RequestError
from loopwire.common.model_def import TOOL_CALL_SYNTAX, ModelDefinition
from loopwire.common.prompt import ChatPrompt
from loopwire.common.work_pool import FairWorkPool
from loopwire.gateway import count_tokens
from loopwire.gateway.config import GatewayConfig
from loopwire.gateway.metrics import GatewayMetrics
from loopwire.gateway.ports import ResponsePorts
from loopwire.gateway.rate_limit import TenantLimiter
from loopwire.gateway.response_store import ResponseStore
from loopwire.gateway.router import Router
from loopwire.gateway.safety import SafetyClassifier
from loopwire.gateway.session import ConverseSession
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

T = TypeVar("T")


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(
        self,
        model: ModelDefinition,
        router: Router,
        authenticator: Authenticator,
        classifier: SafetyClassifier,
        config: GatewayConfig | None = None,
    ) -> None:
        self.model = model
        self.prompt = ChatPrompt(model)
        self.router = router
        router.expect_model(model.digest)
        self.auth = authenticator
        self.classifier = classifier
        self.config = config or GatewayConfig()
        self.store = ResponseStore(self.config.max_sessions, self.config.max_total_tokens, self.config.gateway_id)
        self.metrics = GatewayMetrics()
        self.work = FairWorkPool(self.config.work_threads, self.config.work_tenant_share,
                                 self.config.work_inline_bytes)
        # What a response may ask of the gateway: verbs on the parts above, built once.
        self.ports = ResponsePorts(model=model, output_ids=self.prompt.output_ids, routing=router,
                                   counters=self.metrics, keep=self.store.put,
                                   forget_stream=self.store.drop_stream, classifier=classifier,
                                   offload=self.offload, settings=self.config)
        self._limiters: dict[str, TenantLimiter] = {}
        self.sessions: dict[str, ConverseSession] = {}  # open Converse streams, by stream id

    def limiter(self, tenant: Tenant) -> TenantLimiter:
        limiter = self._limiters.get(tenant.name)
        if limiter is None:
            limiter = self._limiters[tenant.name] = TenantLimiter(tenant.limits)
        return limiter

    async def offload(self, tenant: str, size: int, fn: Callable[[], T]) -> T:
        return await self.work.run(tenant, size, fn)

    async def GetModel(  # noqa: N802 - gRPC method name
        self, request: gateway_pb2.GetModelRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetModelResponse:
        try:
            self.auth.authenticate(context.invocation_metadata())
        except AuthError as e:
            await rpc_errors.abort(context, e.status_code, f"authorization: {e}", common_pb2.ERROR_REASON_BAD_CREDENTIALS)
        m = self.model
        return gateway_pb2.GetModelResponse(name=m.name, context_length=m.context_length,
                                            tool_call_format=m.tool_call_format,
                                            tool_call_syntax=TOOL_CALL_SYNTAX.get(m.tool_call_format, common_pb2.TOOL_CALL_FORMAT_UNSPECIFIED),
                                            template_lays_out_tools=m.template.handles_tools)

    async def CountTokens(  # noqa: N802 - gRPC method name
        self, request: gateway_pb2.CountTokensRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CountTokensResponse:
        try:
            tenant = self.auth.authenticate(context.invocation_metadata())
        except AuthError as e:
            await rpc_errors.abort(context, e.status_code, f"authorization: {e}", common_pb2.ERROR_REASON_BAD_CREDENTIALS)
        try:
            return await count_tokens.count(self, tenant, request.request)
        except RequestError as e:
            await rpc_errors.abort(context, e.grpc_status, e.message, e.reason, retry_after_ms=e.retry_after_ms)

    async def Converse(
        self, request_iterator: AsyncIterator[gateway_pb2.ConverseRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.ConverseResponse]:
        try:
            tenant = self.auth.authenticate(context.invocation_metadata())
        except AuthError as e:
            await rpc_errors.refuse_stream(context, request_iterator, e.status_code, f"authorization: {e}",
                                            common_pb2.ERROR_REASON_BAD_CREDENTIALS)
            return
        limiter = self.limiter(tenant)
        wait_ms = limiter.open_stream()
        if wait_ms:
            self.metrics.add("rate_limited", self.model.name)
            await rpc_errors.abort(
                context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"tenant {tenant.name!r} already has {limiter.limits.concurrent_streams} open streams",
                common_pb2.ERROR_REASON_STREAM_LIMIT, retry_after_ms=wait_ms)
        session = ConverseSession(self, self.ports, tenant, limiter)
        self.sessions[session.stream_id] = session
        try:
            async for event in session.run(request_iterator):
                yield event
        finally:
            del self.sessions[session.stream_id]
            limiter.close_stream()
            await session.close()
