"""A real mesh with the OpenAI front door (`loopwire api`) for the api tests: the dummy model,
and a tenants file of our own so keys of two tenants, a revoked key and a rate-limited tenant exist."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from loopwire.common.auth import hash_key
from loopwire.mesh import Mesh, free_port, start_mesh, wait_http_healthy

KEYS = {"alpha": "lw-test-alpha", "beta": "lw-test-beta", "revoked": "lw-test-revoked", "slow": "lw-test-slow"}
MAX_BODY = 256 * 1024


@dataclass
class ApiMesh:
    mesh: Mesh
    base_url: str
    state: Path

    @property
    def api(self) -> str:
        return self.mesh.api

    def log(self) -> str:
        return (self.state / "logs" / "api.log").read_text(errors="replace")


def tenants_file(path: Path) -> Path:
    config = {"tenants": {
        "alpha": {"key_sha256": [hash_key(KEYS["alpha"])], "concurrent_streams": 64},
        "beta": {"key_sha256": [hash_key(KEYS["beta"])], "disabled_key_sha256": [hash_key(KEYS["revoked"])]},
        "slow": {"key_sha256": [hash_key(KEYS["slow"])], "requests_per_minute": 2},
    }}
    path.write_text(json.dumps(config))
    return path


def start_api_mesh(state: Path, extra_args: dict[str, list[str]] | None = None, gateways: int = 1) -> ApiMesh:
    """``extra_args`` per service go after ours (a later flag wins); ``gateways``: see ``start_mesh``."""
    auth = str(tenants_file(state.parent / f"{state.name}-tenants.json"))
    extra = extra_args or {}
    mesh = start_mesh(state, api=True, extra_args={
        "inference": ["--model", "dummy:0", *extra.get("inference", [])],
        "gateway": ["--auth-config", auth, *extra.get("gateway", [])],  # the last --auth-config wins
        "api": ["--auth-config", auth, "--max-body-bytes", str(MAX_BODY), *extra.get("api", [])],
    }, gateways=gateways)
    return ApiMesh(mesh, f"http://{mesh.api}/v1", state)


def start_extra_api(mesh: ApiMesh, replay: list[dict], name: str) -> tuple[subprocess.Popen, str]:
    """A second api process on the same gateway that replays recorded turns (deterministic clients)."""
    path = mesh.state / f"{name}-replay.json"
    path.write_text(json.dumps(replay))
    address = f"127.0.0.1:{free_port()}"
    log = open(mesh.state / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwire.cli", "api", "--listen", address, "--gateway", mesh.mesh.gateway,
         "--auth-config", str(mesh.state.parent / f"{mesh.state.name}-tenants.json"), "--replay", str(path)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    wait_http_healthy(address, proc=proc)
    return proc, address


# The events that end a response on a stream (SSE or WebSocket mode).
ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


def sdk(api: ApiMesh, tenant: str = "alpha"):
    """The official openai client of ``tenant`` against the api, without retries."""
    from openai import OpenAI

    return OpenAI(base_url=api.base_url, api_key=KEYS[tenant], max_retries=0)


def until_end(conn) -> list:
    """An SDK WebSocket connection's events up to the one that ends the response."""
    events = []
    for event in conn:
        events.append(event)
        if event.type in ENDS:
            return events
    raise AssertionError("connection closed before the response ended")
