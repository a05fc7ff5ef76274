"""The reference engine's KV tensors, addressed by the block ids the block pool hands out."""

from __future__ import annotations

import numpy as np


class KvStore:
    """The reference engine's KV tensors: per layer, keys and values of every block.

    Values per layer: ``[kv_heads, num_blocks, block_size, head_dim]``; keys
    ``[kv_heads, num_blocks, head_dim, block_size]``, each block transposed, so attention scores
    eight of a block's keys side by side (``attention_kernel.attend``). float32: keys and values are the float32
    outputs of the projections, so a wider store would hold no more; attention widens them to
    float64 as it reads (see ``model.py``). Blocks leave and enter (host tier, transfer) in the
    ``[.., block_size, head_dim]`` orientation of both.
    """

    dtype = np.float32

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int) -> None:
        self.keys = [np.zeros((kv_heads, num_blocks, head_dim, block_size), self.dtype) for _ in range(num_layers)]
        self.values = [np.zeros((kv_heads, num_blocks, block_size, head_dim), self.dtype) for _ in range(num_layers)]
        self.block_size = block_size
        self.block_shape = (num_layers, kv_heads, block_size, head_dim)

    def read_block(self, block_id: int) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.stack([k[:, block_id].swapaxes(-1, -2) for k in self.keys]),
            np.stack([v[:, block_id] for v in self.values]),
        )

    def copy_block(self, source: int, target: int) -> None:
        for k, v in zip(self.keys, self.values, strict=True):
            k[:, target] = k[:, source]
            v[:, target] = v[:, source]

    def write_block(self, block_id: int, keys: np.ndarray, values: np.ndarray) -> None:
        for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
            self.keys[layer][:, block_id] = k.swapaxes(-1, -2)
            self.values[layer][:, block_id] = v
