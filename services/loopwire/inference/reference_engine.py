"""The reference engine: the numpy Llama model behind the shared scheduler and KV cache."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from loopwire.inference.clock import WallClock
from loopwire.inference.config import EngineConfig
from loopwire.inference.engine_core import EngineCore
from loopwire.inference.kv_store import KvStore
from loopwire.inference.model import Chunk, LlamaModel
from loopwire.inference.scheduler import ScheduledSeq
from loopwire.inference.sequence import Sequence


class ModelExecutor:
    """Runs a step's chunks through ``LlamaModel`` in one forward pass."""

    def __init__(self, model: LlamaModel, config: EngineConfig) -> None:
        self.model = model
        self.store = model.new_kv_store(config.num_kv_blocks, config.block_size)
        self.kv_store: KvStore | None = self.store
        # Tiny matrices: BLAS threads cost more than they give, and the cores are shared.
        threadpool_limits(limits=1, user_api="blas")

    def execute(self, batch: list[ScheduledSeq]) -> list[np.ndarray | None]:
        for item in batch:
            if item.fork_copy is not None:  # a fork starts from the sequence's partial block
                self.store.copy_block(*item.fork_copy)
        chunks = [
            Chunk(
                token_ids=np.asarray(item.token_ids, dtype=np.int64),
                start=item.start,
                block_table=item.block_table,
                num_logits=1 + len(item.draft.token_ids) if item.sample else 0,
            )
            for item in batch
        ]
        logits = self.model.forward(chunks, self.store)
        return [lg if item.sample else None for item, lg in zip(batch, logits, strict=True)]

    def synthetic_token(self, seq: Sequence, position: int) -> int:
        raise RuntimeError("the reference engine always has logits")


def reference_core(config: EngineConfig, model: LlamaModel) -> EngineCore:
    return EngineCore(config, ModelExecutor(model, config), WallClock())
