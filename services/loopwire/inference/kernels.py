"""Linear layers and attention as numba kernels: quantized weights multiplied without
dequantizing the matrix first, in an order of operations that is the same for every row.

Why not BLAS: batch invariance (a row's logits never depend on the rows beside it) is what makes
speculation lossless and a cached prefix equal to a recompute. OpenBLAS picks kernels by the row
count, so ``row_invariance`` pads a single row to two or multiplies in fixed blocks, and at batch
1 reads the whole float32 model (513 MB) per token. These kernels give invariance by construction:
output ``n`` of a row is ``o = fma(x[k], w[k,n], o)`` from ``o = 0``, accumulated in ``k`` order,
with SIMD across outputs, never across ``k``. That sequence of IEEE operations is fixed by ``k``
alone, so neither the batch, nor the row's position in it, nor how rows are grouped to share a
weight load changes a bit. The FMAs are explicit (``_fma_block``: ``llvm.fma`` on ``<16 x float>``
through a numba intrinsic), since LLVM's own contraction of a multiply and an add could differ
between a block of four rows and a single row; blocks of four rows share each weight vector
loaded. Attention is built the same way with explicit vectors
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

_jit = numba.njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")


# Lanes of the linear kernels' vectors: one <16 x float> (a zmm register, two ymm without AVX-512).
FLANES = 16
# Vectors of outputs per row in one block of accumulators, and rows per block: ROWS * VECTORS
# chains hide the FMA latency, and a vector of weights is loaded once for ROWS rows.
VECTORS = 4
ROWS = 4


def _vector_at(builder: ir.IRBuilder, data: ir.Value, index: ir.Value, ty: ir.VectorType) -> ir.Value:
    """In generated IR: a pointer to the vector of type ``ty`` that starts at element ``index`` of ``data``."""
    return builder.bitcast(builder.gep(data, [index], inbounds=True), ty.as_pointer())


def _broadcast(builder: ir.IRBuilder, scalar: ir.Value, ty: ir.VectorType) -> ir.Value:
    """In generated IR: ``scalar`` in every lane of a vector of type ``ty``."""
    i32 = ir.IntType(32)
    undef = ir.Constant(ty, ir.Undefined)
    lanes = ir.Constant(ir.VectorType(i32, ty.count), [0] * ty.count)
    return builder.shuffle_vector(builder.insert_element(undef, scalar, ir.Constant(i32, 0)), undef, lanes)


# (Calls of an intrinsic omit its first parameter, numba's typing context: hence the ignores.)
@intrinsic(prefer_literal=True)
def _fma_block(typingctx, x, r, k0, kn, w, wk, c, acc, rows, vectors):
    """``acc[r + h, c + 16 v + l] = fma(x[r + h, k0 + t], w[wk + t, c + 16 v + l], acc[..])`` for
    ``t < kn`` in ``t`` order, ``h < rows`` and ``v < vectors`` (literals), lanes ``l < 16``.

    Explicit ``llvm.fma`` on ``<16 x float>``: LLVM contracts a multiply and an add into an FMA only
    where it chooses, which could differ between a block of rows and a single row. An explicit FMA
    is one rounding everywhere, so every lane is the same sequence ``o = fma(a_t, w_t, o)`` in
    ``t`` order whatever ``rows``, ``vectors`` or ``c`` are: a row's bits never depend on the rows
    it shares a weight load with."""
    if not (isinstance(rows, types.IntegerLiteral) and isinstance(vectors, types.IntegerLiteral)):
        return None
    if not all(a.ndim == 2 and a.layout == "C" and a.dtype == types.float32 for a in (x, w, acc)):
        return None
    nrows, nvec = rows.literal_value, vectors.literal_value
    sig = types.void(x, r, k0, kn, w, wk, c, acc, rows, vectors)

    def codegen(context, builder, signature, args):
        xa, wa, aa = (context.make_array(signature.args[i])(context, builder, args[i]) for i in (0, 4, 7))
        r_, k0_, kn_, wk_, c_ = (context.cast(builder, args[i], signature.args[i], types.intp)
                                 for i in (1, 2, 3, 5, 6))
        xwidth, wwidth, awidth = (cgutils.unpack_tuple(builder, a.shape, 2)[1] for a in (xa, wa, aa))
        intp, f32 = context.get_value_type(types.intp), ir.FloatType()
        vty = ir.VectorType(f32, FLANES)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vty, [vty] * 3),
                                             f"llvm.fma.v{FLANES}f32")

        def vector_at(ary, start, v):  # a pointer to vector v of a row that starts at element start
            return _vector_at(builder, ary.data, builder.add(start, ir.Constant(intp, FLANES * v)), vty)

        row = [builder.add(r_, ir.Constant(intp, h)) for h in range(nrows)]
        xrow = [builder.add(builder.mul(q, xwidth), k0_) for q in row]
        aptr = [[vector_at(aa, builder.add(builder.mul(q, awidth), c_), v) for v in range(nvec)] for q in row]
        accs = [[cgutils.alloca_once(builder, vty) for _ in range(nvec)] for _ in range(nrows)]
        for h in range(nrows):
            for v in range(nvec):
                builder.store(builder.load(aptr[h][v], align=4), accs[h][v])
        with cgutils.for_range(builder, kn_) as loop:
            t = loop.index
            wt = builder.add(builder.mul(builder.add(wk_, t), wwidth), c_)
            ws = [builder.load(vector_at(wa, wt, v), align=4) for v in range(nvec)]
            for h in range(nrows):
                s = builder.load(builder.gep(xa.data, [builder.add(xrow[h], t)], inbounds=True))
                s = _broadcast(builder, s, vty)  # x[r + h, k0 + t] in every lane
                for v in range(nvec):
                    acc = accs[h][v]
                    builder.store(builder.call(fma, [s, ws[v], builder.load(acc)]), acc)
        for h in range(nrows):
            for v in range(nvec):
                builder.store(builder.load(accs[h][v]), aptr[h][v], align=4)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _dequant_block(typingctx, qt, k, db, mb, w):
    """The weights of inputs ``k .. k + 31`` of a tile into ``w [QBLOCK, TILE]``: Q4_1 (``uint8``
    codes, ``qt[k // 2 + i]``, low nibble then high) as ``db * q + mb``, Q8_0 (``int8``,
    ``qt[k + i]``) as ``q * db``.

    The float32 multiply and add of ``gguf.quants`` (no FMA: nothing asks LLVM to contract), as
    explicit ``<16 x float>`` vectors, since LLVM vectorizes the scalar loop only eight wide."""
    if not (qt.ndim == 2 and w.ndim == 2 and db.ndim == 1 and mb.ndim == 1):
        return None
    if not all(a.layout == "C" for a in (qt, db, mb, w)):
        return None
    if qt.dtype not in (types.uint8, types.int8) or not all(a.dtype == types.float32 for a in (db, mb, w)):
        return None
    q4 = qt.dtype == types.uint8
    sig = types.void(qt, k, db, mb, w)

    def codegen(context, builder, signature, args):
        qa, da, ma, wa = (context.make_array(signature.args[i])(context, builder, args[i]) for i in (0, 2, 3, 4))
        k_ = context.cast(builder, args[1], signature.args[1], types.intp)
        intp, f32, i8 = context.get_value_type(types.intp), ir.FloatType(), ir.IntType(8)
        vty, bty = ir.VectorType(f32, FLANES), ir.VectorType(i8, FLANES)
        qwidth = cgutils.unpack_tuple(builder, qa.shape, 2)[1]
        wwidth = cgutils.unpack_tuple(builder, wa.shape, 2)[1]

        def const(v):
            return ir.Constant(intp, v)

        for v in range(TILE // FLANES):
            col = const(FLANES * v)
            dv = builder.load(_vector_at(builder, da.data, col, vty), align=4)
            mv = builder.load(_vector_at(builder, ma.data, col, vty), align=4) if q4 else None
            for i in range(QBLOCK // 2 if q4 else QBLOCK):
                qrow = builder.add(builder.lshr(k_, const(1)) if q4 else k_, const(i))
                q = builder.load(_vector_at(builder, qa.data, builder.add(builder.mul(qrow, qwidth), col), bty), align=1)
                if q4:
                    codes = (builder.and_(q, ir.Constant(bty, [15] * FLANES)),
                             builder.lshr(q, ir.Constant(bty, [4] * FLANES)))
                    vals = [builder.fadd(builder.fmul(dv, builder.uitofp(c, vty)), mv) for c in codes]
                    rows = (2 * i, 2 * i + 1)
                else:
                    vals, rows = [builder.fmul(builder.sitofp(q, vty), dv)], (i,)
                for r, val in zip(rows, vals, strict=True):
                    dst = builder.add(builder.mul(const(r), wwidth), col)
                    builder.store(val, _vector_at(builder, wa.data, dst, vty), align=4)
        return context.get_dummy_value()

    return sig, codegen


@_jit
def _accumulate(x: np.ndarray, k0: int, kn: int, w: np.ndarray, wk: int, acc: np.ndarray, t: int) -> None:
    """``acc[r, j] = fma(x[r, k0 + i], w[wk + i, j], acc[r, j])`` for ``i < kn`` in order, every row
    ``r`` and ``j < t`` (rounded up to a block of ``16 * VECTORS``; ``w`` and ``acc`` are ``TILE``
    wide): ``ROWS`` rows per block, then the rest; every path the same per-lane sequence."""
    rows, r = x.shape[0], 0
    while r < rows:
        left = rows - r
        for c in range(0, t, FLANES * VECTORS):
            if left >= ROWS:
                _fma_block(x, r, k0, kn, w, wk, c, acc, ROWS, VECTORS)  # type: ignore[call-arg]
            elif left == 3:
                _fma_block(x, r, k0, kn, w, wk, c, acc, 3, VECTORS)  # type: ignore[call-arg]
            elif left == 2:
                _fma_block(x, r, k0, kn, w, wk, c, acc, 2, VECTORS)  # type: ignore[call-arg]
            else:
                _fma_block(x, r, k0, kn, w, wk, c, acc, 1, VECTORS)  # type: ignore[call-arg]
        r += min(left, ROWS)


@_jit
def _matmul_q4_1(x: np.ndarray, d: np.ndarray, m: np.ndarray, qs: np.ndarray, out: np.ndarray) -> None:
    """Tiled (see ``tiled``): ``qs[tile, k // 2, j]``: weight ``(k, tile * TILE + j)``'s code in the
    low nibble for even ``k``, high for odd; ``d``, ``m``: ``[tile, k // 32, j]``. Each block of 32
    inputs is dequantized into ``w`` (32 KB, L1) once for all the rows, which accumulate into
    ``acc`` (the last tile's padding columns are computed and dropped)."""
    n_out = out.shape[1]
    w = np.empty((QBLOCK, TILE), np.float32)
    acc = np.empty((x.shape[0], TILE), np.float32)
    for n0 in range(0, n_out, TILE):
        t, dt, mt, qt = min(TILE, n_out - n0), d[n0 // TILE], m[n0 // TILE], qs[n0 // TILE]
        acc[:] = 0
        for k in range(0, x.shape[1], QBLOCK):
            db, mb = dt[k // QBLOCK], mt[k // QBLOCK]
            _dequant_block(qt, k, db, mb, w)  # type: ignore[call-arg]
            _accumulate(x, k, QBLOCK, w, 0, acc, t)
        out[:, n0 : n0 + t] = acc[:, :t]


@_jit
def _matmul_q8_0(x: np.ndarray, d: np.ndarray, qs: np.ndarray, out: np.ndarray) -> None:
    """Tiled: ``qs[tile, k, j]`` int8 codes, ``d[tile, k // 32, j]`` scales; as ``_matmul_q4_1``."""
    n_out = out.shape[1]
    w = np.empty((QBLOCK, TILE), np.float32)
    acc = np.empty((x.shape[0], TILE), np.float32)
    for n0 in range(0, n_out, TILE):
        t, dt, qt = min(TILE, n_out - n0), d[n0 // TILE], qs[n0 // TILE]
        acc[:] = 0
        for k in range(0, x.shape[1], QBLOCK):
            db = dt[k // QBLOCK]
            _dequant_block(qt, k, db, db, w)  # type: ignore[call-arg]
            _accumulate(x, k, QBLOCK, w, 0, acc, t)
        out[:, n0 : n0 + t] = acc[:, :t]


@_jit
def _matmul_f32(x: np.ndarray, wt: np.ndarray, out: np.ndarray) -> None:
    """Tiled ``wt[tile, k, j]`` float32, any ``k``; the same FMAs in the same order as the
    quantized kernels over their dequantized weights."""
    k_in, n_out = x.shape[1], out.shape[1]
    acc = np.empty((x.shape[0], TILE), np.float32)
    for n0 in range(0, n_out, TILE):
        t, wtile = min(TILE, n_out - n0), wt[n0 // TILE]
        acc[:] = 0
        for k in range(0, k_in, QBLOCK):
            _accumulate(x, k, min(QBLOCK, k_in - k), wtile, k, acc, t)
        out[:, n0 : n0 + t] = acc[:, :t]


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
        f64 = ir.DoubleType()
        v64, vb = ir.VectorType(f64, LANES), ir.VectorType(bel, LANES)
        zero = ir.Constant(v64, [0.0] * LANES)

        def vector_at(ary, start, v, ty):  # a pointer to vector v of a row that starts at element start
            return _vector_at(builder, ary.data, builder.add(start, ir.Constant(intp, LANES * v)), ty)

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
                s = _broadcast(builder, s, v64)  # a[i + h, at + t] in every lane
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
