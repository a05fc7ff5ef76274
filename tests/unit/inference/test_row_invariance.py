"""A row's product has the same bits alone and in any batch, with the strategy measured at load.

The reference is the row multiplied by itself (a batch of one) through the same strategy; the
batch varies in size, content and the row's position. With plain ``x @ w`` this fails on CPUs
whose BLAS picks kernels by the row count (it did on this project's CI machines)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.inference.row_invariance import BLOCK_CANDIDATES, choose_row_block, matmul

SHAPES = [(64, 192), (64, 64), (64, 256), (128, 64), (64, 1000), (576, 1536)]
RNG = np.random.default_rng(0)
WEIGHTS = {shape: RNG.standard_normal(shape, dtype=np.float32) for shape in SHAPES}
BLOCK = choose_row_block(list(WEIGHTS.values()))


def test_the_strategy_is_one_of_the_known_ones() -> None:
    assert BLOCK == 0 or BLOCK in BLOCK_CANDIDATES


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from(SHAPES), rows=st.integers(1, 70), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_row_gets_the_same_bits_alone_and_in_any_batch(shape, rows, seed, data) -> None:
    w = WEIGHTS[shape]
    x = np.random.default_rng(seed).standard_normal((rows, shape[0]), dtype=np.float32)
    position = data.draw(st.integers(0, rows - 1))
    batch = matmul(x, w, BLOCK)
    alone = matmul(x[position : position + 1], w, BLOCK)
    assert batch.shape == (rows, shape[1])
    assert np.array_equal(batch[position], alone[0])
    np.testing.assert_allclose(batch, x @ w, rtol=1e-4, atol=1e-3)


def test_blocks_give_the_plain_product() -> None:
    w = WEIGHTS[(64, 192)]
    x = RNG.standard_normal((13, 64), dtype=np.float32)
    for block in BLOCK_CANDIDATES:
        np.testing.assert_allclose(matmul(x, w, block), x @ w, rtol=1e-5, atol=1e-4)
