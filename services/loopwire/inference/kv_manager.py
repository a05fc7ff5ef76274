"""Request-level KV bookkeeping: the only place that turns token counts into blocks.

The scheduler and the engine speak in sequences and tokens: which prefix of a prompt the cache
already holds (``computed_blocks``), room for a step's next tokens (``allocate_slots``), a fork's
blocks for a draft branch, which computed blocks enter the prefix cache (``commit``), and giving
it all back (``free``). This module maps those onto the block pool of ``kv_cache.BlockManager``
(blocks, reference counts, the prefix-hash index, eviction, holds, hints) and keeps each
sequence's ``KvAllocation`` up to date, so no other part does block arithmetic or writes a block
table: the forward pass only reads one (vLLM's ``KVCacheManager`` hides its block pool from the
scheduler the same way).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loopwire.inference.kv_cache import BlockManager
from loopwire.inference.sequence import KvAllocation, Sequence


@dataclass
class ForkSlots:
    """A draft branch's block table: the sequence's first ``shared`` (full) blocks, then fresh
    ones, and the copy ``(source, target)`` of the sequence's partial block into the first fresh
    one that the forward pass makes before the step (None: the branch starts on a block boundary)."""

    block_ids: list[int]
    shared: int
    copy: tuple[int, int] | None


class KvCacheManager:
    def __init__(self, pool: BlockManager) -> None:
        self.pool = pool
        self.block_size = pool.block_size

    def computed_blocks(self, seq: Sequence) -> int:
        """Take the cached prefix of a sequence that holds no blocks (its stream's parked blocks
        first): they become its first blocks. Returns the tokens whose K/V it now has."""
        if not seq.kv.block_ids:
            ids, hashes = self.pool.match(seq.prefix_hashes(self.block_size), seq.tokens, seq.req.park_key)
            seq.kv = KvAllocation(ids, hashes)
            seq.num_computed = len(ids) * self.block_size
        return seq.num_computed

    def allocate_slots(self, seq: Sequence, num_new_tokens: int) -> KvAllocation | None:
        """Blocks for the sequence's next ``num_new_tokens`` positions after its computed ones.
        Memory pressure beats a hint: parked streams and retention holds are given up (oldest
        first) before this fails. None, nothing allocated, when they do not fit."""
        kv = seq.kv
        need = -(-(seq.num_computed + num_new_tokens) // self.block_size) - len(kv.block_ids)
        if need <= 0:
            return kv
        while (got := self.pool.allocate(need)) is None:
            if not self.pool.drop_oldest_retention():
                return None
        kv.block_ids += got
        return kv

    def allocate_fork(self, seq: Sequence, start: int, num_draft: int) -> ForkSlots | None:
        """Blocks for a draft branch of ``num_draft`` tokens after the token at ``start`` (the
        sequence's last): it shares the sequence's full blocks before ``start`` and starts with a
        copy of its partial one. None when the pool has no free or evictable blocks for it (a
        fork never costs another sequence its blocks)."""
        shared, offset = divmod(start, self.block_size)
        got = self.pool.allocate((start + num_draft) // self.block_size - shared + 1)
        if got is None:
            return None
        ids = seq.kv.block_ids
        return ForkSlots(ids[:shared] + got, shared, (ids[shared], got[0]) if offset else None)

    def keep_branch(self, seq: Sequence, forks: list[ForkSlots], chosen: ForkSlots | None) -> None:
        """After verification: the chosen fork's blocks replace the sequence's from its partial
        block on (``chosen`` None: the sequence keeps its own); the other branches' go back."""
        for fork in forks:
            if fork is chosen:
                self.pool.release(seq.kv.block_ids[fork.shared :])
                seq.kv.block_ids = fork.block_ids
            else:
                self.pool.release(fork.block_ids[fork.shared :])

    def commit(self, seq: Sequence, now: float) -> None:
        """Enter the sequence's full, computed blocks into the prefix cache, and set the retention
        priorities its request asks for (on cache hits too)."""
        bs, kv = self.block_size, seq.kv
        while (len(kv.block_hashes) + 1) * bs <= seq.num_computed:
            i = len(kv.block_hashes)
            parent = kv.block_hashes[-1] if kv.block_hashes else seq.cache_root
            kv.block_hashes.append(self.pool.commit(kv.block_ids[i], parent, seq.tokens[i * bs : (i + 1) * bs]))
        policy = seq.req.retention
        if policy is None:
            return
        for i in range(kv.num_prioritized, len(kv.block_hashes)):
            got = policy.block_priority(i * bs, (i + 1) * bs, seq.prompt_len)
            if got is not None:
                priority, duration = got
                self.pool.set_priority(kv.block_ids[i], priority, math.inf if duration is None else now + duration)
        kv.num_prioritized = len(kv.block_hashes)

    def trim(self, seq: Sequence) -> None:
        """Give back the blocks past the sequence's tokens (reserved for drafts that were rejected)."""
        keep = -(-len(seq.tokens) // self.block_size)
        ids = seq.kv.block_ids
        if len(ids) > keep:
            self.pool.release(ids[keep:])
            del ids[keep:]

    def retain(self, seq: Sequence, key: str, until: float) -> None:
        """Hold the finished sequence's blocks under ``key`` until ``until``."""
        if seq.kv.block_ids:
            self.pool.retain(key, seq.kv.block_ids, until)

    def park(self, seq: Sequence, key: str) -> None:
        """Hand the finished sequence's committed blocks to its stream's next turn."""
        self.pool.park(key, seq.kv.block_ids, seq.kv.block_hashes)
        seq.kv.block_ids = []  # given away

    def free(self, seq: Sequence) -> None:
        """Release every block the sequence holds; it has computed nothing any more."""
        self.pool.release(seq.kv.block_ids)
        seq.kv = KvAllocation()
        seq.num_computed = 0

    def next_block(self, seq: Sequence) -> tuple[int, int] | None:
        """(index, hash) of the full prompt block a prefilling sequence computes next, when the
        prefix cache could serve it to another prompt."""
        bs = self.block_size
        i = len(seq.kv.block_hashes)
        if not self.pool.prefix_cache or seq.is_decoding or (i + 1) * bs > len(seq.tokens) - 1:
            return None
        return i, seq.prefix_hashes(bs)[i]

    def shares_computing(self, seq: Sequence, computing: set[tuple[int, int]]) -> bool:
        """Whether one of the blocks being computed (``next_block`` of others) is in ``seq``'s prefix."""
        if not computing:
            return False
        chain = seq.prefix_hashes(self.block_size)
        return any(i < len(chain) and chain[i] == h for i, h in computing)
