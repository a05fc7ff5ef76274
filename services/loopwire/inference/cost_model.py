"""Roofline cost of one engine step on a named GPU for a named Llama size.

A step reads every weight once and the K/V of every scheduled sequence's context, and
does ``2 * params`` FLOPs per token plus attention. Its time is the larger of compute time
(FLOPs over achieved FLOP/s) and memory time (bytes over achieved bandwidth), plus a fixed
launch/scheduling overhead. Prefill-heavy steps come out compute-bound, decode steps
bandwidth-bound, as on real hardware.

Peak numbers are the vendors' datasheet values for dense BF16 tensor-core throughput and
HBM bandwidth (NVIDIA H100 SXM / H200 SXM / B200 / A100 SXM / L40S datasheets). The
achieved fractions follow published measurements: large-GEMM prefill reaches ~60-70% of
peak (vLLM/TensorRT-LLM prefill benchmarks, MLPerf Inference Llama 2 70B results) and
decode streams weights at ~75-85% of peak bandwidth (the "memory-bound decode" analyses of
Pope et al. 2022, "Efficiently Scaling Transformer Inference"). Weights and KV in BF16.

Host-tier KV copies cross the host link: PCIe Gen5 x16 (64 GB/s per direction) on H100/H200/
B200 boards, PCIe Gen4 x16 (32 GB/s) on A100/L40S, at ~80% achieved for large pinned-memory
copies (``host_link_gb_per_s`` is the achieved figure). Copies are priced serially with the
step that needed them, an upper bound: engines overlap offloads with compute on a side stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from loopwire.inference.config import ModelConfig, model_preset

BYTES_PER_PARAM = 2  # BF16
BYTES_PER_KV_ELEMENT = 2
# Llama 3's own vocabulary: the priced model is the real one, whatever ids replay feeds it.
LLAMA3_VOCAB_SIZE = 128256


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bf16_tflops: float  # dense peak, TFLOP/s
    hbm_tb_per_s: float  # peak, TB/s
    memory_gb: float
    compute_efficiency: float = 0.65
    bandwidth_efficiency: float = 0.80
    step_overhead_s: float = 250e-6  # kernel launches + scheduler per step (CUDA graphs on)
    host_link_gb_per_s: float = 51.2  # achieved host<->device copy bandwidth, per direction


GPUS = {
    "h200": GpuSpec("h200", 989.0, 4.8, 141.0),
    "h100": GpuSpec("h100", 989.0, 3.35, 80.0),
    "b200": GpuSpec("b200", 2250.0, 8.0, 180.0),
    "a100": GpuSpec("a100", 312.0, 2.039, 80.0, host_link_gb_per_s=25.6),
    "l40s": GpuSpec("l40s", 362.0, 0.864, 48.0, host_link_gb_per_s=25.6),
}


def gpu_spec(name: str) -> GpuSpec:
    try:
        return GPUS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown GPU {name!r}; choose one of {', '.join(GPUS)}") from None


def kv_bytes_per_token(model: ModelConfig) -> int:
    """Bytes of KV cache one token takes: keys and values of every layer's KV heads, 16-bit."""
    return 2 * model.num_hidden_layers * model.num_key_value_heads * model.head_dim * BYTES_PER_KV_ELEMENT


def slowest_host_link_bytes_per_s() -> float:
    """The slowest achieved host<->device copy bandwidth of the GPUs priced here (PCIe 4.0 x16)."""
    return min(g.host_link_gb_per_s for g in GPUS.values()) * 1e9


@dataclass(frozen=True)
class CostModel:
    gpu: GpuSpec
    model: ModelConfig

    @classmethod
    def named(cls, gpu: str, params: str) -> CostModel:
        return cls(gpu_spec(gpu), replace(model_preset(params), vocab_size=LLAMA3_VOCAB_SIZE))

    @property
    def weight_bytes(self) -> float:
        return self.model.num_params * BYTES_PER_PARAM

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.model)

    def kv_blocks_that_fit(self, block_size: int, memory_fraction: float = 0.9) -> int:
        """KV blocks left in ``memory_fraction`` of GPU memory after the weights."""
        free = self.gpu.memory_gb * 1e9 * memory_fraction - self.weight_bytes
        return max(1, int(free // (self.kv_bytes_per_token * block_size)))

    def host_transfer_seconds(self, num_blocks: int, block_size: int) -> float:
        """Time to copy ``num_blocks`` KV blocks across the host link (one direction)."""
        return num_blocks * block_size * self.kv_bytes_per_token / (self.gpu.host_link_gb_per_s * 1e9)

    def step_seconds(self, chunks: Sequence[tuple[float, float]]) -> float:
        """Duration of one step running ``(context_before, new_tokens)`` per sequence (expected
        token counts may be fractional)."""
        m = self.model
        tokens = sum(n for _, n in chunks)
        if tokens == 0:
            return 0.0
        # Attention: QK^T and PV, 2 FLOPs per MAC, each new token attends to its whole prefix.
        attn_flops = sum(
            4 * m.num_hidden_layers * m.hidden_size * (n * ctx + n * (n + 1) / 2) for ctx, n in chunks
        )
        flops = 2 * m.num_params * tokens + attn_flops
        kv_read = sum((ctx + n) * self.kv_bytes_per_token for ctx, n in chunks)
        bytes_moved = self.weight_bytes + kv_read + tokens * self.kv_bytes_per_token
        compute_s = flops / (self.gpu.bf16_tflops * 1e12 * self.gpu.compute_efficiency)
        memory_s = bytes_moved / (self.gpu.hbm_tb_per_s * 1e12 * self.gpu.bandwidth_efficiency)
        return max(compute_s, memory_s) + self.gpu.step_overhead_s
