"""The session store on a REAL full filesystem (a small ext4 image on a loop device, else a tmpfs):
runs whose writes fail end with RESOURCE_EXHAUSTED naming the full disk (not SQLite's "cannot
rollback"), no session is left RUNNING with no run, and once space is freed the sessions resume
with every item stored before intact. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from harness_testkit import answer, harness_env, kinds, of

from loopwire.harness.loop import user_message
from loopwire.harness.store import SqliteSessionStore, StoreFull
from loopwire.v1 import common_pb2, gateway_pb2, harness_pb2

MB = 1 << 20
RUNNING = harness_pb2.SESSION_STATUS_RUNNING
RESUMABLE = (harness_pb2.SESSION_STATUS_FAILED, harness_pb2.SESSION_STATUS_INTERRUPTED)
FULL = "the session store's disk is full: "


def _mount(*args: str) -> str:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"mount exited {done.returncode}")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A mounted filesystem of about 20 MB (a 24 MB ext4 image, else a 24 MB tmpfs), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem to fill needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    image = tmp_path / "small.img"
    why = []
    try:
        subprocess.run(["truncate", "-s", "24M", str(image)], check=True, timeout=30)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True, timeout=60)
        loop_error = _mount("-o", "loop", str(image), str(mnt))
    except (OSError, subprocess.SubprocessError) as e:
        loop_error = str(e)
    if loop_error:
        why.append(f"ext4 on a loop device: {loop_error}")
        if tmpfs_error := _mount("-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)):
            why.append(f"tmpfs: {tmpfs_error}")
            pytest.skip("cannot mount a small filesystem: " + "; ".join(why))
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem refuses (ENOSPC), down to 512-byte writes: nothing else fits."""
    path = directory / "ballast"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (MB, 4096, 512):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
    return path


def texts(items) -> list[str]:  # noqa: ANN001
    return ["".join(p.text for p in i.message.content) for i in items]


async def assert_not_running(h, session_id: str) -> None:  # noqa: ANN001
    """A start that failed left no session, or (the disk refused even removing it) one shown resumable."""
    try:
        shown = (await h.session(session_id)).session.status
    except grpc.aio.AioRpcError as e:
        assert e.code() == grpc.StatusCode.NOT_FOUND, e
    else:
        assert shown == harness_pb2.SESSION_STATUS_INTERRUPTED


async def test_runs_on_a_full_disk_fail_as_resource_exhausted_and_resume_once_space_is_freed(small_fs, tmp_path):
    big = {name: name + ":" + "x" * MB for name in ("done", "mid", "new")}  # 1 MB tasks
    ballast: list[Path] = []
    async with harness_env(small_fs, workspace_root=tmp_path / "workspaces", max_input_bytes=2 * MB) as h:  # 1 MB tasks: over the default bound
        respond = h.gateway._respond

        async def filling(req):  # noqa: ANN001, ANN202 - the disk fills while the model answers, in 1 MB
            ballast.append(fill(small_fs))
            answer_text = common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text="y" * MB)]))
            yield gateway_pb2.ConverseResponse(response_id="r", created=gateway_pb2.ResponseCreated(response_id="r"))
            yield gateway_pb2.ConverseResponse(response_id="r", completed=gateway_pb2.ResponseCompleted(
                finish_reason=common_pb2.FINISH_REASON_STOP, output=[answer_text]))

        # A session that completes while there is room.
        h.gateway.script = [answer("first answer")]
        events = await h.start(big["done"], session_id="done")
        assert kinds(events)[-1] == "completed", of(events, "failed")

        # A run whose write of the model's (1 MB) answer meets the full disk.
        h.gateway._respond = filling
        events = await h.start(big["mid"], session_id="mid")
        assert ballast, "the run never reached the model"
        assert kinds(events)[0] == "started" and kinds(events)[-1] == "failed"
        error = of(events, "failed")[0].error
        assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED, error
        assert error.message.startswith(FULL) and "database or disk is full" in error.message, error.message
        assert error.retryable and error.field in ("", "store") and "ResumeSession" in error.message
        assert "cannot rollback" not in error.message
        mid = await h.session("mid")
        assert mid.session.status in RESUMABLE  # FAILED, or INTERRUPTED if even that could not be written
        assert texts(mid.items) == [big["mid"]]

        # Starts while the disk is full fail the same way, in the stream, and leave no RUNNING session.
        for _ in range(2):
            events = await h.start(big["new"], session_id="new")
            assert kinds(events) == ["failed"]
            error = of(events, "failed")[0].error
            assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED and error.retryable, error
            assert error.message.startswith(FULL) and "cannot rollback" not in error.message, error.message
        await assert_not_running(h, "new")
        listed = await h.stub.ListSessions(harness_pb2.ListSessionsRequest())
        assert RUNNING not in [s.status for s in listed.sessions], listed

        # Space freed: the failed session resumes and completes, the refused start now works.
        ballast[0].unlink()
        h.gateway._respond = respond
        h.gateway.script = [answer("mid answer"), answer("new answer")]
        events = await h.run(harness_pb2.RunRequest(resume=harness_pb2.ResumeSession(session_id="mid")))
        assert kinds(events)[-1] == "completed", of(events, "failed")
        events = await h.start(big["new"], session_id="new")
        assert kinds(events)[-1] == "completed", of(events, "failed")

        # Nothing stored before the disk filled was lost.
        assert texts((await h.session("done")).items) == [big["done"], "first answer"]
        assert texts((await h.session("mid")).items) == [big["mid"], "mid answer"]
        assert texts((await h.session("new")).items) == [big["new"], "new answer"]
        assert (await h.session("mid")).session.status == harness_pb2.SESSION_STATUS_COMPLETED


def test_a_status_the_full_disk_refuses_leaves_the_session_resumable_not_running(small_fs):
    """The best-effort FAILED write fails too: the session shows INTERRUPTED here, its lease is no
    longer kept fresh, a restart marks it INTERRUPTED, and it can be claimed again once space is freed."""
    path = small_fs / "harness.db"
    store = SqliteSessionStore(path)
    start = harness_pb2.StartTask(task="t" * MB)  # a big row: any status change rewrites it
    store.create("s1", start, "i", [], "/w", "")
    store.append("s1", [user_message("task")], first_seq=0)
    store.set_status("s1", RUNNING)
    beat = store._query("SELECT heartbeat_ms FROM sessions WHERE session_id = 's1'")[0][0]
    ballast = fill(small_fs)
    try:
        with pytest.raises(StoreFull, match="disk is full"):
            store.append("s1", [user_message("m" * MB)], first_seq=1)
        with pytest.raises(StoreFull, match="disk is full"):
            store.set_status("s1", harness_pb2.SESSION_STATUS_FAILED, "x" * 100)
        assert store._query("SELECT status FROM sessions WHERE session_id = 's1'")[0][0] == RUNNING
        assert store.load("s1").session.status == harness_pb2.SESSION_STATUS_INTERRUPTED
        assert [s.status for s in store.list(10, "")[0]] == [harness_pb2.SESSION_STATUS_INTERRUPTED]
        store.heartbeat()  # a shared store's heartbeat: the lease of a run that ended is let run out
        assert store._query("SELECT heartbeat_ms FROM sessions WHERE session_id = 's1'")[0][0] == beat
    finally:
        ballast.unlink()
    store.close()
    restarted = SqliteSessionStore(path)  # a restart writes what was shown
    assert restarted.mark_interrupted() == 1
    loaded = restarted.load("s1")
    assert loaded.session.status == harness_pb2.SESSION_STATUS_INTERRUPTED
    assert texts(loaded.items) == ["task"]
    restarted.set_status("s1", RUNNING)  # resumable: a new run claims it
    restarted.append("s1", [user_message("after")], first_seq=1)
    assert texts(restarted.load("s1").items) == ["task", "after"]
    restarted.close()


async def test_a_start_whose_task_item_meets_the_full_disk_can_be_retried_with_its_id(small_fs, tmp_path,
                                                                                    monkeypatch):
    """The session row is written, then the disk is full for the task item (and for removing the
    row again): the half-made session is not RUNNING, and the client's retried start (same id)
    works once space is freed."""
    ballast: list[Path] = []
    async with harness_env(small_fs, workspace_root=tmp_path / "workspaces", max_input_bytes=2 * MB) as h:  # 1 MB tasks: over the default bound
        store = h.service.store
        create = store.create

        def create_then_fill(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            create(*args, **kwargs)
            ballast.append(fill(small_fs))

        monkeypatch.setattr(store, "create", create_then_fill)
        task = "big:" + "x" * MB
        events = await h.start(task, session_id="s1")
        assert ballast and kinds(events) == ["failed"]
        error = of(events, "failed")[0].error
        assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED and error.retryable, error
        assert error.message.startswith(FULL) and "cannot rollback" not in error.message, error.message
        await assert_not_running(h, "s1")
        monkeypatch.setattr(store, "create", create)
        events = await h.start(task, session_id="s1")  # still full: the same answer, not ALREADY_EXISTS
        assert of(events, "failed")[0].error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED

        ballast[0].unlink()
        h.gateway.script = [answer("done")]
        events = await h.start(task, session_id="s1")
        assert kinds(events)[-1] == "completed", of(events, "failed")
        assert texts((await h.session("s1")).items) == [task, "done"]


async def test_a_run_cancelled_on_a_full_disk_still_ends_with_its_event_and_resumes(small_fs, tmp_path):
    """The cancel's status write fails (a 2 MB row to rewrite on a full disk): the run still ends with
    its CANCELLED event, the session is not left RUNNING, and it resumes once space is freed."""
    async with harness_env(small_fs, workspace_root=tmp_path / "workspaces", max_input_bytes=2 * MB) as h:  # 1 MB tasks: over the default bound
        h.gateway.first_token_delay_s = 60  # the model takes its time: the run is in progress
        task = "big:" + "x" * MB
        run = asyncio.ensure_future(h.start(task, session_id="c1"))
        while not h.gateway.requests:
            await asyncio.sleep(0.05)
        ballast = fill(small_fs)
        assert await h.run(harness_pb2.RunRequest(cancel=harness_pb2.CancelRun(session_id="c1"))) == []
        events = await asyncio.wait_for(run, 30)
        assert kinds(events)[-1] == "failed", kinds(events)
        assert of(events, "failed")[-1].error.code == common_pb2.ERROR_CODE_CANCELLED
        assert (await h.session("c1")).session.status in (harness_pb2.SESSION_STATUS_CANCELLED,
                                                          harness_pb2.SESSION_STATUS_INTERRUPTED)
        ballast.unlink()
        h.gateway.first_token_delay_s = 0
        h.gateway.script = [answer("done")]
        events = await h.run(harness_pb2.RunRequest(resume=harness_pb2.ResumeSession(session_id="c1")))
        assert kinds(events)[-1] == "completed", of(events, "failed")
        assert texts((await h.session("c1")).items) == [task, "done"]
