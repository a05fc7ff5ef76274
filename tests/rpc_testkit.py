"""A real gRPC call that fails: one generic method served on loopback that ends with a given
status, so a test reads the error exactly as a client receives it (rich details included)."""

from __future__ import annotations

import grpc
import pytest


async def failed_call(status: grpc.Status) -> grpc.aio.AioRpcError:
    """Serve one method that ends with ``status``; return what a real client receives."""

    async def handler(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort_with_status(status)
        return b""

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "t.T", {"M": grpc.unary_unary_rpc_method_handler(handler)})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await channel.unary_unary("/t.T/M")(b"", timeout=10)
            return e.value
    finally:
        await server.stop(0)
