"""The numba kernels: quantized codes rebuilt with gguf's own arithmetic, the same bits as the
float32 kernel over the dequantized matrix, a row's bits independent of the batch by
construction, and close to a float64 product.

References are independent of the kernels: ``gguf.quants.dequantize`` (the library llama.cpp's
project publishes) for the codes, float64 numpy for the products, a row multiplied alone for
batch invariance."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.model_def import default_model_path, open_gguf
from loopwire.inference.kernels import KernelLinear
from loopwire.inference.model import MATMUL_MODES, resolve_matmul
from loopwire.inference.quantized import KINDS, QuantizedWeight

QUANT = {"q4_1": gguf.GGMLQuantizationType.Q4_1, "q8_0": gguf.GGMLQuantizationType.Q8_0}


def _random_quantized(kind: str, k: int, n: int, seed: int) -> tuple[QuantizedWeight, np.ndarray]:
    """A [k, n] weight quantized by gguf, as codes and as gguf dequantizes them ([k, n])."""
    w = np.random.default_rng(seed).standard_normal((n, k), dtype=np.float32)
    raw = gguf.quants.quantize(w, QUANT[kind])
    dense = np.asarray(gguf.quants.dequantize(raw, QUANT[kind]), np.float32).reshape(n, k).T
    return QuantizedWeight.from_blocks(kind, raw, n, k), np.ascontiguousarray(dense)


@pytest.fixture(scope="module")
def smollm_tensors() -> list:
    reader = open_gguf(default_model_path())
    return [t for t in reader.tensors if t.tensor_type.name in KINDS]


def test_every_quantized_tensor_of_the_default_model_dequantizes_as_gguf_does(smollm_tensors) -> None:
    assert {t.tensor_type.name for t in smollm_tensors} == {"Q4_1", "Q8_0"}
    for t in smollm_tensors:
        k, n = (int(s) for s in t.shape)
        codes = QuantizedWeight.from_blocks(KINDS[t.tensor_type.name], t.data, n, k)
        ref = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(n, k)
        np.testing.assert_array_equal(codes.dequantize(), ref.T, err_msg=t.name)
        assert codes.nbytes < ref.nbytes / 3


@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.3.ffn_down.weight", "token_embd.weight"])
def test_real_weights_quantized_kernel_equals_float32_kernel_bit_for_bit(smollm_tensors, name: str) -> None:
    t = next(t for t in smollm_tensors if t.name == name)
    k, n = (int(s) for s in t.shape)
    codes = QuantizedWeight.from_blocks(KINDS[t.tensor_type.name], t.data, n, k)
    dense = codes.dequantize()
    x = np.random.default_rng(1).standard_normal((9, k), dtype=np.float32)
    for rows in (1, 2, 5, 9):  # the single-row, shared-load and remainder paths
        got = KernelLinear(codes)(x[:rows])
        np.testing.assert_array_equal(got, KernelLinear(dense)(x[:rows]))
        np.testing.assert_allclose(got, (x[:rows].astype(np.float64) @ dense), rtol=1e-4, atol=2e-4)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(["q4_1", "q8_0", "f32"]), blocks=st.integers(1, 4), n=st.integers(1, 300),
       rows=st.integers(1, 19), seed=st.integers(0, 2**16), data=st.data())
def test_a_row_gets_the_same_bits_alone_and_at_any_position_of_any_batch(kind, blocks, n, rows, seed, data) -> None:
    k = 32 * blocks
    codes, dense = _random_quantized("q8_0" if kind == "f32" else kind, k, n, seed)
    linear = KernelLinear(dense if kind == "f32" else codes)
    x = np.random.default_rng(seed + 1).standard_normal((rows, k), dtype=np.float32)
    position = data.draw(st.integers(0, rows - 1))
    batch = linear(x)
    assert batch.shape == (rows, n) and batch.dtype == np.float32
    np.testing.assert_array_equal(batch[position], linear(x[position : position + 1])[0])
    np.testing.assert_allclose(batch, x.astype(np.float64) @ dense, rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 70), n=st.integers(1, 40), rows=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_float32_kernel_takes_any_input_width(k, n, rows, seed) -> None:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((k, n), dtype=np.float32)
    x = rng.standard_normal((rows, k), dtype=np.float32)
    got = KernelLinear(w)(x)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[-1], KernelLinear(w)(x[-1:])[0])


def test_an_empty_batch_and_bad_weights() -> None:
    codes, _ = _random_quantized("q4_1", 64, 8, 0)
    assert KernelLinear(codes)(np.zeros((0, 64), np.float32)).shape == (0, 8)
    with pytest.raises(ValueError, match=r"input of shape \(1, 32\) for a weight of 64 inputs"):
        KernelLinear(codes)(np.zeros((1, 32), np.float32))
    with pytest.raises(ValueError, match="2-D float32"):
        KernelLinear(np.zeros((4, 4), np.float64))
    with pytest.raises(ValueError, match="whole blocks"):
        QuantizedWeight.from_blocks("q8_0", np.zeros(34, np.uint8), 1, 30)
    with pytest.raises(ValueError, match="no kernel"):
        QuantizedWeight.from_blocks("q5_k", np.zeros(34, np.uint8), 1, 32)


def test_matmul_modes_resolve(monkeypatch) -> None:
    assert resolve_matmul("auto") == "numba"
    for mode in MATMUL_MODES[1:]:
        assert resolve_matmul(mode) == mode
    with pytest.raises(ValueError, match="choose one of auto, numba, numba-f32, blas"):
        resolve_matmul("gpu")
    import sys

    monkeypatch.setitem(sys.modules, "numba", None)  # an install without numba
    assert resolve_matmul("auto") == "blas"


def _reference_attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, table: np.ndarray,
                         start: int) -> np.ndarray:
    """Causal softmax attention written from its definition, one query and head at a time."""
    n, heads, hd = q.shape
    kv_heads, _, block, _ = keys.shape
    out = np.empty((n, heads * hd))
    for i in range(n):
        ctx = start + i + 1
        slots = [(table[j // block], j % block) for j in range(ctx)]
        for h in range(heads):
            g = h // (heads // kv_heads)
            k = np.array([keys[g, b, o] for b, o in slots])
            v = np.array([values[g, b, o] for b, o in slots])
            s = k @ q[i, h].astype(np.float64) / np.sqrt(hd)
            p = np.exp(s - s.max())
            out[i, h * hd : (h + 1) * hd] = p @ v / p.sum()
    return out


@settings(max_examples=30, deadline=None)
@given(kv_heads=st.sampled_from([1, 2, 3]), group=st.sampled_from([1, 3]), hd=st.sampled_from([8, 64]),
       block=st.sampled_from([4, 12, 16]), start=st.integers(0, 40), n=st.integers(1, 20), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([np.float32, np.float64]), data=st.data())
def test_attention_kernel_is_softmax_attention_and_a_query_gets_the_same_bits_in_any_chunk(
        kv_heads, group, hd, block, start, n, seed, dtype, data) -> None:
    from loopwire.inference.attention_kernel import attend

    rng = np.random.default_rng(seed)
    heads, blocks = kv_heads * group, -(-(start + n) // block) + 2
    keys = rng.standard_normal((kv_heads, blocks, block, hd)).astype(dtype)  # float32: the store's type
    values = rng.standard_normal((kv_heads, blocks, block, hd)).astype(dtype)
    table = rng.permutation(blocks).astype(np.int64)
    q = rng.standard_normal((n, heads, hd), dtype=np.float32)
    out = np.empty((n, heads * hd), np.float32)
    stored = np.ascontiguousarray(keys.transpose(0, 1, 3, 2))  # the store's keys: a block transposed
    attend(q, stored, values, table, start, out)
    np.testing.assert_allclose(out, _reference_attention(q, keys, values, table, start), rtol=1e-5, atol=1e-5)
    i = data.draw(st.integers(0, n - 1))  # the same query decoded alone at its position
    alone = np.empty((1, heads * hd), np.float32)
    attend(q[i : i + 1].copy(), stored, values, table, start + i, alone)
    np.testing.assert_array_equal(alone[0], out[i])
    # Unrounded (float64 out): a different order of operations for a chunk's rows shows here, where
    # rounding to float32 would hide it; the float32 output is this rounded.
    wide, wide_alone = np.empty((n, heads * hd)), np.empty((1, heads * hd))
    attend(q, stored, values, table, start, wide)
    attend(q[i : i + 1].copy(), stored, values, table, start + i, wide_alone)
    np.testing.assert_array_equal(wide_alone[0], wide[i])
    np.testing.assert_array_equal(wide.astype(np.float32), out)
