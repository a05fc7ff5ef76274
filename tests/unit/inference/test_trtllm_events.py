"""The TensorRT-LLM engine's cache events are re-keyed to loopwire's block hashes (no GPU
needed: only the translation runs)."""

from __future__ import annotations

from loopwire.common.hashing import block_hashes
from loopwire.inference.config import EngineConfig
from loopwire.inference.kv_cache import CacheEventKind
from loopwire.inference.trtllm_engine import TrtLlmEngine


def test_stored_and_removed_events_use_router_hashes() -> None:
    engine = TrtLlmEngine(llm=None, config=EngineConfig(block_size=4), model_name="m")
    tokens = list(range(12))
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
