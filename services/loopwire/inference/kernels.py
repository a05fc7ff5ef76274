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
loaded. Attention (``attention_kernel.py``) is built the same way with explicit vectors
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

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from loopwire.inference.attention_kernel import attend
from loopwire.inference.kernel_ir import broadcast, jit, vector_at
from loopwire.inference.quantized import QBLOCK, QuantizedWeight

# Outputs per tile: a tile's dequantized weights and its slice of a row's outputs stay in L1.
TILE = 256



# Lanes of the linear kernels' vectors: one <16 x float> (a zmm register, two ymm without AVX-512).
FLANES = 16
# Vectors of outputs per row in one block of accumulators, and rows per block: ROWS * VECTORS
# chains hide the FMA latency, and a vector of weights is loaded once for ROWS rows.
VECTORS = 4
ROWS = 4


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

        def row_vector(ary, start, v):  # a pointer to vector v of a row that starts at element start
            return vector_at(builder, ary.data, builder.add(start, ir.Constant(intp, FLANES * v)), vty)

        row = [builder.add(r_, ir.Constant(intp, h)) for h in range(nrows)]
        xrow = [builder.add(builder.mul(q, xwidth), k0_) for q in row]
        aptr = [[row_vector(aa, builder.add(builder.mul(q, awidth), c_), v) for v in range(nvec)] for q in row]
        accs = [[cgutils.alloca_once(builder, vty) for _ in range(nvec)] for _ in range(nrows)]
        for h in range(nrows):
            for v in range(nvec):
                builder.store(builder.load(aptr[h][v], align=4), accs[h][v])
        with cgutils.for_range(builder, kn_) as loop:
            t = loop.index
            wt = builder.add(builder.mul(builder.add(wk_, t), wwidth), c_)
            ws = [builder.load(row_vector(wa, wt, v), align=4) for v in range(nvec)]
            for h in range(nrows):
                s = builder.load(builder.gep(xa.data, [builder.add(xrow[h], t)], inbounds=True))
                s = broadcast(builder, s, vty)  # x[r + h, k0 + t] in every lane
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
            dv = builder.load(vector_at(builder, da.data, col, vty), align=4)
            mv = builder.load(vector_at(builder, ma.data, col, vty), align=4) if q4 else None
            for i in range(QBLOCK // 2 if q4 else QBLOCK):
                qrow = builder.add(builder.lshr(k_, const(1)) if q4 else k_, const(i))
                q = builder.load(vector_at(builder, qa.data, builder.add(builder.mul(qrow, qwidth), col), bty), align=1)
                if q4:
                    codes = (builder.and_(q, ir.Constant(bty, [15] * FLANES)),
                             builder.lshr(q, ir.Constant(bty, [4] * FLANES)))
                    vals = [builder.fadd(builder.fmul(dv, builder.uitofp(c, vty)), mv) for c in codes]
                    rows = (2 * i, 2 * i + 1)
                else:
                    vals, rows = [builder.fmul(builder.sitofp(q, vty), dv)], (i,)
                for r, val in zip(rows, vals, strict=True):
                    dst = builder.add(builder.mul(const(r), wwidth), col)
                    builder.store(val, vector_at(builder, wa.data, dst, vty), align=4)
        return context.get_dummy_value()

    return sig, codegen


@jit
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


@jit
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


@jit
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


@jit
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
