"""A serving process freezes its startup state out of garbage collection and collects less often."""

from __future__ import annotations

import json
import subprocess
import sys

from loopwire.common.gc_tuning import SERVING_THRESHOLDS

SERVE_AND_REPORT = """
import asyncio, gc, json, os, signal
from loopwire.common import grpc_server

async def main():
    before = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(), "objects": len(gc.get_objects())}
    server = grpc_server.make_server()

    def ready(port):
        after = {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}
        print(json.dumps({"before": before, "after": after}), flush=True)
        asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGTERM)  # once serve handles it

    await grpc_server.serve(server, "127.0.0.1:0", [], ready=ready, drain_seconds=0)

asyncio.run(main())
"""


def test_a_grpc_server_that_starts_serving_freezes_its_startup_objects_and_sets_the_serving_thresholds():
    # A process of its own: freezing and thresholds are process-wide, and the test runner's must stay.
    done = subprocess.run([sys.executable, "-c", SERVE_AND_REPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["before"]["frozen"] == 0 and tuple(report["before"]["threshold"]) != SERVING_THRESHOLDS
    assert tuple(report["after"]["threshold"]) == SERVING_THRESHOLDS
    # Everything alive at startup (the imports' modules, functions, descriptors) is out of later collections.
    assert report["after"]["frozen"] >= report["before"]["objects"] // 2
