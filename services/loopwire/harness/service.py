"""HarnessService: Run streams, GetSession, ListSessions.

Every call is authenticated with the same API keys as the gateway; a session belongs to the
tenant that started it, and another tenant neither sees nor drives it (NOT_FOUND, so its
existence does not leak). The caller's key is what the harness presents to the gateway.

Runs belong to the harness, not to a stream: a stream starts or resumes sessions and
receives their events; when the client goes away its runs stop as INTERRUPTED (resumable).
A half-closed stream stays open until every run it drives has completed, failed or suspended.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from loopwire.common import errors, rpc_errors
from loopwire.common.auth import Authenticator, AuthError, authorization_header, bearer_key
from loopwire.common.errors import RequestError, invalid
from loopwire.harness import extensions, session_ids, tools, validation, workspace_files
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.config import DEFAULT_INSTRUCTIONS, REQUIRED_TOOLS_INSTRUCTIONS, HarnessConfig
from loopwire.harness.conversation import Conversation, GatewayError
from loopwire.harness.loop import SessionRun, user_message
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.store import Decision, SessionStore, Status
from loopwire.v1 import common_pb2, harness_pb2, harness_pb2_grpc

log = logging.getLogger("loopwire.harness")

_REQUESTS_DONE = object()
_RUN_ENDED = object()
_RESUMABLE = {Status.SESSION_STATUS_INTERRUPTED, Status.SESSION_STATUS_FAILED, Status.SESSION_STATUS_CANCELLED,
              Status.SESSION_STATUS_RUNNING, Status.SESSION_STATUS_AWAITING_APPROVAL}


@dataclass
class ActiveRun:
    run: SessionRun
    task: asyncio.Task[None]


@dataclass(frozen=True)
class Caller:
    tenant: str
    key: str  # the bearer key it presented ('' in insecure dev mode)
    # The tenant's KV-retention ceiling (the auth file's max_retention_seconds, which the gateway enforces
    # too): no hold the harness asks for on the tenant's behalf is longer.
    max_retention: int = 0


class HarnessService(harness_pb2_grpc.HarnessServiceServicer):
    def __init__(self, config: HarnessConfig, store: SessionStore, sandbox: Sandbox,
                 authenticator: Authenticator) -> None:
        self.config, self.store, self.sandbox = config, store, sandbox
        self.auth = authenticator
        self.bounds = validation.Bounds(config.max_input_bytes, config.max_tool_schema_bytes)
        self.active: dict[str, ActiveRun] = {}
        self.parked: dict[str, BackgroundTasks] = {}  # commands of sessions waiting for approval
        self.sequences: dict[str, int] = {}

    async def _caller(self, context: grpc.aio.ServicerContext, requests: object = None) -> Caller | None:
        """The authenticated caller; None (the stream ended with its status) for a refused ``requests`` stream."""
        metadata = context.invocation_metadata()
        try:
            tenant = self.auth.authenticate(metadata)
        except AuthError as e:
            if requests is not None:
                await rpc_errors.refuse_stream(context, requests, e.status_code, f"authorization: {e}",
                                                common_pb2.ERROR_REASON_BAD_CREDENTIALS)
                return None
            await rpc_errors.abort(context, e.status_code, f"authorization: {e}", common_pb2.ERROR_REASON_BAD_CREDENTIALS)
        return Caller(tenant.name, bearer_key(authorization_header(metadata)), tenant.policy.max_retention_seconds)

    async def Run(  # noqa: N802 - gRPC method name
        self, request_iterator: AsyncIterator[harness_pb2.RunRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[harness_pb2.RunResponse]:
        caller = await self._caller(context, request_iterator)
        if caller is None:
            return
        async for event in RunStream(self, caller).serve(request_iterator):
            yield event

    async def GetSession(  # noqa: N802
        self, request: harness_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> harness_pb2.GetSessionResponse:
        caller = await self._caller(context)
        assert caller is not None
        try:
            sid = validation.session_id(request.session_id, "session_id")
        except RequestError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, e.message)
        stored = await asyncio.to_thread(self.store.load, session_ids.scoped(caller.tenant, sid))
        if stored is None or stored.tenant != caller.tenant:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"session_id: no session {request.session_id!r}")
        assert stored is not None
        stored.session.session_id = sid
        return harness_pb2.GetSessionResponse(session=stored.session, instructions=stored.instructions,
                                              tools=stored.tools, items=stored.items, turns=stored.turns)

    async def ListSessions(  # noqa: N802
        self, request: harness_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> harness_pb2.ListSessionsResponse:
        caller = await self._caller(context)
        assert caller is not None
        if request.page_size < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_size: must be >= 0 (0: the default, 50)")
        page_size = min(request.page_size or 50, 1000)
        try:
            sessions, token = await asyncio.to_thread(self.store.list, page_size, request.page_token, caller.tenant)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"page_token: {e}")
        for session in sessions:
            session.session_id = session_ids.public(session.session_id)
        return harness_pb2.ListSessionsResponse(sessions=sessions, next_page_token=token)

    def cancel(self, session_id: str, status: int) -> bool:
        active = self.active.get(session_id)
        if active is None:
            return False
        active.run.cancel_status = status
        active.task.cancel()
        return True


class RunStream:
    """One Run call: dispatches its requests and merges the events of the runs it drives."""

    def __init__(self, service: HarnessService, caller: Caller) -> None:
        self.service = service
        self.caller = caller
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.runs: set[str] = set()

    async def serve(self, requests: AsyncIterator[harness_pb2.RunRequest]) -> AsyncIterator[harness_pb2.RunResponse]:
        reader = asyncio.ensure_future(self._read(requests))
        requests_done = False
        try:
            while True:
                event = await self.queue.get()
                if event is _REQUESTS_DONE:
                    requests_done = True
                elif event is not _RUN_ENDED:
                    yield event  # type: ignore[misc]
                if requests_done and not self.runs and self.queue.empty():
                    return
        finally:
            reader.cancel()
            for session_id in list(self.runs):
                self.service.cancel(session_id, Status.SESSION_STATUS_INTERRUPTED)

    async def _read(self, requests: AsyncIterator[harness_pb2.RunRequest]) -> None:
        try:
            async for request in requests:
                try:
                    await self._handle(request)
                except RequestError as e:
                    self._emit(harness_pb2.RunResponse(session_id=_session_of(request),
                                                       failed=harness_pb2.RunFailed(error=e.to_proto())))
                except Exception as e:  # noqa: BLE001 - a failure of one request never ends silently
                    log.exception("run request failed")
                    error = RequestError(common_pb2.ERROR_CODE_INTERNAL, f"{type(e).__name__}: {e}"[:500])
                    self._emit(harness_pb2.RunResponse(session_id=_session_of(request),
                                                       failed=harness_pb2.RunFailed(error=error.to_proto())))
        finally:
            self.queue.put_nowait(_REQUESTS_DONE)

    def _emit(self, event: harness_pb2.RunResponse) -> None:
        """Events carry the client's id; sequences count per stored session."""
        if event.session_id:
            key = self._sid(event.session_id)
            seq = self.service.sequences.get(key, 0) + 1
            self.service.sequences[key] = seq
            event.sequence = seq
        self.queue.put_nowait(event)

    def _sid(self, client_id: str) -> str:
        return session_ids.scoped(self.caller.tenant, client_id)

    async def _handle(self, request: harness_pb2.RunRequest) -> None:
        validation.bounds(request, self.service.bounds)  # first: nothing is stored or counted past a limit
        kind = validation.action(request)
        if kind == "start":
            await self._start(request.start)
        elif kind == "resume":
            sid = self._sid(validation.session_id(request.resume.session_id, "resume.session_id"))
            session = await self._load_idle(sid, "resume.session_id")
            if session.status not in _RESUMABLE:
                raise invalid("resume.session_id", f"session is {Status.Name(session.status)}; "
                                         "add a user message to continue it")
            await self._launch(sid, resumed=True)
        elif kind == "approval":
            await self._decide(request.approval)
        elif kind == "user_message":
            msg = request.user_message
            sid = self._sid(validation.session_id(msg.session_id, "user_message.session_id"))
            if not msg.text.strip():
                raise invalid("user_message.text", "required")
            if sid in self.service.active and self.service.active[sid].run.stored.tenant == self.caller.tenant:
                self.service.active[sid].run.inbox.append(msg.text)
                return
            session = await self._load_idle(sid, "user_message.session_id")
            if session.status == Status.SESSION_STATUS_AWAITING_APPROVAL:
                raise invalid("user_message.session_id", "session waits for an approval decision")
            await asyncio.to_thread(self.service.store.append, sid, [user_message(msg.text)],
                                    first_seq=session.item_count)
            await self._launch(sid, resumed=True)
        else:
            public = validation.session_id(request.cancel.session_id, "cancel.session_id")
            sid = self._sid(public)
            if not self.service.cancel(sid, Status.SESSION_STATUS_CANCELLED) and not await asyncio.to_thread(
                    self.service.store.request_cancel, sid, self.caller.tenant):  # running on another replica
                await self._cancel_idle(sid, public)

    async def _cancel_idle(self, sid: str, public: str) -> None:
        """Cancel a session no run drives: its parked commands and exec programs end now (giving the
        tenant's exec slots back), a wait for approval becomes CANCELLED (resumable: its approvals
        are asked again) and its KV hold is let go. Any other state has nothing to stop."""
        store = self.service.store
        stored = await asyncio.to_thread(store.load, sid)
        if stored is None or stored.tenant != self.caller.tenant:
            raise validation.not_found("cancel.session_id", f"session {public!r}")
        if self.service.cancel(sid, Status.SESSION_STATUS_CANCELLED):  # a decision started a run meanwhile
            return
        if parked := self.service.parked.pop(sid, None):
            parked.kill_all()
        if stored.session.status == Status.SESSION_STATUS_AWAITING_APPROVAL:
            await asyncio.to_thread(store.set_status, sid, Status.SESSION_STATUS_CANCELLED)
            await self._release_kv(stored.last_response_id)
        self._emit(harness_pb2.RunResponse(session_id=public, failed=harness_pb2.RunFailed(error=errors.error(
            common_pb2.ERROR_CODE_CANCELLED, "cancelled; resume the session to continue"))))

    async def _release_kv(self, response_id: str) -> None:
        """Let go of the KV a suspended run held for its approval (a hint: a failure is only logged)."""
        config = self.service.config
        if not (response_id and config.approval_retention and self.caller.max_retention):
            return
        conversation = Conversation(config.gateway, self.caller.key or config.api_key, stateful=True,
                                    last_response_id=response_id)
        try:
            await conversation.hold_kv(0)
        except GatewayError as e:
            log.warning("releasing the KV of response %s (its session cancelled): %s", response_id, e.error.message)
        finally:
            await conversation.close()

    async def _load_idle(self, sid: str, field: str) -> harness_pb2.Session:
        stored = await asyncio.to_thread(self.service.store.load, sid)
        if stored is None or stored.tenant != self.caller.tenant:
            raise validation.not_found(field, f"session {session_ids.public(sid)!r}")
        if sid in self.service.active:
            raise invalid(field, "session is already running")
        return stored.session

    async def _start(self, start: harness_pb2.StartTask) -> None:
        validation.start_task(start)
        config, store = self.service.config, self.service.store
        if not start.model.HasField("tool_choice") and config.tool_choice == "required":
            start.model.tool_choice.mode = common_pb2.TOOL_CHOICE_MODE_REQUIRED  # the session keeps it
        public = start.session_id or f"s_{uuid.uuid4().hex[:20]}"
        sid = self._sid(public)
        if await asyncio.to_thread(store.exists, sid):
            raise validation.already_exists("start.session_id", f"session {public!r}")
        await asyncio.to_thread(self.service.sandbox.prepare_tenant, self.caller.tenant)  # its volume, if any
        try:
            workspace = await asyncio.to_thread(workspace_files.tenant_workspace, config.workspace_root,
                                                self.caller.tenant, start.workspace, public)
        except workspace_files.WorkspaceNotFound as e:
            raise validation.not_found("start.workspace", str(e).removesuffix(" not found")) from None
        except workspace_files.ToolInputError as e:
            raise invalid("start.workspace", str(e)) from None
        except OSError as e:
            raise invalid("start.workspace", f"cannot create it: {e}") from None
        replay = start.HasField("replay")
        session_tools = (sorted(start.replay.tools, key=lambda t: t.name) if replay else
                         tools.tool_list(config, start, await self._window_for_tools(start)))
        default_instructions = REQUIRED_TOOLS_INSTRUCTIONS if tools.requires_tools(start) else DEFAULT_INSTRUCTIONS
        await asyncio.to_thread(store.create, sid, start, start.instructions or default_instructions,
                                session_tools, str(workspace),
                                start.replay.source or "recorded session" if replay else "", self.caller.tenant)
        await asyncio.to_thread(store.append, sid, [user_message(start.task)], first_seq=0)
        await self._launch(sid, resumed=False)

    async def _window_for_tools(self, start: harness_pb2.StartTask) -> int:
        """The model's window when it decides the tool list (a small deferred catalog is offered
        directly): asked of the gateway at the session's start, and only then."""
        config = self.service.config
        if config.context_window or not extensions.direct_possible(config, start):
            return 0
        model = await Conversation(config.gateway, self.caller.key or config.api_key, stateful=False).model()
        return model.context_length if model is not None else 0

    async def _decide(self, decision: harness_pb2.ApprovalDecision) -> None:
        store = self.service.store
        if not decision.approval_id:
            raise invalid("approval.approval_id", "required")
        sid = await asyncio.to_thread(store.session_of_approval, decision.approval_id)
        stored = await asyncio.to_thread(store.load, sid) if sid is not None else None
        if (sid is None or stored is None or stored.tenant != self.caller.tenant
                or (decision.session_id and self._sid(decision.session_id) != sid)):
            raise validation.not_found("approval.approval_id", "pending approval")
        pending = next(p for p in stored.pending if p.approval_id == decision.approval_id)
        if pending.decision != Decision.PENDING:
            raise invalid("approval.approval_id", "already decided")
        denial = None
        if not decision.approved:
            reason = f": {decision.reason}" if decision.reason else ""
            denial = common_pb2.FunctionCallOutput(call_id=pending.call.call_id, is_error=True,
                                                   output=f"error: the user denied this call{reason}")
        await asyncio.to_thread(store.decide, decision.approval_id, decision.approved, denial)
        undecided = [p for p in stored.pending if p.decision == Decision.PENDING and p is not pending]
        if undecided:
            return
        if active := self.service.active.get(sid):  # the run is still winding down after suspending
            await asyncio.wait([active.task])
        await self._launch(sid, resumed=True)

    async def _launch(self, sid: str, *, resumed: bool) -> None:
        service = self.service
        stored = await asyncio.to_thread(service.store.load, sid)
        assert stored is not None
        run = SessionRun(service.config, service.store, service.sandbox, stored, self._emit, self.caller.key,
                         background=service.parked.pop(sid, None), max_retention=self.caller.max_retention)
        task = asyncio.ensure_future(run.run(resumed=resumed))
        service.active[sid] = ActiveRun(run, task)
        self.runs.add(sid)

        def ended(t: asyncio.Task[None]) -> None:
            if service.active.get(sid) is not None and service.active[sid].task is t:
                del service.active[sid]
            self.runs.discard(sid)
            if run.parks_background:
                service.parked[sid] = run.background
            if not t.cancelled() and t.exception() is not None:
                log.error("run of %s ended with %r", sid, t.exception())
            self.queue.put_nowait(_RUN_ENDED)

        task.add_done_callback(ended)


def _session_of(request: harness_pb2.RunRequest) -> str:
    kind = request.WhichOneof("action")
    if kind in ("resume", "approval", "user_message", "cancel"):
        return getattr(request, kind).session_id
    return request.start.session_id if kind == "start" else ""

