"""Attention over the paged KV cache as a numba kernel, built like the linear kernels
(``kernels.py``) for batch invariance: explicit ``<8 x double>`` vectors (``_mac``, LLVM IR through
a numba intrinsic), each lane the scalar sequence of operations in ``d`` (or key) order, so a
query's output never depends on the queries or sequences beside it."""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from loopwire.inference.kernel_ir import broadcast, jit, vector_at

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
        f64 = ir.DoubleType()
        v64, vb = ir.VectorType(f64, LANES), ir.VectorType(bel, LANES)
        zero = ir.Constant(v64, [0.0] * LANES)

        def row_vector(ary, start, v, ty):  # a pointer to vector v of a row that starts at element start
            return vector_at(builder, ary.data, builder.add(start, ir.Constant(intp, LANES * v)), ty)

        row = [builder.add(i_, ir.Constant(intp, h)) for h in range(nrows)]
        arow = [builder.add(builder.mul(r, awidth), at_) for r in row]
        orow = [builder.add(builder.mul(r, owidth), col_) for r in row]
        optr = [[row_vector(oa, o, v, v64) for v in range(nvec)] for o in orow]
        accs = [[cgutils.alloca_once(builder, v64) for _ in range(nvec)] for _ in range(nrows)]
        for h in range(nrows):
            for v in range(nvec):
                builder.store(builder.select(add_, builder.load(optr[h][v], align=8), zero), accs[h][v])
        with cgutils.for_range(builder, n_) as loop:
            t = loop.index
            bt = builder.add(builder.mul(t, bwidth), c_)
            bs = []
            for v in range(nvec):
                x = builder.load(row_vector(ba, bt, v, vb), align=4)
                bs.append(x if bel == f64 else builder.fpext(x, v64))
            for h in range(nrows):
                s = builder.load(builder.gep(aa.data, [builder.add(arow[h], t)], inbounds=True))
                s = broadcast(builder, s, v64)  # a[i + h, at + t] in every lane
                for v in range(nvec):
                    acc = accs[h][v]
                    builder.store(builder.fadd(builder.load(acc), builder.fmul(s, bs[v])), acc)
        for h in range(nrows):
            for v in range(nvec):
                builder.store(builder.load(accs[h][v]), optr[h][v], align=8)
        return context.get_dummy_value()

    return sig, codegen


@jit
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


@jit
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


@jit
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


@jit
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
