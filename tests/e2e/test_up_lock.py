"""`loopwire up` holds its state dir: a second one on the same dir refuses in one line, with a
non-zero exit, before it writes anything -- the running mesh keeps its key, auth file and
service token, so `loopwire run` still gets in."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from loopwire.mesh import LOCK_FILE, StateDirBusy, free_ports, lock_state_dir, wait_healthy
from loopwire.v1 import harness_pb2, harness_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

CREDENTIALS = ("dev-api-key", "auth.json", "service-token")


def up(state: Path, ports: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "loopwire.cli", "up", "--state-dir", str(state), "--harness-port", ports[0],
         "--gateway-port", ports[1], "--inference-port", ports[2], "--api-port", "0", "--model", "dummy:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"},
        start_new_session=True)


def refused(state: Path, ports: list[str]) -> str:
    """Run a second `loopwire up` on ``state``; its output, after checking that it refused."""
    second = up(state, ports)
    try:
        out, _ = second.communicate(timeout=60)
    finally:
        if second.poll() is None:  # it did not refuse: stop what it started
            os.killpg(second.pid, signal.SIGTERM)
            second.communicate(timeout=60)
    assert second.returncode == 1, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "in use by a running `loopwire up`" in lines[0], out
    return lines[0]


def test_a_held_state_dir_refuses_before_writing_anything(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from loopwire.mesh import lock_state_dir; "
         f"lock = lock_state_dir({str(tmp_path)!r}); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(StateDirBusy, match=f"pid {holder.pid}"):
            lock_state_dir(tmp_path)
        assert f"pid {holder.pid}" in refused(tmp_path, [str(p) for p in free_ports(3)])
        assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE]  # no key, token, auth file or logs
    finally:
        holder.communicate(input="", timeout=30)
    lock_state_dir(tmp_path).close()  # the lock went with the process that held it


def test_a_second_up_leaves_the_running_mesh_usable(tmp_path):
    ports = [str(p) for p in free_ports(3)]
    first = up(tmp_path, ports)
    lines: list[str] = []
    try:
        assert first.stdout is not None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not any("development API key" in line for line in lines):
            line = first.stdout.readline()
            assert line, "loopwire up exited early:\n" + "".join(lines)
            lines.append(line)
        found = re.search(r"key \(tenant '\w+'\): (\S+)", "".join(lines))
        harness = re.search(r"harness (127\.0\.0\.1:\d+)", "".join(lines))
        assert found and harness, "".join(lines)
        wait_healthy(harness.group(1), timeout=30)
        before = {name: (tmp_path / name).read_bytes() for name in CREDENTIALS}
        refused(tmp_path, ports)  # the same ports, as a second `loopwire up` of the same command line
        assert {name: (tmp_path / name).read_bytes() for name in CREDENTIALS} == before
        with grpc.insecure_channel(harness.group(1)) as channel:  # what `loopwire run` does with the key
            listed = harness_pb2_grpc.HarnessServiceStub(channel).ListSessions(
                harness_pb2.ListSessionsRequest(), timeout=10,
                metadata=(("authorization", f"Bearer {found.group(1)}"),))
        assert list(listed.sessions) == []
    finally:
        first.send_signal(signal.SIGTERM)
        rest, _ = first.communicate(timeout=60)
    assert first.returncode == 0, "".join(lines) + rest
