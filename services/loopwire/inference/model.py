"""A Llama-architecture transformer in numpy float32 that reads and writes a paged KV cache.

RMSNorm, rotary embeddings (the Hugging Face ``rotate_half`` layout), SwiGLU and grouped-query
attention; with Qwen2's q/k/v projection biases and Qwen3's per-head q/k RMSNorm (applied
before RoPE, as llama.cpp and transformers do) when the config asks for them. One ``forward`` runs a whole scheduler step: prefill chunks and decode/verify rows
of many sequences in one pass; the linear layers see all rows at once.

It is *batch invariant*: a row's result does not depend on which other rows share the pass or
on how a prompt was chunked. The linear layers multiply by the numba kernels of ``kernels``
(``matmul`` ``numba``: a GGUF file's quantized codes; ``numba-f32``: float32), whose order of
operations is fixed per row by construction, or, without numba (``blas``), the way
``row_invariance`` measured at load to keep a row's bits apart from the row count on this
machine's BLAS (one product, or fixed blocks of rows). Attention is a numba kernel in a fixed
order too; without numba it runs as BLAS products in float64, whose shape-dependent rounding vanishes
when rounded back to float32.
So greedy output with speculation equals greedy output without it token for token, and a
cached prefix gives the logits of a full recompute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from loopwire.inference.config import ModelConfig
from loopwire.inference.kv_cache import KvStore
from loopwire.inference.quantized import QuantizedWeight
from loopwire.inference.row_invariance import choose_row_block, matmul

MATMUL_MODES = ("auto", "numba", "numba-f32", "blas")
# A weight as the model holds it: float32 in Hugging Face's [out, in] orientation, or GGUF codes
# (already [in, out]; see ``quantized``).
Weight = np.ndarray | QuantizedWeight
Linear = Callable[[np.ndarray], np.ndarray]

log = logging.getLogger(__name__)

# Upper bound on attention scores materialised at once (elements), to bound memory.
_MAX_SCORE_ELEMENTS = 1 << 22


@dataclass
class Chunk:
    """Tokens of one sequence to run at positions ``start .. start+len(token_ids)-1``."""

    token_ids: np.ndarray
    start: int
    block_table: list[int]
    # Logits wanted for this many last positions of the chunk (0 = none: a prefill chunk).
    num_logits: int


def resolve_matmul(mode: str) -> str:
    """``auto``: the numba kernels when numba is installed, else BLAS."""
    if mode not in MATMUL_MODES:
        raise ValueError(f"matmul {mode!r}: choose one of {', '.join(MATMUL_MODES)}")
    if mode != "auto":
        return mode
    try:
        import numba  # noqa: F401
    except ImportError:
        return "blas"
    return "numba"


def _transposed(w: Weight) -> Weight:
    """[in, out], as ``x @ w`` wants it."""
    return w if isinstance(w, QuantizedWeight) else np.ascontiguousarray(w.T)


def _fuse(parts: list[Weight]) -> Weight:
    """Projections sharing an input as one [in, sum of outs] weight (quantized only if all are)."""
    if all(isinstance(p, QuantizedWeight) for p in parts):
        return QuantizedWeight.concat([p for p in parts if isinstance(p, QuantizedWeight)])
    return np.concatenate([_dense(_transposed(p)) for p in parts], axis=1)


def _dense(w: Weight) -> np.ndarray:
    return w.dequantize() if isinstance(w, QuantizedWeight) else w


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    var = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(var + np.float32(eps)) * weight


class LlamaModel:
    def __init__(self, config: ModelConfig, weights: dict[str, Weight], matmul_mode: str = "auto") -> None:
        config.validate()
        self.config = config
        self.matmul = resolve_matmul(matmul_mode)
        embed = weights["model.embed_tokens.weight"]
        # Quantized embeddings stay codes: a lookup dequantizes only the rows it reads.
        self.embed = embed
        head = embed if config.tie_word_embeddings else weights["lm_head.weight"]
        self.final_norm = _dense(weights["model.norm.weight"])
        linear: dict[str, Weight] = {"lm_head": _transposed(head)}
        self.layers = []
        for i in range(config.num_hidden_layers):
            p = f"model.layers.{i}."
            layer: dict[str, np.ndarray] = {
                "attn_norm": _dense(weights[p + "input_layernorm.weight"]),
                "mlp_norm": _dense(weights[p + "post_attention_layernorm.weight"]),
            }
            if config.attention_bias:
                layer["qkv_bias"] = np.concatenate([_dense(weights[p + f"self_attn.{n}_proj.bias"]) for n in "qkv"])
            if config.qk_norm:
                layer["q_norm"] = _dense(weights[p + "self_attn.q_norm.weight"])
                layer["k_norm"] = _dense(weights[p + "self_attn.k_norm.weight"])
            self.layers.append(layer)
            linear[f"{i}.qkv"] = _fuse([weights[p + f"self_attn.{n}_proj.weight"] for n in "qkv"])
            linear[f"{i}.o"] = _transposed(weights[p + "self_attn.o_proj.weight"])
            linear[f"{i}.gate_up"] = _fuse([weights[p + "mlp.gate_proj.weight"], weights[p + "mlp.up_proj.weight"]])
            linear[f"{i}.down"] = _transposed(weights[p + "mlp.down_proj.weight"])
        self.row_block = 0
        self.linear = self._build_linear(linear)
        self.lm_head = self.linear["lm_head"]
        self._layer_linear = [tuple(self.linear[f"{i}.{n}"] for n in ("qkv", "o", "gate_up", "down"))
                              for i in range(config.num_hidden_layers)]
        self._cos = np.zeros((0, config.head_dim), np.float32)
        self._sin = np.zeros((0, config.head_dim), np.float32)

    def _build_linear(self, weights: dict[str, Weight]) -> dict[str, Linear]:
        """One callable per linear layer, by the matmul mode (see the module docstring)."""
        if self.matmul == "blas":
            dense = {name: _dense(w) for name, w in weights.items()}
            # Rows per product that keep a row's bits independent of the batch on this BLAS (0: any).
            self.row_block = choose_row_block(list(dense.values()))
            if self.row_block:
                log.info("this BLAS rounds a row differently with the row count: linear layers multiply in "
                         "blocks of %d rows (batch invariance kept; long prefills are slower)", self.row_block)
            return {name: _blas_linear(w, self.row_block) for name, w in dense.items()}
        from loopwire.inference.kernels import KernelLinear, compile_all

        compile_all()
        if self.matmul == "numba-f32":
            return {name: KernelLinear(_dense(w)) for name, w in weights.items()}
        return {name: KernelLinear(w) for name, w in weights.items()}

    @property
    def weight_bytes(self) -> int:
        """Bytes the linear layers hold (codes and scales, or float32)."""
        return sum(int(getattr(f, "nbytes", 0)) for f in self.linear.values())

    def _embed(self, tokens: np.ndarray) -> np.ndarray:
        if isinstance(self.embed, QuantizedWeight):
            return np.ascontiguousarray(self.embed.columns(tokens).dequantize().T)
        return self.embed[tokens]

    def new_kv_store(self, num_blocks: int, block_size: int) -> KvStore:
        c = self.config
        return KvStore(c.num_hidden_layers, num_blocks, block_size, c.num_key_value_heads, c.head_dim)

    # -- rotary embeddings ------------------------------------------------------------

    def _rope_tables(self, max_pos: int) -> None:
        if max_pos <= len(self._cos):
            return
        n = max(max_pos, 2 * len(self._cos), 1024)
        d = self.config.head_dim
        inv_freq = 1.0 / (self.config.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
        freqs = np.outer(np.arange(n, dtype=np.float64), inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        self._cos, self._sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        cos = self._cos[positions][:, None, :]
        sin = self._sin[positions][:, None, :]
        half = x.shape[-1] // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rotated * sin

    # -- forward ----------------------------------------------------------------------

    def forward(self, chunks: list[Chunk], store: KvStore) -> list[np.ndarray]:
        """Run every chunk through the model, writing its keys and values into ``store``.

        Returns, per chunk, the logits of its last ``num_logits`` positions (``[n, vocab]``).
        """
        c = self.config
        if not chunks:
            return []
        tokens = np.concatenate([ch.token_ids for ch in chunks]).astype(np.int64)
        positions = np.concatenate([np.arange(ch.start, ch.start + len(ch.token_ids)) for ch in chunks])
        self._rope_tables(int(positions.max()) + 1)
        bounds = np.cumsum([0] + [len(ch.token_ids) for ch in chunks])
        slots = [self._slots(ch, store.block_size) for ch in chunks]
        nh, kvh, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        x = self._embed(tokens)
        for layer, w in enumerate(self.layers):
            linear = self._layer_linear[layer]
            h = _rms_norm(x, w["attn_norm"], c.rms_norm_eps)
            qkv = linear[0](h)
            if "qkv_bias" in w:
                qkv = qkv + w["qkv_bias"]
            q = qkv[:, : nh * hd].reshape(-1, nh, hd)
            k = qkv[:, nh * hd : (nh + kvh) * hd].reshape(-1, kvh, hd)
            v = qkv[:, (nh + kvh) * hd :].reshape(-1, kvh, hd)
            if "q_norm" in w:
                q = _rms_norm(q, w["q_norm"], c.rms_norm_eps)
                k = _rms_norm(k, w["k_norm"], c.rms_norm_eps)
            q, k = self._rope(q, positions), self._rope(k, positions)
            keys, values = store.keys[layer], store.values[layer]
            attn = np.empty((len(tokens), nh * hd), np.float32)
            for i, ch in enumerate(chunks):
                lo, hi = bounds[i], bounds[i + 1]
                blocks, offsets = slots[i]
                keys[:, blocks, :, offsets] = k[lo:hi]  # keys are stored [.., head_dim, block_size]
                values[:, blocks, offsets] = v[lo:hi].transpose(1, 0, 2)
                self._attend(q[lo:hi], ch, keys, values, attn[lo:hi])
            x = x + linear[1](attn)
            h = _rms_norm(x, w["mlp_norm"], c.rms_norm_eps)
            gate_up = linear[2](h)
            gate, up = gate_up[:, : c.intermediate_size], gate_up[:, c.intermediate_size :]
            x = x + linear[3](gate / (1.0 + np.exp(-gate)) * up)
        # One output-head product for the whole step: the head is the largest matrix.
        rows = [np.arange(bounds[i + 1] - ch.num_logits, bounds[i + 1]) for i, ch in enumerate(chunks)]
        picked = np.concatenate(rows)
        logits = np.zeros((0, c.vocab_size), np.float32)
        if len(picked):
            logits = self.lm_head(_rms_norm(x[picked], self.final_norm, c.rms_norm_eps))
        splits = np.cumsum([len(r) for r in rows])[:-1]
        return list(np.split(logits, splits))

    @staticmethod
    def _slots(ch: Chunk, block_size: int) -> tuple[np.ndarray, np.ndarray]:
        """The block and the offset in it of each of the chunk's positions."""
        pos = np.arange(ch.start, ch.start + len(ch.token_ids))
        table = np.asarray(ch.block_table, dtype=np.int64)
        return table[pos // block_size], pos % block_size

    def _attend(self, q: np.ndarray, ch: Chunk, keys: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
        """Causal attention of the chunk's queries over the sequence's cached keys into ``out``:
        the numba kernel, or without numba BLAS products in float64, whose shape-dependent
        rounding vanishes when rounded back to float32."""
        if self.matmul != "blas":
            from loopwire.inference.attention_kernel import attend

            attend(np.ascontiguousarray(q), keys, values, np.asarray(ch.block_table, dtype=np.int64), ch.start, out)
            return
        c = self.config
        nh, kvh, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        group = nh // kvh
        n = len(q)
        ctx = ch.start + n
        table = ch.block_table[: -(-ctx // keys.shape[3])]
        k = keys[:, table].swapaxes(-1, -2).reshape(kvh, -1, hd)[:, :ctx]
        v = values[:, table].reshape(kvh, -1, hd)[:, :ctx]
        k_t = k.transpose(0, 2, 1)
        # Rows are (query, group member) pairs of one kv head: [kvh, n * group, hd].
        qg = q.reshape(n, kvh, group, hd).transpose(1, 0, 2, 3).reshape(kvh, n * group, hd).astype(np.float64)
        qg *= 1.0 / np.sqrt(hd)
        # -inf above the diagonal of the chunk's own keys (keys before the chunk are all visible).
        causal = np.triu(np.full((n, n), -np.inf), 1).repeat(group, axis=0)
        res = np.empty((kvh, n * group, hd), np.float64)
        step = max(group, (_MAX_SCORE_ELEMENTS // max(1, ctx * kvh)) // group * group)
        for lo in range(0, n * group, step):
            hi = min(n * group, lo + step)
            scores = qg[:, lo:hi] @ k_t  # [kvh, rows, ctx]
            scores[:, :, ch.start :] += causal[lo:hi]
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            res[:, lo:hi] = (scores @ v) / scores.sum(axis=-1, keepdims=True)
        out[:] = res.reshape(kvh, n, group, hd).transpose(1, 0, 2, 3).reshape(n, nh * hd)


def _blas_linear(w: np.ndarray, block: int) -> Linear:
    def apply(x: np.ndarray) -> np.ndarray:
        return matmul(x, w, block)

    return apply
