"""What the numba kernels (``kernels.py``, ``attention_kernel.py``) share: the one way they are
compiled, and the two LLVM IR steps their intrinsics build vectors with."""

from __future__ import annotations

import numba
from llvmlite import ir

# Compiled once per machine into ``__pycache__`` (``cache=True``); ``nogil`` lets a step's threads
# run kernels side by side; no bounds checks (the callers check shapes).
jit = numba.njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")


def vector_at(builder: ir.IRBuilder, data: ir.Value, index: ir.Value, ty: ir.VectorType) -> ir.Value:
    """In generated IR: a pointer to the vector of type ``ty`` that starts at element ``index`` of ``data``."""
    return builder.bitcast(builder.gep(data, [index], inbounds=True), ty.as_pointer())


def broadcast(builder: ir.IRBuilder, scalar: ir.Value, ty: ir.VectorType) -> ir.Value:
    """In generated IR: ``scalar`` in every lane of a vector of type ``ty``."""
    i32 = ir.IntType(32)
    undef = ir.Constant(ty, ir.Undefined)
    lanes = ir.Constant(ir.VectorType(i32, ty.count), [0] * ty.count)
    return builder.shuffle_vector(builder.insert_element(undef, scalar, ir.Constant(i32, 0)), undef, lanes)
