"""The agent loop of one session: model call, tools as their calls stream in, repeat.

Durability first: the task, each response's output and each tool output (in call order) are
committed before the next model call, so a restart resumes with the same transcript. A call
that needs approval suspends the turn into `pending_calls`; an answer resumes it, in this
process or a later one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from loopwire.common import errors, telemetry
from loopwire.common.errors import Code
from loopwire.common.model_def import TOOL_CALL_SYNTAX, named
from loopwire.harness import compaction, extensions, session_ids, tools
from loopwire.harness import metrics as harness_metrics
from loopwire.harness.approvals import Verdict
from loopwire.harness.background import BackgroundTasks
from loopwire.harness.config import HarnessConfig
from loopwire.harness.conversation import Conversation, EventHandler, GatewayError, ModelTurn
from loopwire.harness.kv_hints import KvHints
from loopwire.harness.replay import ReplayPlan
from loopwire.harness.sandbox import Sandbox
from loopwire.harness.store import Decision, SessionStore, Status, StoredSession, StoreUnavailable
from loopwire.harness.turn_tools import Step, TurnTools, output_item
from loopwire.v1 import common_pb2, gateway_pb2, harness_pb2

log = logging.getLogger("loopwire.harness")

Emit = Callable[[harness_pb2.RunResponse], None]


def user_message(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))


def add_usage(total: common_pb2.Usage, more: common_pb2.Usage) -> None:
    for f in ("input_tokens", "cached_input_tokens", "output_tokens", "draft_tokens_proposed",
              "draft_tokens_accepted", "verification_steps"):
        setattr(total, f, getattr(total, f) + getattr(more, f))


def busy_us(intervals: list[tuple[int, int]]) -> int:
    """Time during which at least one tool ran (parallel calls are not double counted)."""
    total, end = 0, 0
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


class SessionRun:
    """Runs one session until it completes, fails, is cancelled or waits for approval."""

    def __init__(self, config: HarnessConfig, store: SessionStore, sandbox: Sandbox, stored: StoredSession,
                 emit: Emit, api_key: str = "", background: BackgroundTasks | None = None,
                 max_retention: int = 0) -> None:
        self.config, self.store, self.sandbox = config, store, sandbox
        self.stored = stored
        self.session_id = stored.session.session_id  # the store's key
        self.public_id = session_ids.public(self.session_id)  # what the client knows it by
        self.start = stored.start
        self.items = list(stored.items)
        self.turn_count = stored.session.turn_count
        self.workspace = Path(stored.session.workspace)
        self.replay = ReplayPlan(self.start.replay) if self.start.replay.turns else None
        self.background = background or BackgroundTasks()  # a suspended run's tasks come back
        self.suspended = False
        self.tool_context = tools.ToolContext(self.workspace, sandbox, self.background, config.shell_timeout,
                                              config.background_after)
        if extensions.wanted(config, self.start):  # tool_search over deferred tools, exec_js
            self.tool_context.extra = extensions.Extensions(config, self.start, self.items, stored.tenant,
                                                            [t.name for t in stored.tools])
        self.conversation = Conversation(
            config.gateway, api_key or config.api_key,  # the caller's key: the gateway bills its tenant
            stateful=self.start.model.conversation_mode != harness_pb2.CONVERSATION_MODE_STATELESS,
            last_response_id=stored.last_response_id, held_items=stored.held_items)
        self.inbox: list[str] = []
        # The served model's window (the gateway tells it when no --context-window is set) and the
        # last prompt's size as the model counted it: what compaction measures against.
        self.context_window = config.context_window
        self.last_prompt = compaction.PromptCount()
        self.usage = common_pb2.Usage()
        self.final_text = ""
        self.cancel_status: int = Status.SESSION_STATUS_CANCELLED
        # The longest KV hold the tenant's policy allows (max_retention_seconds): the approval hold is cut to it.
        self.max_retention = max_retention
        self.kv_hints = KvHints(self)  # tool pauses: the KV may leave the device, and comes back at the end
        self._emit = emit
        self._started_ns = time.perf_counter_ns()
        self._path_locks: dict[str, asyncio.Lock] = {}

    def emit(self, **event: object) -> None:
        response = harness_pb2.RunResponse(session_id=self.public_id, **event)  # type: ignore[arg-type]
        harness_metrics.metrics().observe(response, self.start.model.model)
        self._emit(response)

    async def _store(self, fn: Callable[..., object], *args: object, **kwargs: object) -> None:
        await asyncio.to_thread(fn, *args, **kwargs)

    async def append(self, items: list[common_pb2.Item], *, new_turn: bool = False) -> None:
        if not items:
            return
        await self._store(self.store.append, self.session_id, items, first_seq=len(self.items), new_turn=new_turn)
        self.items.extend(items)

    # -- the run ---------------------------------------------------------------------

    async def _learn_model(self) -> None:
        """The window for compaction, and one line when the model's own template cannot lay out
        tools (loopwire writes them into the system message instead: a small model may follow
        that layout less well than its own)."""
        wants_window = not self.context_window and self.config.compact_at > 0
        if not wants_window and not self.stored.tools:
            return
        model = await self.conversation.model()
        if model is None:
            return
        if wants_window:
            self.context_window = model.context_length
        if self.stored.tools and not model.template_lays_out_tools:
            self.emit(diagnostic=harness_pb2.RunDiagnostic(source="gateway", message=(
                f"{model.name}'s chat template has no tool support: loopwire lays the {len(self.stored.tools)} "
                f"tools out in the system message and parses {named(TOOL_CALL_SYNTAX, model.tool_call_syntax, model.tool_call_format) or 'hermes'} calls")))

    async def run(self, *, resumed: bool) -> None:
        telemetry.bind_log_ids(session_id=self.session_id)  # this run's task: its log lines name the session
        self.emit(started=harness_pb2.RunStarted(
            session_id=self.public_id, resumed=resumed, items=len(self.items), workspace=str(self.workspace),
            replay_source=self.start.replay.source if self.replay else ""))
        if self.sandbox.unavailable_reason and (not self.replay or self.replay.run_tools):
            self.emit(diagnostic=harness_pb2.RunDiagnostic(source="sandbox", message=self.sandbox.unavailable_reason))
        try:
            await self._learn_model()
            await self._store(self.store.set_status, self.session_id, Status.SESSION_STATUS_RUNNING)
            if await self._settle_open_turn() is Step.SUSPENDED or await self._loop() is Step.SUSPENDED:
                self.suspended = True
        except asyncio.CancelledError:
            self.suspended = False  # cancelled while suspending: nothing is parked, its commands end below
            try:
                self.store.set_status(self.session_id, self.cancel_status)
            except Exception:  # noqa: BLE001 - a full disk: it still shows (and resumes) as interrupted
                log.exception("session %s: cannot record its cancel", self.session_id)
            self.emit(failed=harness_pb2.RunFailed(error=errors.error(
                Code.ERROR_CODE_CANCELLED, "run cancelled; resume the session to continue")))
            raise
        except GatewayError as e:
            await self._fail(e.error)
        except StoreUnavailable as e:  # a full disk, a database down: its own code, retryable
            log.warning("session %s: %s", self.session_id, e)
            await self._fail(e.to_proto())
        except Exception as e:  # the harness must outlive any one session's bug
            log.exception("session %s failed", self.session_id)
            await self._fail(errors.error(Code.ERROR_CODE_INTERNAL, f"{type(e).__name__}: {e}"))
        finally:
            if not self.parks_background:
                self.background.kill_all()
            await self.conversation.close()

    async def _hold_kv(self, seconds: int) -> None:
        """While a human decides, the last response's KV is paused (a KV hint, ``kv_hints``): its
        replica lets it leave the device first, for the host tier, under memory pressure instead
        of pinning it there, for at most the tenant's max_retention_seconds. The decision ends the
        pause (``TurnTools.kv_hints_after_approval``). A hint: when the gateway cannot, the
        session goes on and the diagnostic says why."""
        if not seconds or not self.conversation.stateful:
            return
        if not self.max_retention:
            self.emit(diagnostic=harness_pb2.RunDiagnostic(source="harness", message=(
                "KV not kept while waiting for approval: the tenant's max_retention_seconds is 0")))
            return
        seconds = min(seconds, self.max_retention)
        hint = common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_PAUSE, reason="approval")
        try:
            held = await self.conversation.hold_kv(seconds, hint=hint)
        except GatewayError as e:
            self.emit(diagnostic=harness_pb2.RunDiagnostic(source="gateway", message=f"KV hint: {e.error.message}"))
            return
        self.emit(diagnostic=harness_pb2.RunDiagnostic(
            source="gateway", message=f"KV kept while waiting for approval: {held.blocks} blocks on "
                                      f"{held.replica_id or 'no replica'}, in the host tier under pressure, "
                                      f"for up to {seconds} s"))

    @property
    def parks_background(self) -> bool:
        """A run suspended for approval keeps its commands running for the resumed run."""
        return self.suspended and self.background.pending

    async def _report_lost_background(self) -> None:
        texts = [i.function_call_output.output if i.WhichOneof("item") == "function_call_output"
                 else "".join(p.text for p in i.message.content) for i in self.items
                 if i.WhichOneof("item") in ("function_call_output", "message")]
        lost = self.background.adopt(texts)
        for handle in lost:
            self.emit(diagnostic=harness_pb2.RunDiagnostic(
                source="harness", message=f"background command {handle} was lost: the harness restarted"))
        await self.append([user_message(f"[background command {h} was lost: the harness restarted while it ran; "
                                        "its result will not arrive. Run it again if you still need it.]")
                           for h in lost])

    async def _fail(self, error: common_pb2.Error) -> None:
        """Always ends the run with a failed event, even when the store cannot record it (full disk:
        the session then shows INTERRUPTED, see SessionStore._status_here). A retryable failure says
        how to go on: everything up to it is stored."""
        failure = common_pb2.Error()
        failure.CopyFrom(error)
        if failure.retryable:
            failure.message += "; the session can be resumed (ResumeSession)"
        try:
            await self._store(self.store.set_status, self.session_id, Status.SESSION_STATUS_FAILED, failure.message)
        except Exception as e:  # noqa: BLE001 - reported in the event below
            log.exception("session %s: cannot record its failure", self.session_id)
            failure.message += f" (and the failure could not be stored: {type(e).__name__}: {e})"
        self.emit(failed=harness_pb2.RunFailed(error=failure))

    async def _loop(self) -> Step:
        max_turns = self.start.max_turns or self.config.max_turns
        await self._report_lost_background()  # after the open turn is settled: calls stay next to outputs
        while True:
            await self._deliver_pushed_items()
            if self.turn_count >= max_turns or (self.replay and self.turn_count >= len(self.replay.turns)):
                reason = "max_turns reached" if self.turn_count >= max_turns else "the replay script ran out of turns"
                self.emit(diagnostic=harness_pb2.RunDiagnostic(source="harness", message=f"stopped: {reason}"))
                return await self._complete()
            await compaction.maybe_compact(self)  # past the threshold: older turns become a summary
            step = await self._turn()
            if step is Step.SUSPENDED:
                return step
            if step is Step.FINAL and not self.inbox:
                if not self.background.running:
                    return await self._complete()
                await self.background.next_completion()  # the model is told when it finishes

    async def _complete(self) -> Step:
        await self._store(self.store.set_status, self.session_id, Status.SESSION_STATUS_COMPLETED)
        self.emit(completed=harness_pb2.RunCompleted(
            final_text=self.final_text, turns=self.turn_count, usage=self.usage,
            wall_us=(time.perf_counter_ns() - self._started_ns) // 1000))
        return Step.FINAL

    async def _deliver_pushed_items(self) -> None:
        """Append finished background commands and queued user messages before the next call."""
        items = []
        for task in self.background.undelivered():
            r = task.result
            exit_code, text = (r.exit_code, r.output.text) if r else (-1, "(no result: the command was stopped)")
            self.emit(background_task_completed=harness_pb2.BackgroundTaskCompleted(
                handle=task.handle, exit_code=exit_code, output=text))
            items.append(user_message(f"[background command {task.handle} finished with exit code {exit_code}]\n"
                                      f"$ {task.command}\n{text}"))
        items += [user_message(text) for text in self.inbox]
        self.inbox.clear()
        await self.append(items)

    # -- one turn --------------------------------------------------------------------

    def _request(self) -> gateway_pb2.CreateResponse:
        """No KV retention hint here: the KV is held only once the session waits (_hold_kv)."""
        opts = self.start.model
        request = gateway_pb2.CreateResponse(
            model=opts.model, instructions=self.stored.instructions, tools=self.stored.tools, sampling=opts.sampling,
            tool_choice=opts.tool_choice)
        if tools.requires_tools(self.start) and not any(i.WhichOneof("item") == "function_call" for i in self.items):
            # One action before the answer: the first call of a session cannot be `finish`.
            request.tool_choice.allowed_tools.extend(t.name for t in self.stored.tools if t.name != tools.FINISH)
        if self.replay:
            request.replay.CopyFrom(self.replay.turns[self.turn_count].output)
        return request

    async def _turn(self) -> Step:
        turn_no = self.turn_count + 1
        started = time.perf_counter_ns()
        running = TurnTools(self, turn_no)

        def on_event(event: gateway_pb2.ConverseResponse) -> None:
            kind = event.WhichOneof("event")
            if kind == "text_delta":
                self.emit(text_delta=harness_pb2.RunTextDelta(turn=turn_no, text=event.text_delta.text))
            elif kind == "tool_call_done":
                running.start(event.tool_call_done.call)
            elif kind == "prefill_progress":
                self.emit(prefill_progress=harness_pb2.RunPrefillProgress(turn=turn_no,
                                                                          progress=event.prefill_progress))
            elif kind == "safety" and not event.safety.allowed:
                verdict = event.safety
                self.emit(diagnostic=harness_pb2.RunDiagnostic(
                    source="gateway safety", message=f"{verdict.category} {verdict.detail}".strip()))

        with telemetry.turn_span(self.session_id, turn_no, self.start.model.model) as span:
            try:
                step, model = await self._turn_body(turn_no, running, on_event, started)
            except BaseException:
                running.cancel()  # kills the turn's processes when the run is cancelled
                raise
            span.set_usage(model.usage)
            span.finish(model.finish_reason)
            return step

    async def _turn_body(self, turn_no: int, running: TurnTools, on_event: EventHandler,
                         started: int) -> tuple[Step, ModelTurn]:
        prompt = await compaction.prompt_view(self)  # off the loop when the log is large
        model = await self.conversation.respond(self._request(), prompt, on_event)
        for note in model.diagnostics:
            self.emit(diagnostic=harness_pb2.RunDiagnostic(source="gateway", message=note))
        await self.append(model.output, new_turn=True)
        self.last_prompt = compaction.PromptCount(model.usage.input_tokens + model.usage.output_tokens, len(self.items))
        if running.journaled:  # the calls are in the transcript now
            await self._store(self.store.clear_started_calls, self.session_id)
        self.turn_count += 1
        await self._store(self.store.set_conversation, self.session_id, self.conversation.last_response_id,
                          self.conversation.held_items)
        add_usage(self.usage, model.usage)
        calls = model.calls
        step = Step.FINAL
        if calls:
            step = await running.finish(calls)
            finish = next((c for c in calls if c.name == tools.FINISH), None)
            if finish is not None and step is Step.CONTINUE and tools.requires_tools(self.start):
                self.final_text, step = tools.finish_answer(finish) or model.text, Step.FINAL
        else:
            self.final_text = model.text
        profile = harness_pb2.TurnProfile(
            turn=turn_no, usage=model.usage, timings=model.timings, tool_us=busy_us(running.intervals),
            bytes_sent=model.bytes_sent, wall_us=(time.perf_counter_ns() - started) // 1000, tool_calls=len(calls),
            harness_ttft_us=model.ttft_us, items_sent=model.items_sent, full_request=model.full_request,
            resends=model.resends, finish_reason=model.finish_reason)  # type: ignore[arg-type]
        await self._store(self.store.add_turn, self.session_id, profile)
        self.emit(turn_completed=harness_pb2.TurnCompleted(profile=profile))
        if step is Step.SUSPENDED:
            await self._hold_kv(self.config.approval_retention)
        for request in running.requested:  # last: the stream of a suspended run ends here
            self.emit(approval_requested=request)
        return step, model

    # -- resuming --------------------------------------------------------------------

    async def _settle_open_turn(self) -> Step:
        """Finish a turn a previous run left open: approvals, or tools a crash interrupted."""
        await self._report_unrecorded_calls()
        pending = self.stored.pending
        if pending:
            waiting = [p for p in pending if p.decision == Decision.PENDING]
            if waiting:
                await self._store(self.store.set_status, self.session_id, Status.SESSION_STATUS_AWAITING_APPROVAL)
                await self._hold_kv(self.config.approval_retention)  # again: a restart may have outlived it
                for p in waiting:
                    self.emit(approval_requested=harness_pb2.ApprovalRequested(approval_id=p.approval_id, call=p.call))
                return Step.SUSPENDED
            running = TurnTools(self, self.turn_count)
            running.calls = self.last_turn_calls()
            for p in pending:
                if p.result is None:
                    running.start(p.call, verdict=Verdict.RUN)
            # Decided: the approval's pause becomes the tools' (the resume due when they end), or
            # ends now when they are short.
            hints = running.kv_hints_after_approval([p.call for p in pending if p.result is None])
            try:
                outputs = [p.result if p.result is not None else await running.result(p.call) for p in pending]
            finally:
                await hints  # the next request must not share the gateway stream with a hint
            for out in outputs:
                await self.append([output_item(out)])
            await self.append(self.tool_context.extra.take_items() if self.tool_context.extra else [])
            await self.append(running.recorded_messages())
            await self._store(self.store.clear_pending, self.session_id)
            if running.journaled:
                await self._store(self.store.clear_started_calls, self.session_id)
            return Step.CONTINUE
        answered = {i.function_call_output.call_id for i in self.items if i.WhichOneof("item") == "function_call_output"}
        open_calls = [i.function_call for i in self.items
                      if i.WhichOneof("item") == "function_call" and i.function_call.call_id not in answered]
        if open_calls:
            if self.replay and not self.replay.run_tools:
                await self.append(self.replay.followups(self.turn_count - 1, self.last_turn_calls()))
            else:
                await self.append([output_item(common_pb2.FunctionCallOutput(
                    call_id=c.call_id, is_error=True,
                    output="error: the harness restarted while this call ran; its result is lost "
                           "(it may or may not have taken effect)")) for c in open_calls])
        return Step.CONTINUE

    async def _report_unrecorded_calls(self) -> None:
        """Calls whose tools started in a turn that a crash kept from being stored: into the
        transcript with an error output, so the model knows their side effects may exist."""
        recorded = {i.function_call.call_id for i in self.items if i.WhichOneof("item") == "function_call"}
        lost = [c for c in self.stored.started_calls if c.call_id not in recorded]
        for call in lost:
            self.emit(diagnostic=harness_pb2.RunDiagnostic(
                source="harness", message=f"call {call.call_id} ({call.name}) started before a crash lost its turn"))
            await self.append([common_pb2.Item(function_call=call), output_item(common_pb2.FunctionCallOutput(
                call_id=call.call_id, is_error=True,
                output="error: the harness stopped while this call ran, before the turn that made it was stored; "
                       "its result is lost (it may or may not have taken effect)"))])
        if self.stored.started_calls:
            await self._store(self.store.clear_started_calls, self.session_id)

    def last_turn_calls(self) -> list[common_pb2.FunctionCall]:
        calls: list[common_pb2.FunctionCall] = []
        for item in reversed(self.items):
            kind = item.WhichOneof("item")
            if kind == "function_call":
                calls.insert(0, item.function_call)
            elif kind != "function_call_output":
                break
        return calls

    def new_approval_id(self) -> str:
        return f"appr_{uuid.uuid4().hex[:16]}"

    def path_lock(self, call: common_pb2.FunctionCall) -> contextlib.AbstractAsyncContextManager[object]:
        """Edits of one file run in call order; everything else runs in parallel."""
        if call.name != "edit_file":
            return contextlib.nullcontext()
        try:
            path = str(json.loads(call.arguments).get("path", ""))
        except (ValueError, AttributeError):
            return contextlib.nullcontext()
        return self._path_locks.setdefault(path, asyncio.Lock())
