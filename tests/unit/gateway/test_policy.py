"""Operator policy: safety mode, priority and KV retention come from the tenant's auth config;
a request may only ask for less, and recorded output only reaches a gateway started for replays."""

from __future__ import annotations

import json

from loopwire.common.auth import Authenticator, hash_key
from loopwire.gateway.service import GatewayConfig
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import FakeReplica, kinds, last, user
from .test_gateway_concurrency import SlowClassifier

Mode = gateway_pb2.SafetyMode
KEYS = {"strict": "key-strict", "trusted": "key-trusted"}


def auth(tmp_path) -> Authenticator:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"tenants": {
        "strict": {"key_sha256": [hash_key(KEYS["strict"])]},  # the defaults: gateway's safety mode, no priority, no retention
        "trusted": {"key_sha256": [hash_key(KEYS["trusted"])], "safety_mode": "off", "max_priority": 5,
                    "max_retention_seconds": 600},
    }}))
    return Authenticator.from_file(path)


def denied(events, field: str) -> common_pb2.Error:
    error = last(events, "failed").error
    assert error.code == common_pb2.ERROR_CODE_PERMISSION_DENIED and error.field == f"create_response.{field}", error
    return error


async def test_a_request_cannot_turn_safety_off_or_raise_its_priority_or_retention(make_mesh, tmp_path):
    replica = FakeReplica()
    mesh = await make_mesh([replica], classifier=SlowClassifier(0.0), auth=auth(tmp_path),
                           config=GatewayConfig(allow_replay=True))
    conv = mesh.open(KEYS["strict"])
    # The input the default mode stops is stopped although the request asks for no safety at all.
    denied(await conv.send(input=[user("FORBIDDEN")], safety_mode=Mode.SAFETY_MODE_OFF), "safety_mode")
    assert "priority" in denied(await conv.send(input=[user("q")], priority=100), "priority").message
    assert "at most 0 s" in denied(await conv.send(input=[user("q")], retention_seconds=3600),
                                   "retention_seconds").message
    assert replica.received == []  # nothing denied reached the replica
    events = await conv.send(input=[user("FORBIDDEN")])
    assert last(events, "failed").error.code == common_pb2.ERROR_CODE_SAFETY_VIOLATION
    # Asking for less is fine: a stricter mode, a lower priority.
    events = await conv.send(input=[user("q")], priority=-3, safety_mode=Mode.SAFETY_MODE_BUFFER_UNTIL_PASS)
    assert kinds(events)[-1] == "completed", events
    assert replica.received[-1].start.priority == -3


async def test_the_operator_grants_what_a_tenant_may_ask_for(make_mesh, tmp_path):
    replica = FakeReplica()
    mesh = await make_mesh([replica], classifier=SlowClassifier(0.0), auth=auth(tmp_path),
                           config=GatewayConfig(allow_replay=True))
    conv = mesh.open(KEYS["trusted"])
    events = await conv.send(input=[user("q")], priority=5, retention_seconds=600)
    assert kinds(events)[-1] == "completed", events
    assert (replica.received[-1].start.priority, replica.received[-1].start.retention_seconds) == (5, 600)
    denied(await conv.send(input=[user("q")], priority=6), "priority")
    # This tenant's policy is no safety check: the same input passes.
    assert kinds(await conv.send(input=[user("FORBIDDEN")]))[-1] == "completed"


async def test_recorded_output_needs_a_gateway_started_for_replays(make_mesh):
    replica = FakeReplica()
    mesh = await make_mesh([replica], config=GatewayConfig())
    conv = mesh.open()
    error = denied(await conv.send(input=[user("q")], replay=common_pb2.ReplayOutput(text="anything")), "replay")
    assert "--allow-replay" in error.message and replica.received == []
    assert kinds(await conv.send(input=[user("q")]))[-1] == "completed"
