"""Drive a run on the harness and collect what it reports: used by `loopwire run`,
`loopwire replay` and the end-to-end tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from loopwire.common.grpc_server import service_channel
from loopwire.v1 import harness_pb2, harness_pb2_grpc


@dataclass
class RunResult:
    session_id: str = ""
    completed: bool = False
    error: str = ""
    final_text: str = ""
    turns: list[harness_pb2.TurnProfile] = field(default_factory=list)
    events: int = 0
    tool_calls: int = 0
    wall_s: float = 0.0


async def run_task(
    harness: str,
    start: harness_pb2.StartTask | harness_pb2.AddUserMessage,
    on_event: Callable[[harness_pb2.RunResponse], None] | None = None,
    timeout: float | None = None,
    api_key: str = "",
) -> RunResult:
    """Start a task (or continue a session with a user message) and stream its events until the
    run completes or fails."""
    result = RunResult()
    t0 = time.perf_counter()
    async with service_channel(harness) as channel:
        stub = harness_pb2_grpc.HarnessServiceStub(channel)
        metadata = (("authorization", f"Bearer {api_key}"),) if api_key else None
        request = (harness_pb2.RunRequest(start=start) if isinstance(start, harness_pb2.StartTask)
                   else harness_pb2.RunRequest(user_message=start))
        call = stub.Run(iter([request]), timeout=timeout, metadata=metadata)
        try:
            async for event in call:
                result.events += 1
                if on_event:
                    on_event(event)
                kind = event.WhichOneof("event")
                if kind == "started":
                    result.session_id = event.started.session_id
                elif kind == "turn_completed":
                    result.turns.append(event.turn_completed.profile)
                elif kind == "tool_call_ended":
                    result.tool_calls += 1
                elif kind == "completed":
                    result.completed = True
                    result.final_text = event.completed.final_text
                    break
                elif kind == "failed":
                    result.error = f"{event.failed.error.message}"
                    break
        except grpc.aio.AioRpcError as e:
            result.error = f"{e.code().name}: {e.details()}"
        finally:
            call.cancel()
    result.wall_s = time.perf_counter() - t0
    return result
