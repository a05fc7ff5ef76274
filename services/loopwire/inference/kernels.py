"""Linear layers and attention as numba kernels: quantized weights multiplied without
dequantizing the matrix first, in an order of operations that is the same for every row.

Why not BLAS: batch invariance (a row's logits never depend on the rows beside it) is what makes
speculation lossless and a cached prefix equal to a recompute. OpenBLAS picks kernels by the row
count, so ``row_invariance`` pads a single row to two or multiplies in fixed blocks, and at batch
1 reads the whole float32 model (513 MB) per token. These kernels give invariance by construction:
output ``n`` of a row is ``((x[0] w[0,n] + x[1] w[1,n]) + x[2] w[2,n]) + ...``, accumulated in
``k`` order, with SIMD across outputs, never across ``k``. That sequence of IEEE operations is
fixed by ``k`` alone, so neither the batch, nor the row's position in it, nor how rows are grouped
to share a weight load changes a bit (numba emits no fast-math flags, so LLVM neither
reassociates nor contracts into FMAs).

Why quantized: a GGUF file's Q4_1 or Q8_0 codes are about 0.75 or 1.125 bytes per weight against
4 as float32, and batch-1 decode reads every weight once per token. Each weight is rebuilt with
exactly the float32 operations ``gguf.quants`` dequantizes with (``d * q + m``; ``q * d``), so the
quantized kernel gives the bits of the float32 kernel over the dequantized matrix (``numba-f32``),
which is what the tests compare against.

numba (LLVM through llvmlite; ``cache=True`` compiles once per machine into ``__pycache__``) was
chosen over hand-written C for a wheel on every platform and no compiler at install time.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from loopwire.inference.quantized import QBLOCK, QuantizedWeight

# Outputs per tile: a tile's dequantized weights and its slice of a row's outputs stay in L1.
TILE = 256
# Inputs per pass over a tile: each output is loaded and stored once per STEP inputs, not per input.
STEP = 8

_jit = numba.njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")


@_jit
def _accumulate(x: np.ndarray, k: int, w: np.ndarray, out: np.ndarray, n0: int, t: int) -> None:
    """``out[r, n0 + j] += x[r, k + i] * w[i, j]`` for ``i = 0 .. STEP-1`` in that order, every row."""
    for r in range(x.shape[0]):
        a0, a1, a2, a3 = x[r, k], x[r, k + 1], x[r, k + 2], x[r, k + 3]
        a4, a5, a6, a7 = x[r, k + 4], x[r, k + 5], x[r, k + 6], x[r, k + 7]
        o = out[r, n0 : n0 + t]
        w0, w1, w2, w3, w4, w5, w6, w7 = w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]
        for j in range(t):
            o[j] = (((((((o[j] + a0 * w0[j]) + a1 * w1[j]) + a2 * w2[j]) + a3 * w3[j])
                     + a4 * w4[j]) + a5 * w5[j]) + a6 * w6[j]) + a7 * w7[j]


@_jit
def _matmul_q4_1(x: np.ndarray, d: np.ndarray, m: np.ndarray, qs: np.ndarray, out: np.ndarray) -> None:
    """``qs[k // 2, n]``: weight ``(k, n)``'s code in the low nibble for even ``k``, high for odd;
    ``d``, ``m``: ``[k // 32, n]``."""
    n_out = d.shape[1]
    w = np.empty((STEP, TILE), np.float32)
    out[:] = 0
    for n0 in range(0, n_out, TILE):
        t = min(TILE, n_out - n0)
        for k in range(0, x.shape[1], STEP):
            b = k // QBLOCK
            db, mb = d[b, n0 : n0 + t], m[b, n0 : n0 + t]
            for i in range(STEP // 2):
                q = qs[k // 2 + i, n0 : n0 + t]
                lo, hi = w[2 * i], w[2 * i + 1]
                for j in range(t):
                    lo[j] = db[j] * np.float32(q[j] & 15) + mb[j]
                    hi[j] = db[j] * np.float32(q[j] >> 4) + mb[j]
            _accumulate(x, k, w, out, n0, t)


@_jit
def _matmul_q8_0(x: np.ndarray, d: np.ndarray, qs: np.ndarray, out: np.ndarray) -> None:
    """``qs[k, n]`` int8 codes, ``d[k // 32, n]`` scales."""
    n_out = d.shape[1]
    w = np.empty((STEP, TILE), np.float32)
    out[:] = 0
    for n0 in range(0, n_out, TILE):
        t = min(TILE, n_out - n0)
        for k in range(0, x.shape[1], STEP):
            db = d[k // QBLOCK, n0 : n0 + t]
            for i in range(STEP):
                q, wi = qs[k + i, n0 : n0 + t], w[i]
                for j in range(t):
                    wi[j] = np.float32(q[j]) * db[j]
            _accumulate(x, k, w, out, n0, t)


@_jit
def _matmul_f32(x: np.ndarray, wt: np.ndarray, out: np.ndarray) -> None:
    """``wt[k, n]`` float32; a ``k`` that is not a multiple of ``STEP`` ends one input at a time."""
    k_in, n_out = wt.shape
    whole = k_in - k_in % STEP
    w = np.empty((STEP, TILE), np.float32)
    out[:] = 0
    for n0 in range(0, n_out, TILE):
        t = min(TILE, n_out - n0)
        for k in range(0, whole, STEP):
            w[:, :t] = wt[k : k + STEP, n0 : n0 + t]
            _accumulate(x, k, w, out, n0, t)
        for k in range(whole, k_in):
            row = wt[k, n0 : n0 + t]
            for r in range(x.shape[0]):
                a, o = x[r, k], out[r, n0 : n0 + t]
                for j in range(t):
                    o[j] = o[j] + a * row[j]


@_jit
def attend(q: np.ndarray, keys: np.ndarray, values: np.ndarray, table: np.ndarray, start: int,
           out: np.ndarray) -> None:
    """Causal attention of a chunk's queries ``q [n, heads, hd]`` (float32, at positions ``start``
    on) over its sequence's cached keys and values (``[kv_heads, blocks, block_size, hd]``
    float64, read through the block ``table``) into ``out [n, heads * hd]``.

    Like the linear kernels, batch invariant by construction: a query's scores, softmax and
    weighted sum run in key order with fixed partial sums, whatever the chunk around it, so a
    cached prefix gives the bits of a recompute and verification rows the bits of decode rows.
    The heads sharing a kv head read each key once."""
    n, nh, hd = q.shape
    kvh, _, bs, _ = keys.shape
    group = nh // kvh
    scale = 1.0 / math.sqrt(hd)
    scores = np.empty((group, start + n), np.float64)
    qd = np.empty((group, hd), np.float64)
    o = np.empty((group, hd), np.float64)
    mx = np.empty(group, np.float64)
    total = np.empty(group, np.float64)
    for i in range(n):
        ctx = start + i + 1
        for g in range(kvh):
            for hh in range(group):
                for d in range(hd):
                    qd[hh, d] = np.float64(q[i, g * group + hh, d]) * scale
                mx[hh] = -np.inf
            for j in range(ctx):
                kv = keys[g, table[j // bs], j % bs]
                for hh in range(group):
                    qh = qd[hh]
                    l0 = l1 = l2 = l3 = 0.0
                    for d in range(0, hd, 4):
                        l0 += qh[d] * kv[d]
                        l1 += qh[d + 1] * kv[d + 1]
                        l2 += qh[d + 2] * kv[d + 2]
                        l3 += qh[d + 3] * kv[d + 3]
                    s = (l0 + l1) + (l2 + l3)
                    scores[hh, j] = s
                    if s > mx[hh]:
                        mx[hh] = s
            for hh in range(group):
                t = 0.0
                for j in range(ctx):
                    p = math.exp(scores[hh, j] - mx[hh])
                    scores[hh, j] = p
                    t += p
                total[hh] = t
            o[:] = 0.0
            for j in range(ctx):
                vv = values[g, table[j // bs], j % bs]
                for hh in range(group):
                    p = scores[hh, j]
                    oh = o[hh]
                    for d in range(hd):
                        oh[d] += p * vv[d]
            for hh in range(group):
                h = g * group + hh
                for d in range(hd):
                    out[i, h * hd + d] = np.float32(o[hh, d] / total[hh])


def compile_all() -> None:
    """Compile (or load from numba's cache) every kernel for the argument types the model passes,
    so the first request a server takes never waits for LLVM (tens of seconds on a loaded machine)."""
    f32 = np.float32
    x, out = np.zeros((1, QBLOCK), f32), np.zeros((1, 8), f32)
    d = np.zeros((1, 8), f32)
    _matmul_q4_1(x, d, d, np.zeros((QBLOCK // 2, 8), np.uint8), out)
    _matmul_q8_0(x, d, np.zeros((QBLOCK, 8), np.int8), out)
    _matmul_f32(x, np.zeros((QBLOCK, 8), f32), out)
    kv = np.zeros((1, 1, 4, 8), np.float64)
    attend(np.zeros((1, 1, 8), f32), kv, kv, np.zeros(1, np.int64), 0, np.zeros((1, 8), f32))


class KernelLinear:
    """``x @ w`` for a ``[k, n_out]`` weight (the model's orientation), quantized or float32."""

    def __init__(self, weight: QuantizedWeight | np.ndarray) -> None:
        if isinstance(weight, np.ndarray):
            if weight.dtype != np.float32 or weight.ndim != 2:
                raise ValueError("a float32 kernel weight is a 2-D float32 [k, n_out] array")
            weight = np.ascontiguousarray(weight)
        self.weight = weight
        self.k, self.n_out = weight.shape
        self.kind = weight.kind if isinstance(weight, QuantizedWeight) else "f32"

    @property
    def nbytes(self) -> int:
        return int(self.weight.nbytes)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.k:  # the kernels do not check bounds
            raise ValueError(f"input of shape {x.shape} for a weight of {self.k} inputs")
        out = np.empty((x.shape[0], self.n_out), np.float32)
        if x.shape[0] == 0:
            return out
        w = self.weight
        if isinstance(w, np.ndarray):
            _matmul_f32(x, w, out)
        elif w.m is not None:  # q4_1
            _matmul_q4_1(x, w.d, w.m, w.qs, out)
        else:
            _matmul_q8_0(x, w.d, w.qs, out)
        return out
