"""GGUF Q4_1 and Q8_0 weights kept as their codes, laid out for the numba kernels, and the float32
matrix ``gguf.quants`` would dequantize them to (same arithmetic, same bits).

GGUF quantizes each output's row in blocks of 32 inputs. The kernels walk the inputs ``k`` in
order with SIMD across outputs, so the codes are stored transposed, ``[k, n_out]`` (the model's
orientation of ``x @ w``): Q8_0 as int8 ``[k, n]``, Q4_1 two inputs per byte (``k`` even in the
low nibble), with the block scales ``d`` (and Q4_1's minimum ``m``) as float32 ``[k // 32, n]``:
exactly the file's float16 values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QBLOCK = 32  # weights per GGUF Q4_1 / Q8_0 block
# GGUF type names with a kernel, and what they are called here.
KINDS = {"Q4_1": "q4_1", "Q8_0": "q8_0"}


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


@dataclass
class QuantizedWeight:
    """A ``[k, n_out]`` weight: ``kind`` ``q4_1`` or ``q8_0``, codes ``qs``, scales ``d``, minima ``m``."""

    kind: str
    d: np.ndarray
    qs: np.ndarray
    m: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return self.d.shape[0] * QBLOCK, self.d.shape[1]

    @property
    def nbytes(self) -> int:
        return self.d.nbytes + self.qs.nbytes + (self.m.nbytes if self.m is not None else 0)

    @classmethod
    def from_blocks(cls, kind: str, raw: np.ndarray, n_out: int, k: int) -> QuantizedWeight:
        """From a GGUF tensor's bytes (``reader.tensors[i].data``: a row of blocks per output)."""
        if k % QBLOCK:
            raise ValueError(f"a quantized row of {k} weights is not whole blocks of {QBLOCK}")
        blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(n_out, k // QBLOCK, -1)
        d = np.ascontiguousarray(_f16(blocks[..., 0:2]).T)
        if kind == "q8_0":
            codes = blocks[..., 2:].view(np.int8).reshape(n_out, k)
            return cls(kind, d, np.ascontiguousarray(codes.T))
        if kind != "q4_1":
            raise ValueError(f"no kernel for {kind!r} weights")
        m = np.ascontiguousarray(_f16(blocks[..., 2:4]).T)
        packed = blocks[..., 4:]  # byte j of a block: element j (low nibble), element j + 16 (high)
        codes = np.concatenate([packed & 15, packed >> 4], axis=-1).reshape(n_out, k).T  # [k, n]
        return cls(kind, d, np.ascontiguousarray(codes[0::2] | (codes[1::2] << 4)), m)

    def columns(self, index: np.ndarray) -> QuantizedWeight:
        """The outputs ``index`` (a permutation or a selection), still quantized."""
        return QuantizedWeight(self.kind, np.ascontiguousarray(self.d[:, index]),
                               np.ascontiguousarray(self.qs[:, index]),
                               None if self.m is None else np.ascontiguousarray(self.m[:, index]))

    def dequantize(self) -> np.ndarray:
        """float32 ``[k, n]``, with ``gguf.quants``' arithmetic."""
        k, n = self.shape
        d = np.repeat(self.d, QBLOCK, axis=0)
        if self.kind == "q8_0":
            return self.qs.astype(np.float32) * d
        assert self.m is not None
        codes = np.empty((k, n), np.uint8)
        codes[0::2], codes[1::2] = self.qs & 15, self.qs >> 4
        return d * codes.astype(np.float32) + np.repeat(self.m, QBLOCK, axis=0)

    @staticmethod
    def concat(parts: list[QuantizedWeight]) -> QuantizedWeight:
        """The outputs of ``parts`` side by side (a fused q/k/v or gate/up projection)."""
        kinds = {p.kind for p in parts}
        if len(kinds) != 1:
            raise ValueError(f"cannot fuse weights of kinds {sorted(kinds)}")
        m = None if parts[0].m is None else np.concatenate([p.m for p in parts if p.m is not None], axis=1)
        return QuantizedWeight(parts[0].kind, np.concatenate([p.d for p in parts], axis=1),
                               np.concatenate([p.qs for p in parts], axis=1), m)
