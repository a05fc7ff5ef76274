"""Model weights: ``dummy:<seed>`` (random, reproducible), a Hugging Face Llama, Qwen2 or
Qwen3 checkpoint directory (``config.json`` + ``*.safetensors`` with the usual tensor names,
float32, float16 or bfloat16), or a GGUF file (``*.gguf``, see ``gguf_weights``)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from loopwire.inference.config import ModelConfig, load_model_config
from loopwire.inference.tensor_layout import tensor_names, tensor_shape

# Scale of the dummy output head: logits with a standard deviation of a few units give a
# peaked next-token distribution, so greedy decoding is stable and drafts can be accepted.
_DUMMY_LOGIT_STD = 4.0


def dummy_weights(config: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """Random weights with unit-variance activations (fan-in scaled projections)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in tensor_names(config):
        shape = tensor_shape(config, name)
        if name.endswith(("norm.weight", ".bias")):
            out[name] = (np.ones if name.endswith("weight") else np.zeros)(shape, np.float32)
            continue
        std = 1.0 if name == "model.embed_tokens.weight" else 1.0 / np.sqrt(shape[1])
        if name == "lm_head.weight":
            std = _DUMMY_LOGIT_STD / np.sqrt(shape[1])
        out[name] = (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)
    return out


_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}


def read_safetensors(path: str | Path, wanted: set[str] | None = None) -> dict[str, np.ndarray]:
    """The tensors of one ``.safetensors`` file as float32 (``wanted``: only these names).

    Read directly (8-byte header length, JSON header, raw little-endian data) because numpy,
    and so ``safetensors.numpy``, has no bfloat16, the dtype most real checkpoints ship in.
    """
    path = Path(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        try:
            header = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a safetensors file (bad header: {e})") from e
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n) if path.stat().st_size > 8 + n else np.zeros(0, np.uint8)
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or (wanted is not None and name not in wanted):
            continue
        dtype = _SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        lo, hi = info["data_offsets"]
        shape = tuple(info["shape"])
        if hi > len(data) or hi - lo != int(np.prod(shape)) * np.dtype(dtype).itemsize:
            raise ValueError(f"{path}: tensor {name} is truncated or malformed")
        t = np.frombuffer(data[lo:hi], dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
        if info["dtype"] == "BF16":  # the high half of a float32
            t = (t.astype(np.uint32) << 16).view(np.float32)
        out[name] = t.astype(np.float32)
    return out


def load_checkpoint(directory: str | Path) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """Read ``config.json`` and every ``*.safetensors`` file of a checkpoint, as float32."""
    directory = Path(directory)
    config = load_model_config(directory)
    config.validate()
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{directory}: no .safetensors files")
    tensors: dict[str, np.ndarray] = {}
    names = set(tensor_names(config))
    for f in files:
        tensors.update(read_safetensors(f, names))
    weights = {}
    for name in tensor_names(config):
        if name not in tensors:
            raise ValueError(f"{directory}: checkpoint lacks tensor {name}")
        t = tensors[name]
        if tuple(t.shape) != tensor_shape(config, name):
            raise ValueError(f"{directory}: {name} has shape {tuple(t.shape)}, config implies {tensor_shape(config, name)}")
        weights[name] = t.astype(np.float32)
    return config, weights


def load_weights(spec: str, config: ModelConfig, quantized: bool = False) -> tuple[ModelConfig, dict[str, Any]]:
    """``dummy:<seed>`` with ``config``'s shape, or a GGUF file / checkpoint directory (its
    own shape). ``quantized``: a GGUF file's Q4_1/Q8_0 matrices stay codes (``QuantizedWeight``)."""
    if spec.startswith("dummy"):
        _, _, seed = spec.partition(":")
        try:
            return config, dummy_weights(config, int(seed or 0))
        except ValueError as e:
            raise ValueError(f"weights {spec!r}: expected dummy:<integer seed>") from e
    if spec.endswith(".gguf") or Path(spec).is_file():
        from loopwire.inference.gguf_weights import load_gguf

        return load_gguf(spec, quantized=quantized)
    return load_checkpoint(spec)
