"""How to multiply so that a row's bits never depend on the other rows in the product.

The reference model promises that a row gives the same logits alone, in any batch and in any
chunking of its prompt (speculation is lossless, a cached prefix equals a recompute). BLAS does
not promise that: OpenBLAS picks kernels by the row count (a small-matrix path, tail kernels,
a split over threads), so on some CPUs a row's rounding changes with the number of rows beside
it, and on others it does not. So the model measures it once per weight shape at load:

* ``0``: one product of any row count gives every row the bits it gets in a product of two
  (a single row is padded to two: BLAS's one-row path rounds differently everywhere);
* ``n > 0``: products run in blocks of exactly ``n`` rows (the last one zero-padded), the
  largest ``n`` for which a row's bits depend neither on its position in the block nor on the
  other rows — each block is then the same computation for every row, whatever the batch.
"""

from __future__ import annotations

from functools import cache

import numpy as np

# Block sizes tried, largest first, when one product of any row count is not row invariant.
BLOCK_CANDIDATES = (8, 4, 2)
# Row counts sampled for the whole-product check: tails of every small kernel width, and blocks.
_ROW_COUNTS = (2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 24, 31, 32, 33, 48, 64, 65, 100, 128, 129, 257)


def _rows(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    return rng.standard_normal((m, k), dtype=np.float32)


def whole_product_is_row_invariant(w: np.ndarray, rng: np.random.Generator) -> bool:
    """Every sampled row count gives rows 0 and m-1 the bits of the same rows in a product of two."""
    k = w.shape[0]
    x = _rows(rng, max(_ROW_COUNTS), k)
    first = (x[:2] @ w)[0]
    for m in _ROW_COUNTS:
        out = x[:m] @ w
        last = (x[m - 2 : m] @ w)[1]
        if not (np.array_equal(out[0], first) and np.array_equal(out[m - 1], last)):
            return False
    return True


def block_is_row_invariant(w: np.ndarray, rows: int, rng: np.random.Generator, trials: int = 2) -> bool:
    """A row gives the same bits at every position of a ``rows``-row product, among random rows."""
    k = w.shape[0]
    for _ in range(trials):
        v = _rows(rng, 1, k)[0]
        reference = None
        for position in range(rows):
            x = _rows(rng, rows, k)
            x[position] = v
            out = (x @ w)[position]
            if reference is None:
                reference = out
            elif not np.array_equal(out, reference):
                return False
    return True


def _probe_width(n: int) -> int:
    """Columns probed of an ``n``-column weight: all of a small one; of a wide one (the vocabulary)
    a prefix with the same remainder modulo 64, so the same column tail kernels run, at a fraction
    of the cost."""
    return n if n <= 4096 + 64 else 4096 + n % 64


@cache
def _choose(shapes: tuple[tuple[int, int], ...], threads: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    probes = [rng.standard_normal((k, _probe_width(n)), dtype=np.float32) for k, n in shapes]
    if all(whole_product_is_row_invariant(w, rng) for w in probes):
        return 0
    for rows in BLOCK_CANDIDATES:
        if all(block_is_row_invariant(w, rows, rng) for w in probes):
            return rows
    return BLOCK_CANDIDATES[-1]


def choose_row_block(weights: list[np.ndarray], seed: int = 0) -> int:
    """0 when whole products are row invariant for every weight shape, else the block size to use.

    Measured on random matrices of the weights' shapes under the BLAS's current thread count
    (OpenBLAS splits work by it), once per process for a given set of shapes."""
    from threadpoolctl import threadpool_info

    if any(w.dtype != np.float32 or w.ndim != 2 for w in weights):
        raise ValueError("row invariance is measured for 2-D float32 weights")
    threads = max((pool.get("num_threads", 1) for pool in threadpool_info() if pool.get("user_api") == "blas"),
                  default=1)
    return _choose(tuple(sorted({w.shape for w in weights})), threads, seed)


def matmul(x: np.ndarray, w: np.ndarray, block: int) -> np.ndarray:
    """``x @ w`` for 2-D ``x``, row invariant by the strategy ``choose_row_block`` picked."""
    m = x.shape[0]
    if block == 0:
        if m == 1:
            return (np.concatenate([x, x]) @ w)[:1]
        return x @ w
    padded = -(-m // block) * block
    if padded != m:
        x = np.concatenate([x, np.zeros((padded - m, x.shape[1]), x.dtype)])
    return (x.reshape(-1, block, x.shape[1]) @ w).reshape(padded, w.shape[1])[:m]
