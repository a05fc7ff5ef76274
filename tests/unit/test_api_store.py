"""The api's per-tenant response store: tenants never see each other's responses, every bound
(entries and bytes per tenant, entries and bytes in all, age) holds, deletions are remembered,
and a response in flight is reachable for cancel until it ends. Time is a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from loopwire.api.items import input_json
from loopwire.api.store import InFlight, ResponseStore, tenant_key
from loopwire.common.auth import Limits, Tenant


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def response(rid: str, text: str = "x", status: str = "completed") -> dict:
    return {"id": rid, "object": "response", "status": status, "output": [{"text": text}]}


def test_each_tenant_sees_only_its_own():
    store = ResponseStore()
    assert store.put("a", response("resp_1"), [{"id": "msg_1"}])
    assert store.get("a", "resp_1").input_items == [{"id": "msg_1"}]
    assert store.get("b", "resp_1") is None
    assert not store.delete("b", "resp_1") and store.get("a", "resp_1") is not None
    assert not store.deleted("b", "resp_1")


def test_per_tenant_entries_evict_the_tenants_oldest_only():
    store = ResponseStore(per_tenant=3)
    store.put("b", response("resp_b"), [])
    for n in range(5):
        store.put("a", response(f"resp_{n}"), [])
    assert [n for n in range(5) if store.get("a", f"resp_{n}")] == [2, 3, 4]
    assert store.get("b", "resp_b") is not None


def test_per_tenant_bytes_and_totals_bound_the_store():
    store = ResponseStore(per_tenant=100, bytes_per_tenant=1000, total=4, total_bytes=10**6)
    big = "y" * 400
    for n in range(3):
        store.put("a", response(f"resp_{n}", big), [])
    assert store.get("a", "resp_0") is None and store.get("a", "resp_2") is not None  # 3 x 400+ > 1000
    assert not store.put("a", response("resp_huge", "z" * 2000), [])  # alone over the budget: not kept
    for n in range(5):
        store.put(f"t{n}", response("resp_x"), [])
    assert len(store) == 4 and store.get("t0", "resp_x") is None and store.get("t4", "resp_x") is not None
    small = ResponseStore(total_bytes=300)
    small.put("a", response("resp_1", "q" * 100), [])
    small.put("b", response("resp_2", "q" * 100), [])
    assert small.get("a", "resp_1") is None and small.stored_bytes <= 300


def test_zero_keeps_nothing():
    store = ResponseStore(per_tenant=0)
    assert not store.put("a", response("resp_1"), []) and store.get("a", "resp_1") is None


def test_responses_and_deletions_expire():
    clock = Clock()
    store = ResponseStore(ttl_s=10, clock=clock)
    store.put("a", response("resp_1"), [])
    store.put("a", response("resp_2"), [])
    assert store.delete("a", "resp_2") and store.deleted("a", "resp_2")
    assert not store.delete("a", "resp_2")  # once
    clock.now = 9.0
    assert store.get("a", "resp_1") is not None
    clock.now = 10.0
    assert store.get("a", "resp_1") is None and len(store) == 0 and store.stored_bytes == 0
    assert not store.deleted("a", "resp_2")


def test_replacing_an_id_keeps_the_accounting():
    store = ResponseStore()
    store.put("a", response("resp_1", "one"), [])
    store.put("a", response("resp_1", "two"), [])
    assert len(store) == 1 and store.get("a", "resp_1").response["output"][0]["text"] == "two"
    assert store.stored_bytes == store.get("a", "resp_1").size


class Stream:
    def __init__(self) -> None:
        self.closed = False
        self.cancelled: list[str] = []

    async def cancel(self, response_id: str) -> None:
        self.cancelled.append(response_id)


async def test_in_flight_until_it_ends_then_stored_only_with_store():
    store = ResponseStore()
    flight = store.begin("a", "resp_1", InFlight(Stream(), lambda: response("resp_1", status="in_progress")))
    assert store.flight("a", "resp_1") is flight and store.flight("b", "resp_1") is None
    store.end("a", "resp_1", response("resp_1", status="cancelled"), [], store=True)
    await asyncio.wait_for(flight.ended.wait(), 1)
    assert flight.final["status"] == "cancelled" and store.flight("a", "resp_1") is None
    assert store.get("a", "resp_1").response["status"] == "cancelled"
    store.begin("a", "resp_2", InFlight(Stream(), dict))
    store.end("a", "resp_2", response("resp_2"), [], store=False)
    assert store.get("a", "resp_2") is None
    store.begin("a", "resp_3", InFlight(Stream(), dict))
    store.end("a", "resp_3", None, [], store=True)  # never finished: nothing to read back
    assert store.get("a", "resp_3") is None


def test_flights_of_closed_streams_are_not_reachable_and_are_dropped():
    store = ResponseStore()
    streams = [Stream() for _ in range(300)]
    for n, s in enumerate(streams):
        store.begin("a", f"resp_{n}", InFlight(s, dict))
    for s in streams:
        s.closed = True
    assert store.flight("a", "resp_0") is None
    store.begin("a", "resp_new", InFlight(Stream(), dict))
    assert len(store.in_flight) == 1


def test_tenant_key_without_a_tenants_file_separates_keys():
    assert tenant_key(None, "Bearer one") != tenant_key(None, "Bearer two")
    assert tenant_key(None, "Bearer one") == tenant_key(None, "Bearer one")
    named = Tenant("alpha", Limits())
    assert tenant_key(named, "Bearer one") == tenant_key(named, "Bearer two") == "t:alpha"
    assert tenant_key(None, "alpha") != "t:alpha"


@pytest.mark.parametrize(("value", "expected"), [
    ("hi", [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}],
             "status": "completed"}]),
    ([{"role": "assistant", "content": "ok", "phase": "commentary"}],
     [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}],
       "phase": "commentary", "status": "completed"}]),
    ([{"role": "assistant", "phase": None, "content": [{"type": "output_text", "text": "ok"}]}],
     [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok", "annotations": []}],
       "status": "completed"}]),
    ([{"type": "function_call_output", "call_id": "c", "output": "5", "id": "fco_mine", "status": "completed"}],
     [{"type": "function_call_output", "call_id": "c", "output": "5", "id": "fco_mine", "status": "completed"}]),
])
def test_input_json_is_the_specifications_items(value, expected):
    got = input_json(value)
    for item, want in zip(got, expected, strict=True):
        assert item["id"].startswith(("msg_", "fc_", "fco_"))
        assert {k: v for k, v in item.items() if k != "id" or "id" in want} == want
