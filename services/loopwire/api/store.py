"""The api's own per-tenant store of finished Response objects and their input items, for
``GET``/``DELETE /v1/responses/{id}`` and ``input_items``: the gateway keeps conversations for
``previous_response_id`` but has no RPC to read or delete one, so the shapes a client reads back
are kept here, bounded in memory (entries and bytes per tenant and in all, and an age).

Per process: an api replica serves back what it answered itself. Responses in flight are
registered here too, so ``POST /v1/responses/{id}/cancel`` can reach the stream that runs them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from loopwire.common.auth import Tenant

FINISHED = {"completed", "incomplete", "failed", "cancelled"}


def tenant_key(tenant: Tenant | None, authorization: str) -> str:
    """Whose store: the tenant's name, or, with no tenants file here, a hash of the caller's key
    (the api cannot tell two keys of one tenant apart then, so it never lets one read another's)."""
    if tenant is not None:
        return "t:" + tenant.name
    return "k:" + hashlib.sha256(authorization.encode("utf-8", "replace")).hexdigest()


@dataclass
class Stored:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    size: int
    expires: float


class Canceller(Protocol):
    closed: bool  # the stream is over (a flight whose request task never ran its end is stale then)

    async def cancel(self, response_id: str) -> None: ...


@dataclass
class InFlight:
    """A response being generated for a tenant: its stream (to cancel it), its Response object
    as it stands, whether it will be stored (and so may be read meanwhile), and when it ended."""

    stream: Canceller
    snapshot: Callable[[], dict[str, Any]]
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    final: dict[str, Any] | None = None


class ResponseStore:
    def __init__(self, *, per_tenant: int = 1000, total: int = 16000, bytes_per_tenant: int = 64 * 1024 * 1024,
                 total_bytes: int = 1024 * 1024 * 1024, ttl_s: float = 24 * 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_tenant = per_tenant
        self.total = total
        self.bytes_per_tenant = bytes_per_tenant
        self.total_bytes = total_bytes
        self.stored_bytes = 0
        self.ttl_s = ttl_s
        self._clock = clock
        # (tenant, id) in insertion order = expiry order: the oldest leaves first, by age or by bound.
        self._all: OrderedDict[tuple[str, str], Stored] = OrderedDict()
        self._tenants: dict[str, OrderedDict[str, int]] = {}  # tenant -> its ids (oldest first) -> size
        self._bytes: dict[str, int] = {}
        # Deleted ids, so a deleted response cannot be continued through this api either (bounded alike).
        self._deleted: OrderedDict[tuple[str, str], float] = OrderedDict()
        self.in_flight: dict[tuple[str, str], InFlight] = {}

    def begin(self, tenant: str, response_id: str, flight: InFlight) -> InFlight:
        if len(self.in_flight) >= 256:  # drop flights whose stream ended without their request's end
            for key in [k for k, f in self.in_flight.items() if f.stream.closed]:
                del self.in_flight[key]
        self.in_flight[(tenant, response_id)] = flight
        return flight

    def flight(self, tenant: str, response_id: str) -> InFlight | None:
        flight = self.in_flight.get((tenant, response_id))
        return None if flight is None or flight.stream.closed else flight

    def end(self, tenant: str, response_id: str, response: dict[str, Any] | None,
            input_items: list[dict[str, Any]], *, store: bool) -> None:
        """The response left the gateway: kept when it finished and may be stored (``response``
        None: it never finished, the client or the gateway went away), and no longer in flight."""
        flight = self.in_flight.pop((tenant, response_id), None)
        if store and response is not None and response.get("status") in FINISHED:
            self.put(tenant, response, input_items)
        if flight is not None:
            flight.final = response
            flight.ended.set()

    def __len__(self) -> int:
        return len(self._all)

    def put(self, tenant: str, response: dict[str, Any], input_items: list[dict[str, Any]]) -> bool:
        """Keep a finished response; False when it alone is over the tenant's byte budget."""
        self._expire()
        rid = response["id"]
        size = len(json.dumps(response, separators=(",", ":"))) + len(json.dumps(input_items, separators=(",", ":")))
        if size > min(self.bytes_per_tenant, self.total_bytes) or self.per_tenant <= 0 or self.total <= 0:
            return False
        self._remove((tenant, rid))
        ids = self._tenants.setdefault(tenant, OrderedDict())
        while ids and (len(ids) >= self.per_tenant or self._bytes.get(tenant, 0) + size > self.bytes_per_tenant):
            self._remove((tenant, next(iter(ids))))
        while self._all and (len(self._all) >= self.total or self.stored_bytes + size > self.total_bytes):
            self._remove(next(iter(self._all)))
        self._all[(tenant, rid)] = Stored(response, input_items, size, self._clock() + self.ttl_s)
        self._tenants.setdefault(tenant, OrderedDict())[rid] = size
        self._bytes[tenant] = self._bytes.get(tenant, 0) + size
        self.stored_bytes += size
        return True

    def get(self, tenant: str, response_id: str) -> Stored | None:
        self._expire()
        return self._all.get((tenant, response_id))

    def delete(self, tenant: str, response_id: str) -> bool:
        if self.get(tenant, response_id) is None:
            return False
        self._remove((tenant, response_id))
        self._deleted[(tenant, response_id)] = self._clock() + self.ttl_s
        while len(self._deleted) > self.total:
            self._deleted.popitem(last=False)
        return True

    def deleted(self, tenant: str, response_id: str) -> bool:
        self._expire()
        return (tenant, response_id) in self._deleted

    def _remove(self, key: tuple[str, str]) -> None:
        stored = self._all.pop(key, None)
        if stored is None:
            return
        tenant, rid = key
        ids = self._tenants[tenant]
        del ids[rid]
        self._bytes[tenant] -= stored.size
        self.stored_bytes -= stored.size
        if not ids:
            del self._tenants[tenant], self._bytes[tenant]

    def _expire(self) -> None:
        now = self._clock()
        while self._all:
            key, first = next(iter(self._all.items()))
            if first.expires > now:
                break
            self._remove(key)
        while self._deleted and next(iter(self._deleted.values())) <= now:
            self._deleted.popitem(last=False)
