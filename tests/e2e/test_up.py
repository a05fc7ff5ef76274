"""`loopwire up`: three services in the foreground, a development key and a service token left
(0600) in the state dir, a clean stop on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import grpc
import pytest

from loopwire.mesh import free_port, wait_healthy
from loopwire.v1 import harness_pb2, harness_pb2_grpc, inference_pb2, inference_pb2_grpc

pytestmark = pytest.mark.e2e


def test_up_serves_prints_a_key_and_stops_cleanly(tmp_path):
    ports = {name: free_port() for name in ("harness", "gateway", "inference")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwire.cli", "up", "--state-dir", str(tmp_path),
         "--harness-port", str(ports["harness"]), "--gateway-port", str(ports["gateway"]),
         "--inference-port", str(ports["inference"]), "--model", "dummy:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"},
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "loopwire up exited early:\n" + "".join(lines)
            lines.append(line)
            if "development API key" in line:
                break
        key = re.search(r"key \(tenant '\w+'\): (\S+)", "".join(lines))
        assert key, "".join(lines)
        for port in ports.values():
            wait_healthy(f"127.0.0.1:{port}", timeout=10)
        # The credentials stay in the state dir, readable by their owner only: the printed key
        # (what `loopwire run` reads) and the service token the services share.
        dev_key, token_file = tmp_path / "dev-api-key", tmp_path / "service-token"
        for path in (dev_key, token_file):
            assert path.is_file(), sorted(p.name for p in tmp_path.iterdir())
            assert path.stat().st_mode & 0o777 == 0o600, (path.name, oct(path.stat().st_mode))
        assert dev_key.read_text().strip() == key.group(1)
        token = token_file.read_text().strip()
        assert len(token) >= 16 and token != key.group(1)
        with grpc.insecure_channel(f"127.0.0.1:{ports['inference']}") as ch:
            stub = inference_pb2_grpc.InferenceServiceStub(ch)
            with pytest.raises(grpc.RpcError) as refused:
                stub.GetStatus(inference_pb2.GetStatusRequest(), timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            auth = (("authorization", f"Bearer {token}"),)
            status = stub.GetStatus(inference_pb2.GetStatusRequest(), timeout=10, metadata=auth)
            info = stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), timeout=10, metadata=auth).model
        assert status.engine == "reference" and status.kv_blocks_free > 0
        assert info.source == "dummy:0" and info.tokenizer_digest == status.tokenizer_digest  # --model reached it
        # The printed key works at the harness; without it the harness refuses.
        with grpc.insecure_channel(f"127.0.0.1:{ports['harness']}") as ch:
            stub = harness_pb2_grpc.HarnessServiceStub(ch)
            with pytest.raises(grpc.RpcError) as refused:
                stub.ListSessions(harness_pb2.ListSessionsRequest(), timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            listed = stub.ListSessions(harness_pb2.ListSessionsRequest(), timeout=10,
                                       metadata=(("authorization", f"Bearer {key.group(1)}"),))
        assert list(listed.sessions) == []
        # The SQLite state and the auth file live in the state dir; the auth file holds only hashes.
        assert (tmp_path / "auth.json").exists() and key.group(1) not in (tmp_path / "auth.json").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines) + rest
    assert "stopped" in rest  # each service logs its drained stop
    for port in ports.values():
        with pytest.raises(TimeoutError):
            wait_healthy(f"127.0.0.1:{port}", timeout=1)
