"""The gateway's fair work pool: bounded workers, a per-tenant share, round-robin turns."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.work_pool import WORKER_NICE, FairWorkPool


class Tally:
    """Counts the jobs running at once, overall and per tenant (from the worker threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.most_total = 0

    def job(self, tenant: str, gate: threading.Event, value: int):
        def run() -> int:
            with self.lock:
                self.now[tenant] = self.now.get(tenant, 0) + 1
                self.most[tenant] = max(self.most.get(tenant, 0), self.now[tenant])
                self.most_total = max(self.most_total, sum(self.now.values()))
            gate.wait(10)
            with self.lock:
                self.now[tenant] -= 1
            return value
        return run


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 4), share=st.integers(1, 4),
       jobs=st.lists(st.sampled_from("abc"), min_size=1, max_size=24))
def test_no_tenant_holds_more_than_its_share_and_every_job_answers(workers: int, share: int, jobs: list[str]) -> None:
    share = min(share, workers)

    async def main() -> None:
        pool = FairWorkPool(workers, share, inline_bytes=0)
        tally, gate = Tally(), threading.Event()
        tasks = [asyncio.create_task(pool.run(t, 1, tally.job(t, gate, i))) for i, t in enumerate(jobs)]
        await asyncio.sleep(0)
        # Let the jobs through in small waves, so every job meets the others that are queued.
        while not all(task.done() for task in tasks):
            gate.set()
            await asyncio.sleep(0.001)
            gate.clear()
        assert [task.result() for task in tasks] == list(range(len(jobs)))
        assert max(tally.most.values()) <= share
        assert tally.most_total <= workers
        pool.shutdown()

    asyncio.run(main())


async def test_another_tenant_is_served_while_one_tenant_fills_its_share() -> None:
    pool = FairWorkPool(workers=2, tenant_share=1, inline_bytes=0)
    tally, blocked = Tally(), threading.Event()
    heavy = [asyncio.create_task(pool.run("a", 1, tally.job("a", blocked, i))) for i in range(6)]
    light = await asyncio.wait_for(pool.run("b", 1, lambda: "b served"), 10)
    assert light == "b served"
    assert not any(t.done() for t in heavy)  # all of a's jobs are still held up
    assert pool.running("a") == 1 and pool.waiting("a") == 5
    blocked.set()
    assert await asyncio.gather(*heavy) == list(range(6))
    pool.shutdown()


async def test_turns_go_round_robin_across_tenants() -> None:
    pool = FairWorkPool(workers=1, tenant_share=1, inline_bytes=0)
    order: list[str] = []
    first = threading.Event()
    running = asyncio.create_task(pool.run("a", 1, lambda: first.wait(10)))
    jobs = [asyncio.create_task(pool.run(t, 1, lambda name=f"{t}{i}": order.append(name)))
            for t, i in [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 1), ("b", 2)]]
    await asyncio.sleep(0)
    first.set()
    await asyncio.gather(running, *jobs)
    assert order == ["a1", "b1", "c1", "a2", "b2", "a3"]
    pool.shutdown()


async def test_a_job_cancelled_while_waiting_never_runs_and_errors_reach_the_caller() -> None:
    pool = FairWorkPool(workers=1, tenant_share=1, inline_bytes=0)
    gate, ran = threading.Event(), []
    running = asyncio.create_task(pool.run("a", 1, lambda: gate.wait(10)))
    waiting = asyncio.create_task(pool.run("a", 1, lambda: ran.append("ran")))
    await asyncio.sleep(0)
    waiting.cancel()
    gate.set()
    await running
    with pytest.raises(asyncio.CancelledError):
        await waiting

    def boom() -> None:
        raise ValueError("bad schema")

    with pytest.raises(ValueError, match="bad schema"):
        await pool.run("a", 1, boom)
    assert ran == [] and pool.running("a") == 0
    pool.shutdown()


async def test_small_work_runs_inline_large_work_on_a_worker() -> None:
    pool = FairWorkPool(workers=1, tenant_share=1, inline_bytes=100)
    loop_thread = threading.get_ident()
    assert await pool.run("a", 99, threading.get_ident) == loop_thread
    assert await pool.run("a", 100, threading.get_ident) != loop_thread
    pool.shutdown()


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        FairWorkPool(workers=2, tenant_share=3)
    with pytest.raises(ValueError):
        FairWorkPool(workers=0, tenant_share=0)


async def test_workers_run_nicer_than_the_event_loop() -> None:
    pool = FairWorkPool(workers=1, tenant_share=1, inline_bytes=0)
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    worker_nice = await pool.run("a", 1, lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    assert worker_nice == min(19, loop_nice + WORKER_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == loop_nice  # the loop's own is untouched
    pool.shutdown()
