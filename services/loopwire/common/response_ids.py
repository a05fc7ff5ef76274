"""Response ids that name the gateway holding the response, so a continuation can find it.

A gateway keeps its conversations in its own memory, so ``previous_response_id`` works only on
the gateway that made the id. With ``--gateway-id g1`` a gateway makes ``resp_g1_<16 hex>``;
whatever fronts several gateways (the api service with ``--gateway g1=host:port,g2=...``) sends a
continuation to the gateway its id names, and a new conversation to any. Without an id a
gateway makes ``resp_<16 hex>``, as a single gateway always has.
"""

from __future__ import annotations

import re
import secrets

GATEWAY_ID = re.compile(r"[a-z0-9]{1,16}")
_TAGGED = re.compile(r"resp_([a-z0-9]{1,16})_[0-9a-f]{16}")


def check_gateway_id(gateway_id: str) -> str:
    """``gateway_id`` when it is 1 to 16 lowercase letters and digits; ValueError otherwise."""
    if not GATEWAY_ID.fullmatch(gateway_id):
        raise ValueError(f"gateway id {gateway_id!r} must be 1 to 16 lowercase letters and digits")
    return gateway_id


def new_response_id(gateway_id: str = "") -> str:
    suffix = secrets.token_hex(8)
    return f"resp_{gateway_id}_{suffix}" if gateway_id else f"resp_{suffix}"


def gateway_of(response_id: str) -> str:
    """The gateway id a response id names; "" for an untagged or foreign id."""
    match = _TAGGED.fullmatch(response_id)
    return match.group(1) if match else ""
