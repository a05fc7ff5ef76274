"""The shell sandbox: writes stay in the workspace, no network, killed at its timeout."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import processes
import pytest

from loopwire.harness.sandbox import Sandbox
from loopwire.harness.sandbox_limits import SandboxUnavailable

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
    command = "(setsid sleep 987.201; touch child.txt) & (sleep 987.202; touch group.txt) & sleep 987.203"
    r = await sandbox.run(workspace, command, timeout=0.5)
    assert r.timed_out
    for marker in ("987.201", "987.202", "987.203"):  # its own session too: the pid namespace ends
        assert await processes.ended(marker), marker


async def test_a_kill_as_soon_as_it_starts_leaves_nothing_running(sandbox, workspace):
    """The command waits for the harness to know its sandbox's pid: a kill at once, or a start
    cancelled halfway, cannot orphan a sandbox that then runs the command."""
    for n in range(8):
        process = await sandbox.start(workspace, f"touch ran{n}; sleep 987.3{n}")
        process.kill()
        start = asyncio.ensure_future(sandbox.start(workspace, f"touch ran{n}; sleep 987.4{n}"))
        await asyncio.sleep(0.002 * n)
        start.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            (await start).kill()
    for n in range(8):
        assert await processes.ended(f"987.3{n}") and await processes.ended(f"987.4{n}")


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
