"""The operator's policy over what a request may ask for.

A tenant's safety mode, priority ceiling and KV-retention ceiling come from the auth config;
a request may only ask for less (a stricter safety mode, a lower priority, a shorter
retention, in a response's hint as in a HoldKv). The replay oracle (recorded output to emit, for replays and benchmarks) is test
scaffolding: accepted only from a gateway started with ``--allow-replay``.
"""

from __future__ import annotations

from loopwire.common.auth import Tenant
from loopwire.common.errors import RequestError
from loopwire.v1 import common_pb2, gateway_pb2

Code = common_pb2.ErrorCode

SAFETY_MODES = {
    "stream-then-cut": gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT,
    "buffer-until-pass": gateway_pb2.SAFETY_MODE_BUFFER_UNTIL_PASS,
    "off": gateway_pb2.SAFETY_MODE_OFF,
}
# Stricter modes rank higher.
_STRICTNESS: dict[int, int] = {gateway_pb2.SAFETY_MODE_OFF: 0, gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT: 1,
               gateway_pb2.SAFETY_MODE_BUFFER_UNTIL_PASS: 2}


def _denied(field: str, message: str) -> RequestError:
    return RequestError(Code.ERROR_CODE_PERMISSION_DENIED, f"{field}: {message}", field)


def safety_mode(create: gateway_pb2.CreateResponse, tenant: Tenant, gateway_default: int) -> int:
    """The mode this response runs under: the tenant's (or the gateway's), or a stricter one asked for."""
    floor = SAFETY_MODES[tenant.policy.safety_mode] if tenant.policy.safety_mode else gateway_default
    asked = create.safety_mode
    if not asked or asked == floor:
        return floor
    if asked not in _STRICTNESS:
        raise RequestError(Code.ERROR_CODE_INVALID_ARGUMENT, f"create_response.safety_mode: unknown value {asked}",
                           "create_response.safety_mode")
    if _STRICTNESS[asked] < _STRICTNESS[floor]:
        name = next(k for k, v in SAFETY_MODES.items() if v == floor)
        raise _denied("create_response.safety_mode", f"tenant {tenant.name!r} runs under {name!r}; a request may "
                                                     "only ask for a stricter mode")
    return asked


def check(create: gateway_pb2.CreateResponse, tenant: Tenant, gateway_safety: int, allow_replay: bool) -> None:
    """Refuse (PERMISSION_DENIED, naming the field and the bound) what the tenant may not ask for."""
    safety_mode(create, tenant, gateway_safety)
    policy = tenant.policy
    if create.priority > policy.max_priority:
        raise _denied("create_response.priority", f"at most {policy.max_priority} for tenant {tenant.name!r}")
    if create.retention_seconds > policy.max_retention_seconds:
        raise _denied("create_response.retention_seconds",
                      f"at most {policy.max_retention_seconds} s for tenant {tenant.name!r}")
    if create.HasField("replay") and not allow_replay:
        raise _denied("create_response.replay", "recorded output is accepted only by a gateway started with "
                                                "--allow-replay (replays and benchmarks)")


def check_hold(hold: gateway_pb2.HoldKv, tenant: Tenant) -> None:
    """A KV hold pins blocks as a retention hint does: never longer than the tenant's ceiling
    (PERMISSION_DENIED, as for ``create_response.retention_seconds``); a release is always allowed."""
    ceiling = tenant.policy.max_retention_seconds
    if hold.retention_seconds > ceiling:
        raise _denied("hold_kv.retention_seconds", f"at most {ceiling} s for tenant {tenant.name!r}")
