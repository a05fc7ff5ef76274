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
reassociates nor contracts into FMAs). Attention is built the same way with explicit vectors
(``_mac``, LLVM IR through a numba intrinsic, since LLVM does not vectorize independent scalar
chains by itself): eight keys' scores, or eight outputs of the weighted sum over values, per
``<8 x double>`` instruction, each lane the scalar sequence of operations in ``d`` (or key) order.

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
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

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
    """Tiled (see ``tiled``): ``qs[tile, k // 2, j]``: weight ``(k, tile * TILE + j)``'s code in the
    low nibble for even ``k``, high for odd; ``d``, ``m``: ``[tile, k // 32, j]``."""
    n_out = out.shape[1]
    w = np.empty((STEP, TILE), np.float32)
    out[:] = 0
    for n0 in range(0, n_out, TILE):
        t, dt, mt, qt = min(TILE, n_out - n0), d[n0 // TILE], m[n0 // TILE], qs[n0 // TILE]
        for k in range(0, x.shape[1], STEP):
            db, mb = dt[k // QBLOCK], mt[k // QBLOCK]
            for i in range(STEP // 2):
                q = qt[k // 2 + i]
                lo, hi = w[2 * i], w[2 * i + 1]
                for j in range(t):
                    lo[j] = db[j] * np.float32(q[j] & 15) + mb[j]
                    hi[j] = db[j] * np.float32(q[j] >> 4) + mb[j]
            _accumulate(x, k, w, out, n0, t)


@_jit
def _matmul_q8_0(x: np.ndarray, d: np.ndarray, qs: np.ndarray, out: np.ndarray) -> None:
    """Tiled: ``qs[tile, k, j]`` int8 codes, ``d[tile, k // 32, j]`` scales."""
    n_out = out.shape[1]
    w = np.empty((STEP, TILE), np.float32)
    out[:] = 0
    for n0 in range(0, n_out, TILE):
        t, dt, qt = min(TILE, n_out - n0), d[n0 // TILE], qs[n0 // TILE]
        for k in range(0, x.shape[1], STEP):
            db = dt[k // QBLOCK]
            for i in range(STEP):
                q, wi = qt[k + i], w[i]
                for j in range(t):
                    wi[j] = np.float32(q[j]) * db[j]
            _accumulate(x, k, w, out, n0, t)


@_jit
def _matmul_f32(x: np.ndarray, wt: np.ndarray, out: np.ndarray) -> None:
    """Tiled ``wt[tile, k, j]`` float32; a ``k`` that is not a multiple of ``STEP`` ends one input at
    a time."""
    k_in, n_out = x.shape[1], out.shape[1]
    whole = k_in - k_in % STEP
    out[:] = 0
    for n0 in range(0, n_out, TILE):
        t, wtile = min(TILE, n_out - n0), wt[n0 // TILE]
        for k in range(0, whole, STEP):
            _accumulate(x, k, wtile[k : k + STEP], out, n0, t)
        for k in range(whole, k_in):
            row = wtile[k]
            for r in range(x.shape[0]):
                a, o = x[r, k], out[r, n0 : n0 + t]
                for j in range(t):
                    o[j] = o[j] + a * row[j]


def tiled(a: np.ndarray) -> np.ndarray:
    """``[rows, n]`` as ``[ceil(n / TILE), rows, TILE]`` (the last tile zero-padded): a tile's codes
    and scales lie in one contiguous run, so a pass over the weight streams memory in order
    instead of taking ``TILE``-wide pieces ``n`` apart (at batch 1 from DRAM, 1.1x to 1.8x faster).
    Only where bytes sit changes, never the arithmetic."""
    rows, n = a.shape
    tiles = -(-n // TILE)
    out = np.zeros((tiles, rows, TILE), a.dtype)
    for i in range(tiles):
        part = a[:, i * TILE : (i + 1) * TILE]
        out[i, :, : part.shape[1]] = part
    return out


# Queries of one sequence that share each key and value load (a verification step, a prefill chunk).
QUERIES = 16
# Lanes of the attention kernel's vectors: one <8 x double> (a zmm register, two ymm without AVX-512).
LANES = 8


@intrinsic(prefer_literal=True)
def _mac(typingctx, a, i, at, n, b, c, out, col, add, rows, vectors):
    """``out[i + h, col + 8 v + l] = (out[..] if add else 0) + sum_t a[i + h, at + t] b[t, c + 8 v + l]``
    over ``t < n`` in ``t`` order, for ``h < rows`` and ``v < vectors`` (literals), lanes ``l < 8``.

    Explicit vectors, because numba does not vectorize independent scalar chains and fast-math
    reassociation would break batch invariance: each (row, vector) pair is one ``<8 x double>``
    chain whose lane ``l`` computes ``((o + a_0 b_0) + a_1 b_1) + ...``, ``b`` widened exactly from
    float32, multiplied then added with no FMA contraction (no fast-math flags): the operations of
    the scalar loop, eight outputs per instruction. ``rows * vectors`` chains keep the adders
    busy, and a vector of ``b`` is loaded and widened once for all the rows."""
    if not (isinstance(rows, types.IntegerLiteral) and isinstance(vectors, types.IntegerLiteral)):
        return None
    if a.dtype != types.float64 or out.dtype != types.float64:
        return None
    if b.dtype not in (types.float32, types.float64):
        return None
    if not all(x.ndim == 2 and x.layout == "C" for x in (a, b, out)):
        return None
    nrows, nvec = rows.literal_value, vectors.literal_value
    sig = types.void(a, i, at, n, b, c, out, col, add, rows, vectors)

    def codegen(context, builder, signature, args):
        aa, ba, oa = (context.make_array(signature.args[k])(context, builder, args[k]) for k in (0, 4, 6))
        i_, at_, n_, c_, col_ = (context.cast(builder, args[k], signature.args[k], types.intp)
                                 for k in (1, 2, 3, 5, 7))
        add_ = context.cast(builder, args[8], signature.args[8], types.boolean)
        awidth, bwidth, owidth = (cgutils.unpack_tuple(builder, x.shape, 2)[1] for x in (aa, ba, oa))
        intp = context.get_value_type(types.intp)
        bel = context.get_value_type(signature.args[4].dtype)
        f64, i32 = ir.DoubleType(), ir.IntType(32)
        v64, vb = ir.VectorType(f64, LANES), ir.VectorType(bel, LANES)
        undef, splat = ir.Constant(v64, ir.Undefined), ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
        zero = ir.Constant(v64, [0.0] * LANES)

        def vector_at(ary, start, v, ty):  # a pointer to vector v of a row that starts at element start
            p = builder.gep(ary.data, [builder.add(start, ir.Constant(intp, LANES * v))], inbounds=True)
            return builder.bitcast(p, ty.as_pointer())

        row = [builder.add(i_, ir.Constant(intp, h)) for h in range(nrows)]
        arow = [builder.add(builder.mul(r, awidth), at_) for r in row]
        orow = [builder.add(builder.mul(r, owidth), col_) for r in row]
        optr = [[vector_at(oa, o, v, v64) for v in range(nvec)] for o in orow]
        accs = [[cgutils.alloca_once(builder, v64) for _ in range(nvec)] for _ in range(nrows)]
        for h in range(nrows):
            for v in range(nvec):
                builder.store(builder.select(add_, builder.load(optr[h][v], align=8), zero), accs[h][v])
        with cgutils.for_range(builder, n_) as loop:
            t = loop.index
            bt = builder.add(builder.mul(t, bwidth), c_)
            bs = []
            for v in range(nvec):
                x = builder.load(vector_at(ba, bt, v, vb), align=4)
                bs.append(x if bel == f64 else builder.fpext(x, v64))
            for h in range(nrows):
                s = builder.load(builder.gep(aa.data, [builder.add(arow[h], t)], inbounds=True))
                s = builder.insert_element(undef, s, ir.Constant(i32, 0))
                s = builder.shuffle_vector(s, undef, splat)  # a[i + h, at + t] in every lane
                for v in range(nvec):
                    acc = accs[h][v]
                    builder.store(builder.fadd(builder.load(acc), builder.fmul(s, bs[v])), acc)
        for h in range(nrows):
            for v in range(nvec):
                builder.store(builder.load(accs[h][v]), optr[h][v], align=8)
        return context.get_dummy_value()

    return sig, codegen


@_jit
def _mac_rows(a, i, end, at, n, b, c, out, col, add, vectors):
    """``_mac`` for rows ``i .. end - 1``, four at a time, then the rest; ``vectors`` 1 or 2."""
    while i < end:
        left = end - i
        if vectors == 2:
            if left >= 4:
                _mac(a, i, at, n, b, c, out, col, add, 4, 2)
            elif left == 3:
                _mac(a, i, at, n, b, c, out, col, add, 3, 2)
            elif left == 2:
                _mac(a, i, at, n, b, c, out, col, add, 2, 2)
            else:
                _mac(a, i, at, n, b, c, out, col, add, 1, 2)
        else:
            if left >= 4:
                _mac(a, i, at, n, b, c, out, col, add, 4, 1)
            elif left == 3:
                _mac(a, i, at, n, b, c, out, col, add, 3, 1)
            elif left == 2:
                _mac(a, i, at, n, b, c, out, col, add, 2, 1)
            else:
                _mac(a, i, at, n, b, c, out, col, add, 1, 1)
        i += min(left, 4)


@_jit
def _scores(qd: np.ndarray, m: int, start: int, keys: np.ndarray, table: np.ndarray, g: int,
            scores: np.ndarray) -> None:
    """``scores[r, h, j] = sum_d qd[r, h, d] * key_j[d]`` over kv head ``g``'s keys ``j`` up to
    query ``r``'s position ``start + r``, for the ``m`` queries, each sum in ``d`` order.

    A key block is read once for all the queries. Its keys are scored 16 or 8 at a time as vectors
    (``_mac``) for all the (query, head) rows that see the block, and one at a time past the
    last multiple of 8 (block sizes 4, 12): each score is the same sequence of operations either
    way, and which way a key takes depends only on its place in its block, never on the chunk."""
    rows, group, hd = qd.shape
    bs = keys.shape[3]
    qf = qd.reshape(rows * group, hd)  # row r * group + h: query r, head h
    sf = scores.reshape(rows * group, scores.shape[2])
    span = 2 * LANES if bs % (2 * LANES) == 0 else LANES
    whole = bs - bs % span
    for b in range(-(-(start + m) // bs)):
        kt = keys[g, table[b]]
        first = max(0, b * bs - start) * group  # the rows of the queries that see a key of this block
        for c in range(0, whole, span):
            _mac_rows(qf, first, m * group, 0, hd, kt, c, sf, b * bs + c, False, span // LANES)
        for c in range(whole, bs):
            for i in range(first, m * group):
                s = 0.0
                for d in range(hd):
                    s += qf[i, d] * kt[d, c]
                sf[i, b * bs + c] = s


@_jit
def _weigh(sf: np.ndarray, i: int, end: int, lo: int, n: int, vb: np.ndarray, of: np.ndarray) -> None:
    """``of[r, d] += sf[r, lo + t] * vb[t, d]`` for ``t < n`` in order, rows ``i .. end - 1``: 16 or
    8 outputs of ``d`` at a time as vectors (``_mac``), one at a time past the last multiple of 8."""
    hd = vb.shape[1]
    span = 2 * LANES if hd % (2 * LANES) == 0 else LANES
    whole = hd - hd % span
    for d0 in range(0, whole, span):
        _mac_rows(sf, i, end, lo, n, vb, d0, of, d0, True, span // LANES)
    for d in range(whole, hd):
        for r in range(i, end):
            o = of[r, d]
            for t in range(n):
                o += sf[r, lo + t] * vb[t, d]
            of[r, d] = o


@_jit
def attend(q: np.ndarray, keys: np.ndarray, values: np.ndarray, table: np.ndarray, start: int,
           out: np.ndarray) -> None:
    """Causal attention of a chunk's queries ``q [n, heads, hd]`` (float32, at positions ``start``
    on) over its sequence's cached keys (``[kv_heads, blocks, hd, block_size]``) and values
    (``[kv_heads, blocks, block_size, hd]``), float32, read through the block ``table``, into
    ``out [n, heads * hd]``, computing in float64. ``out`` is float32 in the model; a float64
    ``out`` keeps the unrounded results, where tests see any change in the order of operations
    (rounding to float32 hides nearly all of them).

    Like the linear kernels, batch invariant by construction: a query's scores, softmax and
    weighted sum run in a fixed order (each score in ``d`` order, the softmax and the sum in key
    order) whatever the chunk around it, so a cached prefix gives the bits of a recompute and
    verification rows the bits of decode rows. The heads sharing a kv head, and up to ``QUERIES``
    queries of the chunk, read each key and value once."""
    n, nh, hd = q.shape
    kvh, _, _, bs = keys.shape
    group = nh // kvh
    scale = 1.0 / math.sqrt(hd)
    rows = min(n, QUERIES)
    scores = np.empty((rows, group, -(-(start + n) // bs) * bs), np.float64)
    qd = np.empty((rows, group, hd), np.float64)
    o = np.empty((rows, group, hd), np.float64)
    total = np.empty((rows, group), np.float64)
    sf, of = scores.reshape(rows * group, scores.shape[2]), o.reshape(rows * group, hd)
    for q0 in range(0, n, QUERIES):
        m, first = min(QUERIES, n - q0), start + q0  # query r of this group is at position first + r
        for g in range(kvh):
            for r in range(m):
                for hh in range(group):
                    for d in range(hd):
                        qd[r, hh, d] = np.float64(q[q0 + r, g * group + hh, d]) * scale
            _scores(qd, m, first, keys, table, g, scores)
            for r in range(m):
                ctx = first + r + 1
                for hh in range(group):
                    sc, mx = scores[r, hh], -np.inf
                    for j in range(ctx):
                        mx = max(mx, sc[j])
                    t = 0.0
                    for j in range(ctx):
                        p = math.exp(sc[j] - mx)
                        sc[j] = p
                        t += p
                    total[r, hh] = t
            o[:m] = 0.0
            for b in range(-(-(first + m) // bs)):
                vb, lo = values[g, table[b]], b * bs
                r0 = max(0, lo - first)  # the first query that sees a key of this block
                full = max(r0, min(m, lo + bs - 1 - first))  # the first that sees all of it
                for r in range(r0, full):  # query r sees the block's keys up to its position
                    _weigh(sf, r * group, (r + 1) * group, lo, first + r + 1 - lo, vb, of)
                _weigh(sf, full * group, m * group, lo, bs, vb, of)
            for r in range(m):
                for hh in range(group):
                    h = g * group + hh
                    for d in range(hd):
                        out[q0 + r, h * hd + d] = o[r, hh, d] / total[r, hh]  # rounded to out's type


def compile_all() -> None:
    """Compile (or load from numba's cache) every kernel for the argument types the model passes,
    so the first request a server takes never waits for LLVM (tens of seconds on a loaded machine)."""
    f32 = np.float32
    x, out = np.zeros((1, QBLOCK), f32), np.zeros((1, 8), f32)
    d = np.zeros((1, 1, TILE), f32)
    _matmul_q4_1(x, d, d, np.zeros((1, QBLOCK // 2, TILE), np.uint8), out)
    _matmul_q8_0(x, d, np.zeros((1, QBLOCK, TILE), np.int8), out)
    _matmul_f32(x, np.zeros((1, QBLOCK, TILE), f32), out)
    kv = np.zeros((1, 1, 8, 8), f32)
    attend(np.zeros((1, 1, 8), f32), kv, kv, np.zeros(1, np.int64), 0, np.zeros((1, 8), f32))


class KernelLinear:
    """``x @ w`` for a ``[k, n_out]`` weight (the model's orientation), quantized or float32, held
    tiled for the kernels."""

    def __init__(self, weight: QuantizedWeight | np.ndarray) -> None:
        if isinstance(weight, np.ndarray):
            if weight.dtype != np.float32 or weight.ndim != 2:
                raise ValueError("a float32 kernel weight is a 2-D float32 [k, n_out] array")
            self.kind, self._tiles = "f32", [tiled(weight)]
        else:
            self.kind = weight.kind
            self._tiles = [tiled(a) for a in (weight.d, weight.m, weight.qs) if a is not None]
        self.k, self.n_out = weight.shape

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._tiles)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.k:  # the kernels do not check bounds
            raise ValueError(f"input of shape {x.shape} for a weight of {self.k} inputs")
        out = np.empty((x.shape[0], self.n_out), np.float32)
        if x.shape[0] == 0:
            return out
        t = self._tiles
        if self.kind == "f32":
            _matmul_f32(x, t[0], out)
        elif self.kind == "q4_1":
            _matmul_q4_1(x, t[0], t[1], t[2], out)
        else:
            _matmul_q8_0(x, t[0], t[1], out)
        return out
