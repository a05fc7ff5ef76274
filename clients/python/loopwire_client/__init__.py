"""Thin client of the loopwire mesh: the generated loopwire.v1 stubs plus a channel helper.

    from loopwire_client import auth_metadata, harness_stub
    from loopwire_client.v1 import harness_pb2

The harness wants the tenant API key on every call: ``metadata=auth_metadata(key)``.
"""

from __future__ import annotations

import grpc

from loopwire_client.v1 import harness_pb2_grpc

DEFAULT_HARNESS = "127.0.0.1:50051"


def auth_metadata(api_key: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying a tenant API key (``authorization: Bearer <key>``)."""
    return (("authorization", f"Bearer {api_key}"),)


def harness_stub(address: str = DEFAULT_HARNESS) -> tuple[grpc.aio.Channel, harness_pb2_grpc.HarnessServiceStub]:
    """An asyncio channel to a harness and its stub (close the channel when done)."""
    channel = grpc.aio.insecure_channel(address)
    return channel, harness_pb2_grpc.HarnessServiceStub(channel)
