"""The one check of a KV pause/resume hint that the gateway and every replica run."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from loopwire.common.kv_hint_limits import MAX_HINT_REASON, MAX_PRIORITY, MAX_RETENTION_SECONDS, hint_problem
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2

PAUSE, RESUME = common_pb2.KV_HINT_PHASE_PAUSE, common_pb2.KV_HINT_PHASE_RESUME


@pytest.mark.parametrize(("hint", "seconds"), [
    (common_pb2.KvHint(phase=PAUSE, priority=MAX_PRIORITY, reason="x" * MAX_HINT_REASON), 1),
    (common_pb2.KvHint(phase=PAUSE), MAX_RETENTION_SECONDS),
    (common_pb2.KvHint(phase=RESUME), 0),  # a resume counts no seconds
])
def test_hints_at_the_limits_pass(hint: common_pb2.KvHint, seconds: int) -> None:
    assert hint_problem(hint, seconds) is None


BAD = [
    (common_pb2.KvHint(), 60, "hint.phase"),
    (common_pb2.KvHint(phase=PAUSE, priority=MAX_PRIORITY + 1), 60, "hint.priority"),
    (common_pb2.KvHint(phase=RESUME, reason="x" * (MAX_HINT_REASON + 1)), 0, "hint.reason"),
    (common_pb2.KvHint(phase=PAUSE), 0, "retention_seconds"),
    (common_pb2.KvHint(phase=PAUSE), MAX_RETENTION_SECONDS + 1, "retention_seconds"),
]


@pytest.mark.parametrize(("hint", "seconds", "field"), BAD)
def test_a_bad_hint_names_its_field(hint: common_pb2.KvHint, seconds: int, field: str) -> None:
    problem = hint_problem(hint, seconds)
    assert problem is not None and problem[0] == field


@pytest.mark.parametrize("request_type", [gateway_pb2.HoldKv, inference_pb2.HoldPrefixRequest])
def test_the_named_fields_are_fields_of_both_requests(request_type: type[Message]) -> None:
    """The gateway reports ``hold_kv.<field>`` and a replica ``<field>: why``: both must be real."""
    fields = request_type.DESCRIPTOR.fields_by_name
    for hint, seconds, _ in BAD:
        problem = hint_problem(hint, seconds)
        assert problem is not None
        field = problem[0]
        owner, _, name = field.rpartition(".")
        descriptor = fields[owner].message_type if owner else request_type.DESCRIPTOR
        assert descriptor is not None and name in descriptor.fields_by_name, field
