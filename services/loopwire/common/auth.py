"""API keys (stored as sha256 hashes) to tenants, and each tenant's limits.

Shared by every service that clients call: the gateway and the harness take the same file,
so a key names one tenant everywhere. Inference is called by services only, with a service
token (``loopwire.common.service_auth``).

Config file, JSON or TOML::

    {"tenants": {"dev": {"key_sha256": ["<hex>"], "requests_per_minute": 600,
                         "tokens_per_minute": 2000000, "concurrent_streams": 32,
                         "safety_mode": "stream-then-cut", "max_priority": 0,
                         "max_retention_seconds": 0}}}

The policy fields are the operator's: a request may ask for a stricter safety mode, a lower
priority or a shorter KV retention, never for more (``loopwire.gateway.policy``).

A key listed under ``disabled_key_sha256`` authenticates but is refused
(PERMISSION_DENIED), so a revoked key gets a clear answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

log = logging.getLogger("loopwire.auth")

ANONYMOUS_TENANT = "default"


@dataclass
class Limits:
    """0 means unlimited."""

    requests_per_minute: float = 0
    tokens_per_minute: float = 0
    concurrent_streams: int = 0


class AuthError(Exception):
    def __init__(self, permission: bool, message: str) -> None:
        super().__init__(message)
        self.permission = permission  # True: PERMISSION_DENIED, False: UNAUTHENTICATED

    @property
    def status_code(self) -> grpc.StatusCode:
        return grpc.StatusCode.PERMISSION_DENIED if self.permission else grpc.StatusCode.UNAUTHENTICATED


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def authorization_header(metadata: Any) -> str:
    """The ``authorization`` metadata value ('' when absent)."""
    return next((str(v) for k, v in metadata or () if k == "authorization"), "")


def bearer_key(header: str) -> str:
    """The key of a ``Bearer <key>`` header ('' when the header is not one)."""
    scheme, _, key = header.partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


def write_private_file(path: str | Path, text: str) -> None:
    """A secret (key, token, key file) readable by its owner only."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others, not even briefly
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    path.chmod(0o600)  # an existing file keeps its old mode through O_CREAT


SAFETY_MODE_NAMES = ("stream-then-cut", "buffer-until-pass", "off")


@dataclass
class Policy:
    """What the operator grants a tenant; '' safety mode means the gateway's --safety-mode."""

    safety_mode: str = ""
    max_priority: int = 0
    max_retention_seconds: int = 0


@dataclass
class Tenant:
    name: str
    limits: Limits
    policy: Policy = field(default_factory=Policy)


def _policy(name: str, spec: dict[str, Any]) -> Policy:
    mode = str(spec.get("safety_mode", ""))
    if mode and mode not in SAFETY_MODE_NAMES:
        raise ValueError(f"tenant {name!r}: safety_mode must be one of {', '.join(SAFETY_MODE_NAMES)}")
    policy = Policy(mode, int(spec.get("max_priority", 0)), int(spec.get("max_retention_seconds", 0)))
    if policy.max_retention_seconds < 0:
        raise ValueError(f"tenant {name!r}: max_retention_seconds must be >= 0")
    return policy


class Authenticator:
    """Maps ``authorization: Bearer <key>`` metadata to a tenant."""

    def __init__(self, tenants: dict[str, Tenant], keys: dict[str, str], disabled: set[str], anonymous: bool) -> None:
        self.tenants = tenants
        self._keys = keys  # sha256 hex -> tenant name
        self._disabled = disabled
        self.anonymous = anonymous

    @classmethod
    def open(cls) -> Authenticator:
        """Anonymous development mode (``--insecure-dev``): every caller is tenant 'default'."""
        log.warning("INSECURE DEV MODE: accepting unauthenticated requests as tenant %r", ANONYMOUS_TENANT)
        return cls({ANONYMOUS_TENANT: Tenant(ANONYMOUS_TENANT, Limits())}, {}, set(), anonymous=True)

    @classmethod
    def from_file(cls, path: str | Path) -> Authenticator:
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        tenants: dict[str, Tenant] = {}
        keys: dict[str, str] = {}
        disabled: set[str] = set()
        for name, spec in (data.get("tenants") or {}).items():
            tenants[name] = Tenant(
                name,
                Limits(
                    requests_per_minute=float(spec.get("requests_per_minute", 0)),
                    tokens_per_minute=float(spec.get("tokens_per_minute", 0)),
                    concurrent_streams=int(spec.get("concurrent_streams", 0)),
                ),
                _policy(name, spec),
            )
            for digest in spec.get("key_sha256", []):
                keys[digest.lower()] = name
            for digest in spec.get("disabled_key_sha256", []):
                keys[digest.lower()] = name
                disabled.add(digest.lower())
        return cls(tenants, keys, disabled, anonymous=False)

    def authenticate(self, metadata: tuple[tuple[str, str | bytes], ...] | None) -> Tenant:
        header = authorization_header(metadata)
        if not header:
            if self.anonymous:
                return self.tenants[ANONYMOUS_TENANT]
            raise AuthError(False, "missing 'authorization: Bearer <key>' metadata")
        key = bearer_key(header)
        if not key:
            raise AuthError(False, "authorization metadata must be 'Bearer <key>'")
        digest = hash_key(key)
        # Looking up a hash (not the key) leaks nothing useful through timing.
        name = self._keys.get(digest)
        if name is None:
            if self.anonymous:
                return self.tenants[ANONYMOUS_TENANT]
            raise AuthError(False, "unknown API key")
        if digest in self._disabled:
            raise AuthError(True, f"API key of tenant {name!r} is disabled")
        return self.tenants[name]


def create_dev_config(path: str | Path) -> str:
    """Write a config with one development tenant; return its plaintext key (shown once)."""
    key = "lw-dev-" + secrets.token_urlsafe(24)
    config = {
        "tenants": {
            "dev": {
                "key_sha256": [hash_key(key)],
                "requests_per_minute": 6000,
                "tokens_per_minute": 50_000_000,
                "concurrent_streams": 256,
                "max_retention_seconds": 900,  # the harness's KV hold while a session waits for approval
            }
        }
    }
    write_private_file(path, json.dumps(config, indent=2) + "\n")
    return key
