"""Thin client of the loopwire mesh: the generated loopwire.v1 stubs plus a channel helper.

    from loopwire_client import harness_stub
    from loopwire_client.v1 import harness_pb2
"""

from __future__ import annotations

import grpc

from loopwire_client.v1 import harness_pb2_grpc

DEFAULT_HARNESS = "127.0.0.1:50051"


def harness_stub(address: str = DEFAULT_HARNESS) -> tuple[grpc.aio.Channel, harness_pb2_grpc.HarnessServiceStub]:
    """An asyncio channel to a harness and its stub (close the channel when done)."""
    channel = grpc.aio.insecure_channel(address)
    return channel, harness_pb2_grpc.HarnessServiceStub(channel)
