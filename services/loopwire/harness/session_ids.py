"""Session ids are a tenant's own namespace.

A client may choose its session ids, so two tenants may choose the same one; the store keys a
session by ``<tenant tag>~<id>`` and clients only ever see ``<id>``. A foreign id therefore
names nothing for the caller: every RPC answers it exactly as it answers an id never used,
and "already exists" can only ever be about the caller's own session ('~' never occurs in an
id a client sends, see validation.session_id).
"""

from __future__ import annotations

import hashlib


def tenant_tag(tenant: str) -> str:
    return hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def scoped(tenant: str, session_id: str) -> str:
    """The store's key of a tenant's session id."""
    return f"{tenant_tag(tenant)}~{session_id}"


def public(store_id: str) -> str:
    """The id the client knows (idempotent: a public id has no '~')."""
    return store_id.split("~", 1)[1] if "~" in store_id else store_id
