"""Request bodies are decoded and parsed off the event loop, at most ``per_tenant`` of a tenant's
at once (issue 36): a tenant over its bound waits its turn, in order, and never holds up another
tenant; a waiter that goes away (its client gone) gives up its place without leaking a slot. A
compressed or large body is parsed in a worker process, and what comes back (the request, or its
refusal) is what parsing it here gives."""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import multiprocessing
import os
import threading

import pytest
import zstandard
from starlette.requests import Request

from loopwire.api.body import INLINE_BYTES, PROCESS_BYTES, SLICE_ITEMS, Decoding, read_json
from loopwire.api.chat import parse_chat
from loopwire.api.context import ClientWatch
from loopwire.api.create import ParsedCreate, parse_create
from loopwire.api.errors import ApiError
from loopwire.api.gateway_client import OWNER
from loopwire.api.input_tokens import _parse as input_tokens_parse

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
HUGE = json.dumps({"input": "x" * PROCESS_BYTES}).encode()


def where(value: dict) -> tuple[dict, int, str]:
    """A parse that says where it ran: (the body, its process, its thread)."""
    return value, os.getpid(), threading.current_thread().name


@pytest.mark.parametrize(("body", "encoding", "length", "worker"), [
    (b'{"a": 1}', "", True, "inline"),
    (b'{"a": 1}', "identity", True, "inline"),
    (b'{"a": 1}', "", False, "thread"),  # no declared length: read, then in a worker
    (BIG, "", True, "thread"),
    (HUGE, "", True, "process"),
    (zstandard.ZstdCompressor().compress(BIG), "zstd", True, "process"),
    (gzip.compress(b'{"a": 1}'), "gzip", True, "process"),  # small, but it may decompress to the limit
])
async def test_large_or_compressed_bodies_are_parsed_off_the_loop(body, encoding, length, worker):
    decoding = Decoding(per_tenant=1, tenants=1)
    value, pid, thread = await read_json(request(body, encoding, length), 2 << 20, decoding, "a", where)
    assert value in ({"a": 1}, json.loads(BIG), json.loads(HUGE))
    ran = "process" if pid != os.getpid() else "inline" if thread == threading.current_thread().name else "thread"
    assert ran == worker
    decoding.shutdown()


def responses_body(items: int, **fields) -> dict:
    return {"model": "loopwire", "instructions": "be brief", "metadata": {"k": "v"}, "tool_choice": "required",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "input": [{"type": "message", "id": f"msg_{i}", "role": "user", "content": f"m{i}"} if i % 3 else
                      {"type": "function_call_output", "id": f"fco_{i}", "call_id": f"c{i}", "output": "ok"} for i in range(items)],
            **fields}


async def parsed_both_ways(body: bytes, parse) -> tuple:
    """``parse`` of ``body`` inline and through a worker process (zstd), each result or ApiError."""
    outcomes = []
    decoding = Decoding(per_tenant=1, tenants=1)
    try:
        for data, encoding in ((body, ""), (zstandard.ZstdCompressor().compress(body), "zstd")):
            try:
                outcomes.append(await read_json(request(data, encoding), 64 << 20, decoding, "a", parse))
            except ApiError as e:
                outcomes.append(e)
    finally:
        decoding.shutdown()
    return tuple(outcomes)


@pytest.mark.parametrize("count", [0, 1, SLICE_ITEMS, 2 * SLICE_ITEMS + 7])
async def test_a_body_parsed_in_a_process_is_the_one_parsed_here(count):
    parse = functools.partial(parse_create, models=["loopwire"])
    here, there = await parsed_both_ways(json.dumps(responses_body(count)).encode(), parse)
    assert isinstance(there, ParsedCreate)
    assert there == here and len(there.create.input) == count  # every field, input items in order
    assert there.create.SerializeToString(deterministic=True) == here.create.SerializeToString(deterministic=True)
    chat = json.dumps({"model": "loopwire", "stream": True, "messages": [{"role": "user", "content": str(i)}
                                                                         for i in range(count + 1)]}).encode()
    here, there = await parsed_both_ways(chat, functools.partial(parse_chat, models=["loopwire"]))
    assert there == here


@pytest.mark.parametrize(("body", "parse"), [
    (responses_body(5, bench=True), functools.partial(parse_create, models=["loopwire"])),
    (responses_body(5, model="other"), functools.partial(parse_create, models=["loopwire"])),
    (responses_body(5, temperature=9), functools.partial(parse_create, models=["loopwire"])),
    ({**responses_body(3), "input": [{"role": "user", "content": 7}]}, functools.partial(parse_create, models=[])),
    ({"model": "loopwire", "messages": "no"}, functools.partial(parse_chat, models=[])),
    ({"model": "loopwire", "stream": True}, functools.partial(input_tokens_parse, models=[])),
])
async def test_a_body_refused_in_a_process_is_refused_as_here(body, parse):
    here, there = await parsed_both_ways(json.dumps(body).encode(), parse)
    assert isinstance(here, ApiError) and isinstance(there, ApiError)
    assert (there.status, there.body()) == (here.status, here.body())
    for data in (b'{"model": ', b'[1]', b'{"a": 1, "a": 2}'):  # invalid, not an object, duplicate key
        here, there = await parsed_both_ways(data, parse)
        assert (there.status, there.body()) == (here.status, here.body())


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


def test_started_workers_are_spawned_before_the_first_body():
    before = set(multiprocessing.active_children())
    decoding = Decoding(per_tenant=1, tenants=4, processes=2)
    decoding.start()
    assert len(set(multiprocessing.active_children()) - before) == 2  # the two, not one per body
    decoding.shutdown()
