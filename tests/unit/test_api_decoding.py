"""Request bodies are decoded and parsed off the event loop, at most ``per_tenant`` of a tenant's
at once (issue 36): a tenant over its bound waits its turn, in order, and never holds up another
tenant; a waiter that goes away (its client gone) gives up its place without leaking a slot."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading

import pytest
import zstandard
from starlette.requests import Request

from loopwire.api.body import INLINE_BYTES, Decoding, read_json
from loopwire.api.context import ClientWatch
from loopwire.api.errors import ApiError
from loopwire.api.gateway_client import OWNER

WAIT_S = 30  # a failsafe for a condition that should hold at once


def blocker(gate: threading.Event, started: list[str], name: str):
    def work() -> str:
        started.append(name)
        assert gate.wait(WAIT_S)
        return name
    return work


async def until(condition) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0)


async def test_a_tenant_over_its_bound_waits_while_another_tenant_runs():
    decoding = Decoding(per_tenant=1, tenants=2)  # two worker threads
    gate, started = threading.Event(), []
    first = asyncio.create_task(decoding.run("a", blocker(gate, started, "a1")))
    second = asyncio.create_task(decoding.run("a", blocker(gate, started, "a2")))
    await until(lambda: started == ["a1"])
    # Unbounded, a2 would take the second thread and block too, and b would never run.
    assert await asyncio.wait_for(decoding.run("b", lambda: "b"), WAIT_S) == "b"
    assert started == ["a1"]
    gate.set()
    assert [await first, await second] == ["a1", "a2"]
    decoding.shutdown()


async def test_a_tenant_is_served_in_order():
    decoding = Decoding(per_tenant=2, tenants=1)
    gate, started = threading.Event(), []
    tasks = [asyncio.create_task(decoding.run("a", blocker(gate, started, f"a{i}"))) for i in range(6)]
    await until(lambda: len(started) == 2)
    gate.set()
    assert [await t for t in tasks] == [f"a{i}" for i in range(6)]
    assert started[:2] in (["a0", "a1"], ["a1", "a0"]) and started[2:] == ["a2", "a3", "a4", "a5"]
    decoding.shutdown()


async def test_a_waiter_that_goes_away_leaks_no_slot():
    decoding = Decoding(per_tenant=1, tenants=2)
    gate, started = threading.Event(), []
    first = asyncio.create_task(decoding.run("a", blocker(gate, started, "a1")))
    await until(lambda: started == ["a1"])
    gone = asyncio.create_task(decoding.run("a", lambda: "never"))
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    gate.set()
    assert await first == "a1"
    assert await asyncio.wait_for(decoding.run("a", lambda: "next"), WAIT_S) == "next"
    # Handed a slot by a release, then cancelled before it woke: the slot is released again.
    await decoding._acquire("a")
    handed = asyncio.create_task(decoding._acquire("a"))
    await asyncio.sleep(0)
    decoding._release("a")
    handed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert decoding._tenants == {}  # nothing held, nothing kept
    decoding.shutdown()


def request(body: bytes, encoding: str = "", length: bool = True) -> Request:
    headers = [(b"content-encoding", encoding.encode())] if encoding else []
    if length:
        headers.append((b"content-length", str(len(body)).encode()))
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}
    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive)


BIG = json.dumps({"input": "x" * INLINE_BYTES}).encode()


@pytest.mark.parametrize(("body", "encoding", "length", "inline"), [
    (b'{"a": 1}', "", True, True),
    (b'{"a": 1}', "identity", True, True),
    (b'{"a": 1}', "", False, False),  # no declared length: read, then in a worker
    (BIG, "", True, False),
    (zstandard.ZstdCompressor().compress(BIG), "zstd", True, False),
    (gzip.compress(b'{"a": 1}'), "gzip", True, False),
])
async def test_large_or_compressed_bodies_are_parsed_in_a_worker_thread(body, encoding, length, inline):
    decoding = Decoding(per_tenant=1, tenants=1)
    threads = []

    def parse(value: dict) -> dict:
        threads.append(threading.current_thread())
        return value

    value = await read_json(request(body, encoding, length), 1 << 20, decoding, "a", parse)
    assert value in ({"a": 1}, json.loads(BIG))
    assert (threads == [threading.current_thread()]) is inline
    decoding.shutdown()


async def test_a_client_gone_while_its_body_waits_leaves_the_queue():
    decoding = Decoding(per_tenant=1, tenants=1)
    gate, started, parsed = threading.Event(), [], []
    first = asyncio.create_task(decoding.run("a", blocker(gate, started, "a1")))
    await until(lambda: started == ["a1"])
    watch = ClientWatch(request(b"").receive, "POST /v1/responses", lambda: "a")
    token = OWNER.set(watch)
    try:
        waiting = asyncio.create_task(read_json(request(gzip.compress(BIG), "gzip"), 1 << 20, decoding, "a",
                                                parsed.append))
    finally:
        OWNER.reset(token)
    await until(lambda: len(decoding._tenants["a"].waiting) == 1)
    watch.left()
    with pytest.raises(ApiError) as e:
        await asyncio.wait_for(waiting, WAIT_S)
    assert e.value.status == 499
    assert not decoding._tenants["a"].waiting
    gate.set()
    await first
    await until(lambda: decoding._tenants == {})
    assert parsed == []
    decoding.shutdown()
