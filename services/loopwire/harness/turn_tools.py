"""The tool calls of one turn: each starts as soon as its call is complete in the model's
stream, runs in parallel with the others (edits of one file in call order), is journaled
before it runs, and its output joins the transcript in call order; a call that needs
approval suspends the turn instead.
"""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import TYPE_CHECKING

from loopwire.common import telemetry
from loopwire.harness import approvals, tools
from loopwire.harness import metrics as harness_metrics
from loopwire.harness.approvals import Verdict
from loopwire.harness.sandbox_process import now_us
from loopwire.harness.store import Decision, PendingCall
from loopwire.v1 import common_pb2, harness_pb2

if TYPE_CHECKING:
    from loopwire.harness.loop import SessionRun


class Step(Enum):
    CONTINUE = "continue"
    FINAL = "final"
    SUSPENDED = "suspended"


def output_item(out: common_pb2.FunctionCallOutput) -> common_pb2.Item:
    return common_pb2.Item(function_call_output=out)


class TurnTools:
    """The tool calls of one turn: started as soon as each call is complete in the stream,
    run in parallel, their outputs appended in call order."""

    def __init__(self, run: SessionRun, turn_no: int) -> None:
        self.run = run
        self.turn_no = turn_no
        self.tasks: dict[str, asyncio.Task[common_pb2.FunctionCallOutput]] = {}
        self.awaiting: dict[str, str] = {}  # call_id -> approval_id
        self.intervals: list[tuple[int, int]] = []
        self.calls: list[common_pb2.FunctionCall] = []  # all calls of the turn, once known
        self.requested: list[harness_pb2.ApprovalRequested] = []  # stored; announced after the profile
        self.journaled = False  # some call was journaled before its tool started
        self._journal_lock = asyncio.Lock()
        self._followup_turn = turn_no - 1  # the replay turn whose recorded followups apply

    @property
    def recorded_only(self) -> bool:
        return bool(self.run.replay and not self.run.replay.run_tools)

    def start(self, call: common_pb2.FunctionCall, verdict: Verdict | None = None) -> None:
        if call.call_id in self.tasks or call.call_id in self.awaiting or self.recorded_only:
            return
        replay = self.run.replay
        mapped = replay.map_call(call) if replay else call
        if replay and mapped.name not in tools.TOOLS and not self._extension_call(mapped.name):
            return  # a recorded tool the harness does not have: its recorded output is used
        verdict = verdict or approvals.verdict(self.run.start.approval_policy, mapped)
        if verdict is Verdict.ASK:
            self.awaiting[call.call_id] = self.run.new_approval_id()
            return
        self.tasks[call.call_id] = asyncio.ensure_future(self._execute(call, mapped, verdict))

    def _extension_call(self, name: str) -> bool:
        """Whether the session's extensions run ``name`` (tool_search, a tool it found, exec_js),
        as they would in a live session: with their servers configured, a replay calls them for real."""
        extra = self.run.tool_context.extra
        return extra is not None and extra.handles(name)

    async def _execute(self, call: common_pb2.FunctionCall, mapped: common_pb2.FunctionCall,
                       verdict: Verdict) -> common_pb2.FunctionCallOutput:
        if verdict is not Verdict.REFUSE:  # journaled before any side effect, in call order
            # Inline (a local store's journal: no worker thread, no wait; this runs before the task's first
            # await, so in the order the calls started), else durable in a worker thread behind a FIFO lock.
            if not self.run.store.try_record_call_started(self.run.session_id, call):
                async with self._journal_lock:
                    await self.run._store(self.run.store.record_call_started, self.run.session_id, call)
            self.journaled = True
        began = now_us()
        self.run.emit(tool_call_began=harness_pb2.ToolCallBegan(turn=self.turn_no, call=call, started_at_us=began))
        if verdict is Verdict.REFUSE:
            outcome = tools.ToolOutcome("error: refused by the approval policy (this call needs more than the "
                                        "sandbox allows)", is_error=True, exit_code=126)
        else:
            with telemetry.tool_span(mapped.name, call.call_id):
                async with self.run.path_lock(mapped):
                    outcome = await tools.execute(mapped, self.run.tool_context)
        ended = now_us()
        harness_metrics.metrics().tool_finished(mapped.name, (ended - began) / 1e6, outcome.is_error)
        self.run.kv_hints.observe(mapped, (ended - began) / 1e6)
        self.intervals.append((began, ended))
        self.run.emit(tool_call_ended=harness_pb2.ToolCallEnded(
            turn=self.turn_no, call_id=call.call_id, name=call.name, output=outcome.output,
            exit_code=outcome.exit_code, is_error=outcome.is_error, truncated=outcome.truncated,
            started_at_us=began, finished_at_us=ended, handle=outcome.handle))
        return common_pb2.FunctionCallOutput(call_id=call.call_id, output=outcome.output, is_error=outcome.is_error)

    async def result(self, call: common_pb2.FunctionCall) -> common_pb2.FunctionCallOutput:
        task = self.tasks.get(call.call_id)
        if task is not None:
            return await task
        recorded = self._recorded_outputs().get(call.call_id)
        if recorded is None:
            recorded = common_pb2.FunctionCallOutput(call_id=call.call_id, is_error=True,
                                                     output=f"error: unknown tool `{call.name}`")
        now = now_us()
        self.run.emit(tool_call_began=harness_pb2.ToolCallBegan(turn=self.turn_no, call=call, started_at_us=now))
        self.run.emit(tool_call_ended=harness_pb2.ToolCallEnded(
            turn=self.turn_no, call_id=call.call_id, name=call.name, output=recorded.output,
            is_error=recorded.is_error, started_at_us=now, finished_at_us=now))
        return recorded

    def _done(self, call: common_pb2.FunctionCall) -> bool:
        """Whether the call's tool has returned its output (not raised, not waiting for approval)."""
        task = self.tasks.get(call.call_id)
        return (call.call_id not in self.awaiting and task is not None and task.done() and not task.cancelled()
                and task.exception() is None)

    def _recorded_outputs(self) -> dict[str, common_pb2.FunctionCallOutput]:
        replay = self.run.replay
        if not replay:
            return {}
        items = replay.followups(self._followup_turn, self.calls)
        return {i.function_call_output.call_id: i.function_call_output
                for i in items if i.WhichOneof("item") == "function_call_output"}

    def recorded_messages(self) -> list[common_pb2.Item]:
        """The recorded user messages that followed this turn's tool outputs (replay)."""
        if not self.run.replay:
            return []
        return [i for i in self.run.replay.followups(self._followup_turn, []) if i.WhichOneof("item") == "message"]

    async def finish(self, calls: list[common_pb2.FunctionCall]) -> Step:
        """Append the outputs in call order; suspend the turn if a call waits for approval."""
        self.calls = calls
        if self.recorded_only:
            assert self.run.replay
            for item in self.run.replay.followups(self._followup_turn, calls):
                if item.WhichOneof("item") == "function_call_output":
                    out = item.function_call_output
                    call = next((c for c in calls if c.call_id == out.call_id), common_pb2.FunctionCall())
                    now = now_us()
                    self.run.emit(tool_call_began=harness_pb2.ToolCallBegan(turn=self.turn_no, call=call,
                                                                             started_at_us=now))
                    self.run.emit(tool_call_ended=harness_pb2.ToolCallEnded(
                        turn=self.turn_no, call_id=out.call_id, name=call.name, output=out.output,
                        is_error=out.is_error, started_at_us=now, finished_at_us=now))
            await self.run.append(self.run.replay.followups(self._followup_turn, calls))
            return Step.CONTINUE
        for call in calls:
            self.start(call)  # calls the gateway did not stream as ToolCallDone
        hints = self._kv_hints(calls)
        try:
            return await self._gather(calls)
        finally:
            if hints is not None:
                await hints  # the next request must not share the gateway stream with a hint

    def _kv_hints(self, calls: list[common_pb2.FunctionCall]) -> asyncio.Task[None] | None:
        """Tools still run: a pause hint for them, and the resume hint due when the last ends."""
        running = [c for c in calls if c.call_id in self.tasks and not self.tasks[c.call_id].done()]
        if not running or not self.run.kv_hints.enabled:
            return None
        return self.run.kv_hints.around(running, [self.tasks[c.call_id] for c in running])

    def kv_hints_after_approval(self, calls: list[common_pb2.FunctionCall]) -> asyncio.Task[None]:
        """The approval's pause ends with the decided tools' own (or at once when they are short)."""
        running = [c for c in calls if c.call_id in self.tasks and not self.tasks[c.call_id].done()]
        return self.run.kv_hints.around(running, [self.tasks[c.call_id] for c in running], after_approval=True)

    async def _gather(self, calls: list[common_pb2.FunctionCall]) -> Step:
        n = 0
        while n < len(calls):
            if calls[n].call_id in self.awaiting:
                return await self._suspend(calls[n:])
            # Each output is stored as soon as it and those before it are done; outputs of the calls after
            # it that are done by then go in the same transaction (one commit, not one per call).
            outputs = [output_item(await self.result(calls[n]))]
            n += 1
            while n < len(calls) and self._done(calls[n]):
                outputs.append(output_item(await self.result(calls[n])))
                n += 1
            await self.run.append(outputs)
        await self.run.append(self.run.tool_context.extra.take_items() if self.run.tool_context.extra else [])
        await self.run.append(self.recorded_messages())
        return Step.CONTINUE

    async def _suspend(self, rest: list[common_pb2.FunctionCall]) -> Step:
        pending = []
        for offset, call in enumerate(rest):
            approval_id = self.awaiting.get(call.call_id, "")
            result = None if approval_id else await self.result(call)
            decision = Decision.PENDING if approval_id else Decision.NONE
            pending.append(PendingCall(offset, call, approval_id, decision, result))
        await self.run._store(self.run.store.save_pending, self.run.session_id, pending)
        self.requested = [harness_pb2.ApprovalRequested(approval_id=p.approval_id, call=p.call)
                          for p in pending if p.approval_id]
        return Step.SUSPENDED

    def cancel(self) -> None:
        for task in self.tasks.values():
            task.cancel()
