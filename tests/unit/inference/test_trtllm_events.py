"""The TensorRT-LLM engine's cache events are re-keyed to loopwire's block hashes (no GPU
needed: only the translation runs)."""

from __future__ import annotations

import json

from loopwire.common.hashing import block_hashes
from loopwire.common.model_def import dummy_definition
from loopwire.inference.config import EngineConfig
from loopwire.inference.kv_cache import CacheEventKind
from loopwire.inference.trtllm_engine import TrtLlmEngine


def test_stored_and_removed_events_use_router_hashes() -> None:
    engine = TrtLlmEngine(llm=None, config=EngineConfig(block_size=4), definition=dummy_definition())
    tokens = list(range(12))
    engine._events.salts.submitted(tokens[:4], "")  # an unsalted request: the root's chain
    raw = [
        {"event_id": 0, "data": {"type": "stored", "parent_hash": None, "blocks": [
            {"type": "stored_block", "block_hash": 901, "tokens": [{"token_id": t} for t in tokens[:4]]},
            {"type": "stored_block", "block_hash": 902, "tokens": [{"token_id": t} for t in tokens[4:8]]}]}},
        {"event_id": 1, "data": {"type": "stored", "parent_hash": 902, "blocks": [
            {"type": "stored_block", "block_hash": 903, "tokens": [{"token_id": t} for t in tokens[8:]]}]}},
        {"event_id": 2, "data": {"type": "removed", "block_hashes": [903, 777]}},
    ]
    events = engine.translate_events(raw)
    expected = block_hashes(tokens, 4)
    assert [(e.kind, e.block_hashes) for e in events] == [
        (CacheEventKind.STORED, expected[:2]),
        (CacheEventKind.STORED, expected[2:]),
        (CacheEventKind.REMOVED, expected[2:]),
    ]


def test_kv_block_counts_come_from_the_newest_iteration_stats() -> None:
    engine = TrtLlmEngine(llm=None, config=EngineConfig(block_size=4), definition=dummy_definition())
    assert engine.vocab_size == dummy_definition().vocab_size and "dummy" in engine.model_name
    old = {"kvCacheStats": {"usedNumBlocks": 1, "freeNumBlocks": 9, "maxNumBlocks": 10}}
    new = json.dumps({"kvCacheStats": {"usedNumBlocks": 3, "freeNumBlocks": 7, "maxNumBlocks": 10}})
    engine.read_iteration_stats([old, new, {"iter": 5}])
    s = engine.stats()
    assert (s.kv_blocks_used, s.kv_blocks_free, s.kv_blocks_total) == (3, 7, 10)
    engine.read_iteration_stats([{"iter": 6}])  # no kvCacheStats: the last known figures stay
    assert engine.stats().kv_blocks_used == 3
