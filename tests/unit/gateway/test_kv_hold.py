"""HoldKv in the gateway: a hold and a pause/resume hint take one path to the replica whose cache
view holds most of the conversation, and differ only in what they send and read back."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest

from loopwire.gateway.kv_hold import hold_kv
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

PAUSE = common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_PAUSE)
RESUME = common_pb2.KvHint(phase=common_pb2.KV_HINT_PHASE_RESUME)


class FakeReplica:
    def __init__(self, name: str, cached: int, held: int = 0, reachable: bool = True) -> None:
        self.name, self.cached, self.held, self.reachable = name, cached, held, reachable
        self.healthy, self.block_size = True, 16
        self.sent: list[inference_pb2.HoldPrefixRequest] = []
        self.stub = SimpleNamespace(HoldPrefix=self._hold_prefix)

    def cached_prefix_blocks(self, hashes: list[int]) -> int:
        return self.cached

    async def _hold_prefix(self, request: inference_pb2.HoldPrefixRequest,
                           timeout: float) -> inference_pb2.HoldPrefixResponse:
        self.sent.append(request)
        if not self.reachable:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata())
        if request.HasField("hint"):
            return inference_pb2.HoldPrefixResponse(hinted_blocks=self.cached)
        return inference_pb2.HoldPrefixResponse(held_blocks=self.held)


def session(*replicas: FakeReplica, ceiling: int = 3600) -> SimpleNamespace:
    conversation = SimpleNamespace(block_hashes=lambda size: [1, 2, 3])
    store = SimpleNamespace(peek=lambda rid, tenant, stream_id, field: conversation)
    return SimpleNamespace(
        gw=SimpleNamespace(router=SimpleNamespace(replicas=list(replicas)), store=store), stream_id="s",
        tenant=SimpleNamespace(name="acme", policy=SimpleNamespace(max_retention_seconds=ceiling)))


async def test_a_hold_goes_to_the_most_cached_replica_and_reports_what_it_pinned() -> None:
    a, b = FakeReplica("a", cached=1, held=1), FakeReplica("b", cached=3, held=3)
    answer = await hold_kv(session(a, b), gateway_pb2.HoldKv(response_id="r", retention_seconds=60))  # type: ignore[arg-type]
    assert answer.kv_held == gateway_pb2.KvHeld(blocks=3, replica_id="b")
    assert not a.sent and b.sent[0].retention_seconds == 60 and not b.sent[0].HasField("hint")
    assert (b.sent[0].hold_id, b.sent[0].cache_salt, list(b.sent[0].block_hashes)) == ("r", "acme", [1, 2, 3])


async def test_with_nothing_cached_a_hold_still_asks_the_first_replica_and_a_hint_asks_none() -> None:
    """The hold replaces that replica's earlier hold of the id; a hint has nothing to move."""
    a, b = FakeReplica("a", cached=0), FakeReplica("b", cached=0)
    answer = await hold_kv(session(a, b), gateway_pb2.HoldKv(response_id="r", retention_seconds=60))  # type: ignore[arg-type]
    assert answer.kv_held == gateway_pb2.KvHeld() and len(a.sent) == 1 and not b.sent
    answer = await hold_kv(session(a, b), gateway_pb2.HoldKv(response_id="r", retention_seconds=60, hint=PAUSE))  # type: ignore[arg-type]
    assert answer.kv_held == gateway_pb2.KvHeld() and len(a.sent) == 1 and not b.sent


async def test_a_release_goes_to_every_replica() -> None:
    a, b = FakeReplica("a", cached=0), FakeReplica("b", cached=5)
    answer = await hold_kv(session(a, b), gateway_pb2.HoldKv(response_id="r"))  # type: ignore[arg-type]
    assert answer.kv_held == gateway_pb2.KvHeld()
    assert [(r.hold_id, r.retention_seconds, list(r.block_hashes)) for r in a.sent + b.sent] == [("r", 0, [])] * 2


@pytest.mark.parametrize(("hint", "seconds_sent"), [(PAUSE, 60), (RESUME, 0)])
async def test_a_hint_goes_to_the_most_cached_replica(hint: common_pb2.KvHint, seconds_sent: int) -> None:
    a, b = FakeReplica("a", cached=2), FakeReplica("b", cached=1)
    answer = await hold_kv(session(a, b, ceiling=60),  # type: ignore[arg-type]
                           gateway_pb2.HoldKv(response_id="r", retention_seconds=60, hint=hint))
    assert answer.kv_held == gateway_pb2.KvHeld(hinted_blocks=2, replica_id="a") and not b.sent
    assert a.sent[0].hint == hint and a.sent[0].retention_seconds == seconds_sent


async def test_a_resume_is_not_held_to_the_tenants_ceiling_and_a_pause_is() -> None:
    a = FakeReplica("a", cached=2)
    resumed = await hold_kv(session(a, ceiling=10),  # type: ignore[arg-type]
                            gateway_pb2.HoldKv(response_id="r", retention_seconds=60, hint=RESUME))
    assert resumed.WhichOneof("event") == "kv_held"
    paused = await hold_kv(session(a, ceiling=10),  # type: ignore[arg-type]
                           gateway_pb2.HoldKv(response_id="r", retention_seconds=60, hint=PAUSE))
    assert paused.failed.error.field == "hold_kv.retention_seconds" and len(a.sent) == 1


@pytest.mark.parametrize("hint", [None, PAUSE])
async def test_an_unreachable_replica_is_an_empty_answer_not_a_failure(hint: common_pb2.KvHint | None) -> None:
    a = FakeReplica("a", cached=2, held=2, reachable=False)
    answer = await hold_kv(session(a), gateway_pb2.HoldKv(response_id="r", retention_seconds=60, hint=hint))  # type: ignore[arg-type]
    assert answer.kv_held == gateway_pb2.KvHeld() and len(a.sent) == 1
