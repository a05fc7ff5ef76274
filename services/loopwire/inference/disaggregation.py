"""Disaggregated serving's RPCs: ``Prefill`` on a prefill replica (the prompt's blocks kept under
a handle for a while), ``PullKv`` streaming them to the decode replica, and the decode side's
pull of a handle from a trusted peer into its own prefix cache.

``DisaggregationRpcs`` is a mixin of ``InferenceServicer``, which owns every attribute used here."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import numpy as np

from loopwire.common import grpc_server, rpc_errors
from loopwire.common.errors import Code, RequestError
from loopwire.inference.config import EngineConfig
from loopwire.inference.engine import Engine, KvBlockData
from loopwire.inference.sequence import Finished, GenerationRequest
from loopwire.inference.validation import check_capacity, check_ids
from loopwire.v1 import common_pb2, inference_pb2, inference_pb2_grpc

# How long a Prefill keeps its blocks for the decode replica to pull, and how many handles live.
PREFILL_HOLD_SECONDS = 60.0
MAX_PREFILL_HANDLES = 1024
# A peer that does not deliver a prefilled KV within this long is given up on (STATE_LOST).
PULL_TIMEOUT_S = 30.0


@dataclass
class _PrefillHandle:
    block_hashes: list[int]
    tail: list[int]


class DisaggregationRpcs:
    """Prefill, PullKv and the pull behind a Generate's ``kv_handle``."""

    engine: Engine
    config: EngineConfig
    vocab_size: int
    service_token: str  # sent to peers this replica pulls KV from
    _handles: dict[bytes, _PrefillHandle]

    async def Prefill(
        self, request: inference_pb2.PrefillRequest, context: grpc.aio.ServicerContext
    ) -> inference_pb2.PrefillResponse:
        if not self.engine.supports_kv_transfer:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"the {self.engine.name} engine does not export KV "
                                "through this service; use a reference or simulated replica")
        if not request.token_ids:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "token_ids: the prompt is empty")
        try:
            check_ids("token_ids", request.token_ids, self.vocab_size)
            check_capacity("token_ids", len(request.token_ids) + 1, self.config)
        except RequestError as e:
            await rpc_errors.abort(context, e.grpc_status, e.message, e.reason)
        handle = secrets.token_bytes(16)
        req = GenerationRequest(
            request_id=f"prefill/{handle.hex()}",
            prompt=list(request.token_ids),
            max_tokens=1,
            prefill_only=True,
            session_id=f"prefill/{handle.hex()}",
            retention_seconds=PREFILL_HOLD_SECONDS,
            cache_salt=request.cache_salt,
        )
        fin: Finished | None = None
        async for out in self.engine.generate(req):
            fin = out.finished
        assert fin is not None
        full = len(fin.block_hashes) * self.config.block_size
        if len(self._handles) >= MAX_PREFILL_HANDLES:
            del self._handles[next(iter(self._handles))]
        self._handles[handle] = _PrefillHandle(fin.block_hashes, list(request.token_ids[full:]))
        t = fin.timings
        return inference_pb2.PrefillResponse(
            kv_handle=handle,
            num_tokens=len(request.token_ids),
            cached_tokens=fin.usage.cached_input_tokens,
            replica_id=self.config.replica_id,
            block_hashes=fin.block_hashes,
            timings=common_pb2.Timings(queue_us=t.queue_us, prefill_us=t.prefill_us),
        )

    async def PullKv(
        self, request: inference_pb2.PullKvRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inference_pb2.PullKvResponse]:
        if not self.engine.supports_kv_transfer:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"the {self.engine.name} engine does not export KV")
        handle = self._handles.get(request.kv_handle)
        if handle is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "kv_handle: unknown or expired handle; prefill again")
            return
        blocks = await self.engine.export_kv(handle.block_hashes)
        if len(blocks) < len(handle.block_hashes):
            await context.abort(grpc.StatusCode.NOT_FOUND, "kv_handle: its blocks were evicted; prefill again")
        for i, b in enumerate(blocks):
            block = inference_pb2.KvBlock(block_hash=b.block_hash, parent_hash=b.parent_hash, token_ids=b.token_ids)
            if b.keys is not None and b.values is not None:
                block.keys = b.keys.tobytes()
                block.values = b.values.tobytes()
                block.dtype = str(b.keys.dtype)
                block.shape.extend(b.keys.shape)
            last = i == len(blocks) - 1
            yield inference_pb2.PullKvResponse(block=block, tail_token_ids=handle.tail if last else [])
        if not blocks:
            yield inference_pb2.PullKvResponse(tail_token_ids=handle.tail)

    async def _pull(self, source: str, handle: bytes) -> None:
        """Fetch a prefilled prompt's blocks from ``source`` into this replica's prefix cache."""
        if not self.engine.supports_kv_transfer:
            raise RequestError(Code.ERROR_CODE_INVALID_ARGUMENT, f"start.kv_handle: the {self.engine.name} engine "
                               "cannot import KV through this service", "start.kv_handle",
                               reason=common_pb2.ERROR_REASON_KV_PULL_FAILED)
        async with grpc_server.service_channel(source, self.service_token) as channel:
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            blocks = []
            try:
                async for chunk in stub.PullKv(inference_pb2.PullKvRequest(kv_handle=handle), timeout=PULL_TIMEOUT_S):
                    if chunk.HasField("block"):
                        blocks.append(_block_data(chunk.block))
            except grpc.aio.AioRpcError as e:
                raise RequestError(Code.ERROR_CODE_STATE_LOST, f"start.kv_handle: pull from {source} failed: "
                                   f"{e.details()}", "start.kv_handle", retryable=True,
                                   reason=common_pb2.ERROR_REASON_KV_PULL_FAILED) from e
        await self.engine.import_kv(blocks)


def _block_data(block: inference_pb2.KvBlock) -> KvBlockData:
    keys = values = None
    if block.keys:
        shape = tuple(block.shape)
        keys = np.frombuffer(block.keys, dtype=block.dtype).reshape(shape)
        values = np.frombuffer(block.values, dtype=block.dtype).reshape(shape)
    return KvBlockData(block.block_hash, block.parent_hash, tuple(block.token_ids), keys, values)
