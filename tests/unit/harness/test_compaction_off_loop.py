"""The harness counts a session's tokens for compaction off the event loop that serves every
tenant's sessions, on a pool where one tenant holds at most its share of the workers.

Seen without timing anything: the thread each cl100k count runs on is recorded, and the pool's
share is shown with jobs the test holds until it lets them go.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from harness_testkit import answer, harness_env, kinds, until

from loopwire.common import masking
from loopwire.harness import compaction
from loopwire.v1 import common_pb2

BIG = 64 * 1024  # a text this long is counted off the loop


async def test_a_large_message_is_counted_on_a_thread_not_on_the_loop(tmp_path, monkeypatch):
    loop_thread = threading.get_ident()
    counted: list[tuple[bool, int]] = []  # (on the loop's thread, length) of each long text counted
    real = masking.count

    def spy(text: str) -> int:
        if len(text) >= BIG:
            counted.append((threading.get_ident() == loop_thread, len(text)))
        return real(text)

    monkeypatch.setattr(masking, "count", spy)
    task = "Please read this log and tell me what failed.\n" + "line of a build log, step ok\n" * 30_000
    async with harness_env(tmp_path, context_window=1_000_000) as h:
        h.gateway.script = [answer("done")]
        events = await h.start(task)
    assert kinds(events)[-1] == "completed"
    assert counted, "the task was never counted for compaction"
    assert not [n for on_loop, n in counted if on_loop], counted


def _run(tenant: str, size: int) -> SimpleNamespace:
    """What `counted` reads of a session: its log (for its size) and its tenant."""
    text = "x" * size
    item = common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER,
                                                      content=[common_pb2.ContentPart(text=text)]))
    return SimpleNamespace(items=[item], stored=SimpleNamespace(tenant=tenant, instructions=""))


async def test_one_tenant_holds_at_most_its_share_of_the_counting_workers():
    hog, other = _run("hog", 2 * BIG), _run("other", 2 * BIG)
    release = threading.Event()
    started: list[str] = []

    def held(name: str) -> str:
        started.append(name)
        release.wait(30)
        return name

    hogging = [asyncio.ensure_future(compaction.counted(hog, held, f"hog{i}"))
               for i in range(compaction.COUNT_WORKERS)]
    await until(lambda: len(started) == compaction.COUNT_TENANT_SHARE, "the hog's jobs to start")
    # The hog's other jobs wait for its share; another tenant's count runs on a free worker now.
    assert await compaction.counted(other, masking.count, "y" * (2 * BIG)) == real_count("y" * (2 * BIG))
    assert len(started) == compaction.COUNT_TENANT_SHARE
    release.set()
    assert sorted(await asyncio.gather(*hogging)) == [f"hog{i}" for i in range(compaction.COUNT_WORKERS)]


def real_count(text: str) -> int:
    return len(masking.encoding().encode(text, disallowed_special=()))
