"""The shell sandbox: writes stay in the workspace, no network, killed at its timeout."""

from __future__ import annotations

import asyncio
import socket

import pytest

from loopwire.harness.sandbox import Sandbox, SandboxUnavailable

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sandbox(tmp_path):
    box = Sandbox(output_limit=4096)
    assert box.probe(tmp_path / "probe") == "", box.unavailable_reason
    return box


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


async def test_writes_land_in_the_workspace_and_nowhere_else(sandbox, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    r = await sandbox.run(workspace, f"echo in > inside.txt; echo out > {outside}/x.txt; touch /usr/x; "
                                     "touch $HOME/home.txt; echo done", timeout=10)
    assert (workspace / "inside.txt").read_text() == "in\n" and (workspace / "home.txt").exists()
    assert not (outside / "x.txt").exists()
    assert "Read-only file system" in r.output.text and "done" in r.output.text


async def test_no_network_unless_granted(sandbox, workspace):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2); print(\"connected\")'"
        denied = await sandbox.run(workspace, probe, timeout=10)
        assert denied.exit_code != 0 and "connected" not in denied.output.text
        # Granted network goes out through the egress proxy, never into the host's loopback services.
        granted = await sandbox.run(workspace, probe, timeout=10, network=True)
        assert granted.exit_code != 0 and "connected" not in granted.output.text


async def test_timeout_kills_the_whole_process_tree(sandbox, workspace):
    r = await sandbox.run(workspace, "(sleep 1; touch child.txt) & sleep 1; touch parent.txt", timeout=0.3)
    assert r.timed_out
    await asyncio.sleep(1.5)
    assert not (workspace / "child.txt").exists() and not (workspace / "parent.txt").exists()


async def test_exit_code_and_capped_binary_output(sandbox, workspace):
    r = await sandbox.run(workspace, "head -c 100000 /dev/urandom; exit 3", timeout=10)
    assert r.exit_code == 3 and not r.timed_out
    assert r.output.truncated and "cut from the middle of 100000 bytes" in r.output.text
    r.output.text.encode("utf-8")  # valid text for the transcript, however binary the output


async def test_unusable_bwrap_fails_loudly(tmp_path, workspace):
    box = Sandbox(bwrap=str(tmp_path / "no-such-bwrap"))
    assert "cannot run" in box.probe(tmp_path / "probe")
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        await box.start(workspace, "true")
