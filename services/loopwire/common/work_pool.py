"""A request's heavy work off the event loop that serves every stream, shared fairly by tenants.

One gateway event loop relays every stream's tokens, so a request's heavy work (rendering and
tokenizing a long prompt, classifying its text, compiling its grammar, counting its tokens) runs
here instead, and so does the harness's cl100k counting for compaction (one harness loop runs
every tenant's sessions). In worker threads, because the costly calls release the GIL (measured,
DESIGN §5: HF tokenizers' batch encode, tiktoken and RE2 do; a thread holding the GIL in Python's
``re`` or HF's single ``encode`` delayed the loop's wake-ups by 8-184 ms at the median, these by
0.1 ms).

Fair, not first come: each tenant queues its own jobs, and a free worker takes the next job of
the next tenant in round-robin order that has fewer than ``tenant_share`` jobs running. So one
tenant's big prompts hold at most its share of the workers and never queue in front of another
tenant's work, as the inference scheduler shares prefill. Work smaller than ``inline_bytes`` runs
inline: it costs less than the hop to a thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[Callable[[], Any], "asyncio.Future[Any]"]


# Workers run this much nicer than the event loop's thread: when they and the loop both want a
# core, the loop (which relays every stream) runs first, and the heavy work takes what is left.
WORKER_NICE = 10


def _lower_priority(nice: int) -> None:
    """Raise this worker thread's nice value (Linux schedules threads one by one); where the
    system does not allow it, the worker runs at the process's priority."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + nice)


class FairWorkPool:
    """``workers`` threads; each tenant runs at most ``tenant_share`` jobs at a time."""

    def __init__(self, workers: int = 4, tenant_share: int = 2, inline_bytes: int = 16 * 1024,
                 name: str = "gateway-work", nice: int = WORKER_NICE) -> None:
        if workers < 1 or not 1 <= tenant_share <= workers:
            raise ValueError(f"need workers >= 1 and 1 <= tenant_share <= workers (got {workers}, {tenant_share})")
        self.workers = workers
        self.tenant_share = tenant_share
        self.inline_bytes = inline_bytes
        self._executor = concurrent.futures.ThreadPoolExecutor(
            workers, thread_name_prefix=name, initializer=_lower_priority, initargs=(nice,))
        self._waiting: OrderedDict[str, deque[_Job]] = OrderedDict()  # round-robin order of tenants
        self._running: dict[str, int] = {}
        self._free = workers

    async def run(self, tenant: str, size: int, fn: Callable[[], T]) -> T:
        """``fn()``'s result: inline when ``size`` (bytes of input) is small, else on a worker in the
        tenant's turn. Cancelled while waiting, the job never runs; while running, it finishes and
        its result is dropped (a thread cannot be stopped)."""
        if size < self.inline_bytes:
            return fn()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append((fn, future))
        self._dispatch()
        return await future

    def running(self, tenant: str) -> int:
        return self._running.get(tenant, 0)

    def waiting(self, tenant: str) -> int:
        return sum(1 for _, f in self._waiting.get(tenant, ()) if not f.done())

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _dispatch(self) -> None:
        while self._free > 0:
            job = self._next_job()
            if job is None:
                return
            tenant, (fn, future) = job
            self._free -= 1
            self._running[tenant] = self._running.get(tenant, 0) + 1
            done = self._executor.submit(fn)
            done.add_done_callback(functools.partial(self._wake, tenant, future))

    def _wake(self, tenant: str, future: asyncio.Future[Any], done: concurrent.futures.Future[Any]) -> None:
        """In the worker: hand the outcome to the event loop (gone when it closed first)."""
        with contextlib.suppress(RuntimeError):
            future.get_loop().call_soon_threadsafe(self._finished, tenant, done, future)

    def _next_job(self) -> tuple[str, _Job] | None:
        """The oldest live job of the first tenant in turn that is under its share; that tenant
        goes to the back of the turn."""
        for tenant in list(self._waiting):
            queue = self._waiting[tenant]
            while queue and queue[0][1].done():  # cancelled while waiting: never runs
                queue.popleft()
            if not queue:
                del self._waiting[tenant]
                continue
            if self._running.get(tenant, 0) >= self.tenant_share:
                continue
            job = queue.popleft()
            if queue:
                self._waiting.move_to_end(tenant)
            else:
                del self._waiting[tenant]
            return tenant, job
        return None

    def _finished(self, tenant: str, done: concurrent.futures.Future[Any], future: asyncio.Future[Any]) -> None:
        self._free += 1
        left = self._running[tenant] - 1
        if left:
            self._running[tenant] = left
        else:
            del self._running[tenant]
        if done.cancelled():  # the pool shut down before the job ran
            future.cancel()
        elif not future.done():
            error = done.exception()
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(done.result())
        self._dispatch()
