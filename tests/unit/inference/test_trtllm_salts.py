"""Tenants on the TensorRT-LLM engine, on CPU with the stand-in ``LLM``: each request and each
warm-up runs under its tenant's cache salt, and stored blocks are re-keyed from the salted roots
of the tenants that submitted their first block, so a tenant's hints find its own blocks and
never another tenant's."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from test_trtllm_engine import Completion, FakeLLM, Result, engine, finish
from test_trtllm_kv_hints import BS, PAUSE, RESUME, TOKENS, moved, stored

from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hashes, salted_root
from loopwire.inference import trtllm_events
from loopwire.inference.engine import KvHint
from loopwire.inference.kv_cache import CacheEventKind
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.service import InferenceServicer
from loopwire.inference.trtllm_engine import TrtLlmEngine
from loopwire.v1 import common_pb2, inference_pb2

A, B = "tenant-a", "tenant-b"
A_HASHES = block_hashes(TOKENS, BS, salted_root(A))
B_HASHES = block_hashes(TOKENS, BS, salted_root(B))


class SaltedLLM(FakeLLM):
    """A release whose ``generate_async`` takes ``cache_salt``; each call records it."""

    def __init__(self, script: list[Completion]) -> None:
        super().__init__(script)
        self.submitted = asyncio.Event()

    def generate_async(self, inputs: dict, *, cache_salt: str | None = None, **kwargs: Any) -> Result:
        self.submitted.set()
        return super().generate_async(inputs, cache_salt=cache_salt, **kwargs)


def salts(llm: FakeLLM) -> list[str | None]:
    return [sent["cache_salt"] for _, sent in llm.calls]


async def ran(llm: FakeLLM, *tenants: str) -> TrtLlmEngine:
    """An engine that served TOKENS once for each tenant, in order."""
    e = engine(llm, block_size=BS)
    for i, tenant in enumerate(tenants):
        await finish(e, GenerationRequest(f"r{i}", TOKENS, 1, cache_salt=tenant))
    return e


async def test_each_tenant_s_request_runs_under_its_own_salt() -> None:
    llm = SaltedLLM([Completion([7], "stop")] * 3)
    await ran(llm, A, B, "")
    assert salts(llm) == [A, B, None]  # the same prompt, three caches; unsalted: none


async def test_a_release_without_cache_salt_gets_none_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    llm = FakeLLM([Completion([7], "stop"), Completion([7], "length")])
    with caplog.at_level(logging.WARNING, logger="loopwire.inference.trtllm"):
        e = await ran(llm, A)
    assert "cache_salt" not in llm.calls[0][1]
    assert [r.message for r in caplog.records if "tenants share" in r.message]
    e.translate_events([stored([901, 902, 903], TOKENS)])  # the events are still re-keyed per tenant
    assert await e.hint_prefix("s", A_HASHES, salted_root(A), RESUME, cache_salt=A) == 3
    assert len(llm.calls) == 2 and "cache_salt" not in llm.calls[1][1]
    await e.close()


async def test_stored_blocks_take_the_submitting_tenant_s_chain_and_its_hints_warm_up_under_its_salt() -> None:
    llm = SaltedLLM([Completion([7], "stop"), Completion([7], "length")])
    e = await ran(llm, A)
    events = e.translate_events([stored([901, 902], TOKENS[:8]), stored([903], TOKENS[8:], parent=902)])
    assert [(ev.kind, ev.block_hashes) for ev in events] == [
        (CacheEventKind.STORED, A_HASHES[:2]), (CacheEventKind.STORED, A_HASHES[2:])]
    assert await e.hint_prefix("s", A_HASHES, salted_root(A), PAUSE, cache_salt=A) == 3
    assert await e.hint_prefix("s", A_HASHES, salted_root(A), RESUME, cache_salt=A) == 3
    assert llm.calls[-1][0] == TOKENS + TOKENS[-1:] and salts(llm) == [A, A]
    # B never submitted these tokens: its salted hashes of them, and the unsalted ones, find nothing
    assert await e.hint_prefix("s", B_HASHES, salted_root(B), RESUME, cache_salt=B) == 0
    assert await e.hint_prefix("s", block_hashes(TOKENS, BS), ROOT_BLOCK_HASH, RESUME) == 0
    assert len(llm.calls) == 2
    await e.close()


async def test_a_pause_s_timed_warm_up_runs_under_the_pausing_tenant_s_salt() -> None:
    llm = SaltedLLM([Completion([7], "stop"), Completion([7], "length")])
    e = await ran(llm, A)
    llm.submitted.clear()
    e.translate_events([stored([901, 902, 903], TOKENS)])
    hint = KvHint(resume=False, seconds=600, expected_pause_s=0.01, priority=70)
    assert await e.hint_prefix("s", A_HASHES, salted_root(A), hint, cache_salt=A) == 3
    await asyncio.wait_for(llm.submitted.wait(), 30)
    assert llm.calls[-1][0] == TOKENS + TOKENS[-1:] and salts(llm) == [A, A]
    await e.close()


async def test_a_shared_first_block_maps_to_every_submitting_tenant_until_no_block_holds_it() -> None:
    llm = SaltedLLM([Completion([7], "stop")] * 2)
    e = await ran(llm, A, B)
    # TensorRT-LLM keeps one chain per salt: 901-903 and 911-913 hold the same tokens
    first = e.translate_events([stored([901, 902, 903], TOKENS)])
    assert first[0].block_hashes == [h for pair in zip(A_HASHES, B_HASHES, strict=True) for h in pair]
    assert e.translate_events([stored([911, 912, 913], TOKENS)]) == []  # nothing new to announce
    e.translate_events([moved(902, to_host=True)])
    assert [block.on_host for _, block in e._hints.blocks.chain(B_HASHES, salted_root(B))] == [False, True, False]
    assert e.translate_events([{"event_id": 1, "data": {"type": "removed", "block_hashes": [901, 902, 903]}}]) == []
    assert await e.hint_prefix("s", B_HASHES, salted_root(B), RESUME, cache_salt=B) == 3  # 911-913 still hold them
    [gone] = e.translate_events([{"event_id": 2, "data": {"type": "removed", "block_hashes": [911]}}])
    assert gone.kind is CacheEventKind.REMOVED and sorted(gone.block_hashes) == sorted([A_HASHES[0], B_HASHES[0]])
    assert await e.hint_prefix("s", A_HASHES, salted_root(A), RESUME, cache_salt=A) == 0
    assert await e.hint_prefix("s", B_HASHES, salted_root(B), RESUME, cache_salt=B) == 0
    await e.close()


async def test_a_hold_prefix_hint_reaches_the_engine_with_the_tenant_s_salt() -> None:
    llm = SaltedLLM([Completion([7], "stop"), Completion([7], "length")])
    e = await ran(llm, A)
    e.translate_events([stored([901, 902, 903], TOKENS)])
    resume = common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_RESUME)
    request = inference_pb2.HoldPrefixRequest(hold_id="s", cache_salt=A, block_hashes=A_HASHES, hint=resume)
    reply = await InferenceServicer(e).HoldPrefix(request, context=None)  # type: ignore[arg-type]
    assert reply.hinted_blocks == 3 and salts(llm) == [A, A]
    await e.close()


def test_a_child_of_an_unknown_parent_maps_to_nothing() -> None:
    e = engine(FakeLLM(), block_size=BS)
    e._events.salts.submitted(TOKENS[8:], "")  # as a first block: not what a child is
    assert e.translate_events([stored([903], TOKENS[8:], parent=902)]) == []
    assert e._events.cached() == []


def test_the_salt_registry_forgets_the_least_recently_submitted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trtllm_events, "MAX_FIRST_BLOCKS", 2)
    monkeypatch.setattr(trtllm_events, "MAX_SALTS_PER_BLOCK", 2)
    registry = trtllm_events.FirstBlockSalts()
    for salt in (A, B, "c", B):
        registry.submitted([1, 2], salt)
    assert registry.roots([1, 2]) == [salted_root("c"), salted_root(B)]  # A, least recent, forgotten
    registry.submitted([3, 4], A)
    registry.submitted([5, 6], A)
    assert registry.roots([1, 2]) == [] and registry.roots([5, 6]) == [salted_root(A)]
