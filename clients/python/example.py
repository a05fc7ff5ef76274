"""Run one task on a loopwire harness and print every event of the run, one line of proto3
canonical JSON each (json_format, without insignificant whitespace), like every other example.

Usage: python example.py [HARNESS_ADDRESS] [TASK]

The address defaults to $LOOPWIRE_HARNESS, then 127.0.0.1:50051. The tenant API key comes from
$LOOPWIRE_API_KEY and is sent as `authorization: Bearer <key>` (`loopwire up` prints a development
key and leaves it in .state/dev-api-key). Without a task it replays a built-in two-turn session
(a shell call, then an answer), which needs no model weights.
Exits 0 once the run completes, 1 if it fails, 2 without a key.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import grpc
from google.protobuf import json_format
from loopwire_client import auth_metadata, harness_stub
from loopwire_client.v1 import common_pb2, harness_pb2

BASH = common_pb2.Tool(
    name="bash",
    description="Run a shell command",
    parameters='{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}',
)


def built_in_replay() -> harness_pb2.StartTask:
    call = common_pb2.FunctionCall(call_id="call_1", name="bash", arguments='{"command":"echo hello"}')
    return harness_pb2.StartTask(
        task="Greet from the shell, then say you are done.",
        max_turns=4,
        replay=harness_pb2.ReplayScript(
            source="python client example (built in)",
            tools=[BASH],
            turns=[
                harness_pb2.ReplayTurn(
                    output=common_pb2.ReplayOutput(text="I will greet from the shell.", function_calls=[call]),
                    followups=[
                        common_pb2.Item(
                            function_call_output=common_pb2.FunctionCallOutput(call_id="call_1", output="hello\n")
                        )
                    ],
                ),
                harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(text="Done: the shell said hello.")),
            ],
        ),
    )


async def run(address: str, api_key: str, start: harness_pb2.StartTask) -> int:
    channel, stub = harness_stub(address)
    async with channel:
        call = stub.Run(timeout=300, metadata=auth_metadata(api_key))
        await call.write(harness_pb2.RunRequest(start=start))
        try:
            async for event in call:
                print(json.dumps(json_format.MessageToDict(event), separators=(",", ":"), ensure_ascii=False), flush=True)
                kind = event.WhichOneof("event")
                if kind in ("completed", "failed"):
                    call.cancel()  # the run is over; the harness may keep the stream open
                    return 0 if kind == "completed" else 1
        except grpc.aio.AioRpcError as err:
            print(f"run: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    print("stream ended before the run completed", file=sys.stderr)
    return 1


def main() -> int:
    api_key = os.environ.get("LOOPWIRE_API_KEY", "").strip()
    if not api_key:
        print("LOOPWIRE_API_KEY is not set: export the harness API key "
              "(`loopwire up` leaves a development key in .state/dev-api-key)", file=sys.stderr)
        return 2
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LOOPWIRE_HARNESS", "127.0.0.1:50051")
    start = harness_pb2.StartTask(task=sys.argv[2], max_turns=8) if len(sys.argv) > 2 else built_in_replay()
    return asyncio.run(run(address, api_key, start))


if __name__ == "__main__":
    sys.exit(main())
