"""The limits of a KV hold or pause hint, and the check of a hint against them, written once:
the gateway checks a caller's HoldKv and every replica checks the HoldPrefix it is sent again
(a replica trusts no caller), so a hint one accepts is never refused by the other.
"""

from __future__ import annotations

from loopwire.v1 import common_pb2

MAX_RETENTION_SECONDS = 3600  # a replica's cap on how long anything keeps KV: a hold, a pause, a generation
MIN_PRIORITY, MAX_PRIORITY = 0, 100  # retention priorities (TensorRT-LLM's KvCacheRetentionConfig range)
MAX_HINT_REASON = 64  # characters


def hint_problem(hint: common_pb2.KvHint, retention_seconds: int) -> tuple[str, str] | None:
    """What is wrong with ``hint`` sent with ``retention_seconds``: the field, as HoldKv and
    HoldPrefixRequest both name it, and why; None when nothing is."""
    if hint.phase == common_pb2.KV_HINT_PHASE_UNSPECIFIED:
        return "hint.phase", "PAUSE or RESUME"
    if hint.priority > MAX_PRIORITY:
        return "hint.priority", f"at most {MAX_PRIORITY}"
    if len(hint.reason) > MAX_HINT_REASON:
        return "hint.reason", f"at most {MAX_HINT_REASON} characters"
    if hint.phase == common_pb2.KV_HINT_PHASE_PAUSE and not 0 < retention_seconds <= MAX_RETENTION_SECONDS:
        return "retention_seconds", f"a pause hint counts 1 to {MAX_RETENTION_SECONDS} seconds"
    return None
