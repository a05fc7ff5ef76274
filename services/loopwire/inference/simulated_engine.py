"""The simulated engine: the real scheduler and KV block manager, with the forward pass
replaced by the roofline cost of the step (``cost_model.py``).

Time is a ``VirtualClock`` advanced by each step's modelled duration. With a time scale of
0 the engine never sleeps (hundreds of sessions on several replicas replay in seconds);
with a positive scale the async runner sleeps ``duration * scale`` per step (1 = real time).
Tokens come from the replay oracle when there is one, else from a deterministic
pseudo-random stream (never a special token), so runs are reproducible.
"""

from __future__ import annotations

import numpy as np

from loopwire.common.model_def import ModelDefinition
from loopwire.inference.clock import VirtualClock
from loopwire.inference.config import EngineConfig
from loopwire.inference.cost_model import CostModel
from loopwire.inference.engine_core import EngineCore
from loopwire.inference.kv_store import KvStore
from loopwire.inference.scheduler import ScheduledSeq
from loopwire.inference.sequence import Sequence


class CostModelExecutor:
    kv_store: KvStore | None = None  # modelled, not stored

    def __init__(self, cost: CostModel, clock: VirtualClock, definition: ModelDefinition) -> None:
        self.cost = cost
        self.clock = clock
        self.last_step_seconds = 0.0
        self.busy_seconds = 0.0
        self.transfer_seconds = 0.0  # host-tier copies, included in the step times
        self._pending_transfer = 0.0
        self.link_free_at = 0.0  # the host link is busy with a hint's copies until then
        self.block_size = 16
        self._plain_lo, self._plain_hi = plain_id_range(definition)

    def execute(self, batch: list[ScheduledSeq]) -> list[np.ndarray | None]:
        seconds = self.cost.step_seconds([(item.start, len(item.token_ids)) for item in batch]) + self._pending_transfer
        self._pending_transfer = 0.0
        seconds += max(0.0, self.link_free_at - self.clock.now())  # a hint's copies still under way
        self.clock.advance(seconds)
        self.last_step_seconds = seconds
        self.busy_seconds += seconds
        return [None] * len(batch)

    def transfer(self, onloaded_blocks: int, offloaded_blocks: int) -> None:
        """Host-tier copies made while planning the next step: priced into it."""
        seconds = self.cost.host_transfer_seconds(onloaded_blocks + offloaded_blocks, self.block_size)
        self._pending_transfer += seconds
        self.transfer_seconds += seconds

    @property
    def seconds_per_host_block(self) -> float:
        return self.cost.host_transfer_seconds(1, self.block_size)

    def prefetch(self, blocks: int) -> None:
        """Copies a KV hint started while the engine waited: they occupy the host link from now
        on, and a step that starts before they are done waits for them."""
        seconds = self.cost.host_transfer_seconds(blocks, self.block_size)
        self.link_free_at = max(self.link_free_at, self.clock.now()) + seconds
        self.transfer_seconds += seconds

    def synthetic_token(self, seq: Sequence, position: int) -> int:
        span = self._plain_hi - self._plain_lo
        return self._plain_lo + hash((seq.req.sampling.seed, seq.prompt_len, position)) % span


def plain_id_range(definition: ModelDefinition) -> tuple[int, int]:
    """The longest run of ids with no special or added token in it: synthetic output stays decodable text."""
    bounds = sorted({-1, definition.vocab_size, *definition.tokenizer.added_tokens.values()})
    lo, hi = max(zip(bounds, bounds[1:], strict=False), key=lambda b: b[1] - b[0])
    return lo + 1, hi


def simulated_core(config: EngineConfig, cost: CostModel,
                   definition: ModelDefinition) -> tuple[EngineCore, CostModelExecutor]:
    clock = VirtualClock()
    executor = CostModelExecutor(cost, clock, definition)
    executor.block_size = config.block_size
    return EngineCore(config, executor, clock), executor
