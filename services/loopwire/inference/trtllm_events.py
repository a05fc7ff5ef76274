"""TensorRT-LLM's KV cache events, re-keyed with loopwire's salted block hashes.

Routers and pause hints read a tenant's chain from its salted root
(``hashing.salted_root``), but a stored event says only a block's TensorRT-LLM hash, its tokens
and its parent's TensorRT-LLM hash (none for a prompt's first block): not which salt the
request ran under. So the salts that recently submitted each first block's tokens are
remembered (``FirstBlockSalts``), a stored first block takes one hash per such salt, and a
child follows each of its parent's. Tenants sharing a first block (the same instructions) each
get a chain of every block stored under it: over-reporting, harmless since a warm-up runs under
the hinting tenant's own salt (it never reads another tenant's KV: at worst it computes instead
of onloading). A tenant that never submitted the tokens gets no hash, so its hints find nothing.
Pure bookkeeping: nothing here imports TensorRT-LLM.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from loopwire.common.hashing import block_hash, salted_root, token_bytes
from loopwire.inference.kv_cache import CacheEvent, CacheEventKind
from loopwire.inference.trtllm_kv_hints import TrtPauseHints

# A first block's stored event follows its request's submission closely, so these only need to
# cover the requests in flight: distinct first blocks remembered, and salts per first block.
MAX_FIRST_BLOCKS = 4096
MAX_SALTS_PER_BLOCK = 16


class FirstBlockSalts:
    """First block's tokens of recently submitted requests -> the salts that submitted them,
    the least recently submitted forgotten first (at most ``MAX_FIRST_BLOCKS`` x
    ``MAX_SALTS_PER_BLOCK`` entries). The empty salt is one like any other (the unsalted root)."""

    def __init__(self) -> None:
        self._salts: OrderedDict[bytes, OrderedDict[str, None]] = OrderedDict()

    def submitted(self, first_block: Sequence[int], salt: str) -> None:
        key = token_bytes(first_block)
        salts = self._salts.pop(key, None) or OrderedDict()
        salts.pop(salt, None)
        salts[salt] = None
        if len(salts) > MAX_SALTS_PER_BLOCK:
            salts.popitem(last=False)
        self._salts[key] = salts
        if len(self._salts) > MAX_FIRST_BLOCKS:
            self._salts.popitem(last=False)

    def roots(self, first_block: Sequence[int]) -> list[int]:
        """The salted roots of those that submitted these tokens as a first block."""
        return [salted_root(s) for s in self._salts.get(token_bytes(first_block), ())]


class TrtEventKeys:
    """TensorRT-LLM block hash -> our hashes of it (one per salt), kept in step with the pause
    hints' ``StoredBlocks``; at most its capacity of TensorRT-LLM blocks, the least recently
    stored forgotten first should a removed event have been lost. Each of our hashes counts the
    TensorRT-LLM blocks that map to it: it is published stored with its first and removed with
    its last."""

    def __init__(self, hints: TrtPauseHints) -> None:
        self.salts = FirstBlockSalts()
        self._hints = hints
        self._ours: OrderedDict[int, list[int]] = OrderedDict()
        self._owners: dict[int, int] = {}

    def cached(self) -> list[int]:
        """Our hashes of every block TensorRT-LLM reported cached."""
        return list(self._owners)

    def resize(self, capacity: int) -> None:
        """TensorRT-LLM holds this many blocks (device and host tier)."""
        self._hints.blocks.capacity = capacity
        self._hints.blocks.shrink()
        self._shrink()

    def _shrink(self) -> None:
        """Forget the least recently stored TensorRT-LLM blocks beyond the capacity."""
        while len(self._ours) > self._hints.blocks.capacity:
            self._forget(next(iter(self._ours)))

    def translate(self, raw: list[dict]) -> list[CacheEvent]:
        """TensorRT-LLM event dicts -> events keyed by loopwire's chained block hashes."""
        out: list[CacheEvent] = []
        for event in raw:
            data = event.get("data", {})
            kind = data.get("type")
            if kind == "stored":
                stored = self._stored(data.get("parent_hash"), data.get("blocks", []))
                if stored:
                    out.append(CacheEvent(CacheEventKind.STORED, stored))
            elif kind == "removed":
                gone = [h for trt in data.get("block_hashes", []) for h in self._forget(trt)]
                if gone:
                    out.append(CacheEvent(CacheEventKind.REMOVED, gone))
            elif kind == "updated":
                level = data.get("cache_level")
                if isinstance(level, dict):  # 0: the device, 1: the host tier
                    for h in self._ours.get(data.get("block_hash"), []):
                        self._hints.moved(h, bool(level.get("new_value") or 0))
        return out

    def _stored(self, parent_trt: int | None, blocks: list[dict[str, Any]]) -> list[int]:
        """Map a run of stored blocks; returns our hashes not cached before. A block whose
        parent is unknown here (or a first block no salt submitted) maps to nothing."""
        parents: list[int] | None = None if parent_trt is None else self._ours.get(parent_trt, [])
        new: list[int] = []
        for block in blocks:
            tokens = [int(t["token_id"]) if isinstance(t, dict) else int(t) for t in block.get("tokens", [])]
            if parents is None:
                parents = self.salts.roots(tokens)
            trt = block["block_hash"]
            known = self._ours.get(trt)
            if known is not None:  # stored again: its hashes stand
                self._ours.move_to_end(trt)
                parents = known
                continue
            ours = [block_hash(parent, tokens) for parent in parents]
            if not ours:
                continue
            on_host = bool(block.get("cache_level") or 0)
            for h, parent in zip(ours, parents, strict=True):
                self._hints.blocks.stored(h, parent, tokens, on_host)
                owners = self._owners.get(h, 0)
                self._owners[h] = owners + 1
                if not owners:
                    new.append(h)
            self._ours[trt] = ours
            parents = ours
        self._shrink()
        return new

    def _forget(self, trt: int) -> list[int]:
        """Drop a TensorRT-LLM block; returns our hashes no block maps to any more."""
        gone = []
        for h in self._ours.pop(trt, ()):
            left = self._owners.pop(h) - 1
            if left:
                self._owners[h] = left
            else:
                gone.append(h)
                self._hints.blocks.removed(h)
        return gone
