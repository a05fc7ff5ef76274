"""GET /v1/models through the real mesh: each entry carries the served model's context window and
capabilities, the same as the gateway's GetModel answers, and the Codex catalog entries that
Codex reads (so it plans with the real window instead of "Model metadata ... not found")."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
from pathlib import Path

import grpc
import pytest
from api_mesh import KEYS, start_api_mesh, start_extra_api
from openai import OpenAI
from required import missing

from loopwire.v1 import gateway_pb2, gateway_pb2_grpc

pytestmark = [pytest.mark.e2e]

CODEX = Path(__file__).resolve().parents[1] / "codex" / "node_modules" / ".bin" / "codex"


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-models"))
    yield m
    m.mesh.stop()


@pytest.fixture(scope="module")
def served(api) -> gateway_pb2.GetModelResponse:
    """The gateway's own answer, asked over gRPC."""
    with grpc.insecure_channel(api.mesh.gateway) as channel:
        return gateway_pb2_grpc.GatewayServiceStub(channel).GetModel(
            gateway_pb2.GetModelRequest(), metadata=(("authorization", f"Bearer {KEYS['alpha']}"),), timeout=30)


def get(api, path: str, key: str | None = KEYS["alpha"]) -> tuple[int, dict]:
    host, port = api.api.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", path, headers={"authorization": f"Bearer {key}"} if key else {})
    reply = conn.getresponse()
    body = json.loads(reply.read())
    conn.close()
    return reply.status, body


def test_served_model_is_known(served):
    assert served.name and served.context_length > 0 and served.tool_call_format


def test_model_entries_carry_the_gateways_limits_and_capabilities(api, served):
    status, listing = get(api, "/v1/models")
    assert status == 200 and listing["object"] == "list"
    [entry] = listing["data"]
    assert entry["id"] == "loopwire" and entry["object"] == "model" and entry["owned_by"] == "loopwire"
    assert entry["context_window"] == served.context_length
    assert entry["max_output_tokens"] == served.context_length
    caps = entry["capabilities"]
    assert caps["tools"] is True and caps["streaming"] is True and caps["parallel_tool_calls"] is True
    assert caps["tool_call_format"] == served.tool_call_format
    assert caps["image_input"] is False and caps["reasoning_effort"] is False
    status, one = get(api, "/v1/models/loopwire")
    assert status == 200 and one == entry
    # The openai SDK still reads it, the extra fields kept.
    model = OpenAI(base_url=api.base_url, api_key=KEYS["alpha"], max_retries=0).models.retrieve("loopwire")
    assert model.id == "loopwire" and model.model_extra["context_window"] == served.context_length


def test_codex_catalog_entries(api, served):
    _, listing = get(api, "/v1/models")
    [info] = listing["models"]
    assert info["slug"] == info["display_name"] == "loopwire"
    assert info["context_window"] == info["max_context_window"] == served.context_length
    assert info["visibility"] == "list" and info["supported_in_api"] is True
    assert info["supports_parallel_tool_calls"] is True and info["input_modalities"] == ["text"]
    assert info["supported_reasoning_levels"] == [] and info["default_reasoning_level"] is None
    policy = info["truncation_policy"]
    assert policy["mode"] == "tokens" and 0 < policy["limit"] <= served.context_length // 4


def test_unknown_model_and_bad_keys(api):
    status, body = get(api, "/v1/models/gpt-9")
    assert status == 404 and body["error"]["code"] == "model_not_found"
    for path in ("/v1/models", "/v1/models/loopwire"):
        assert get(api, path, key="wrong")[0] == 401
        assert get(api, path, key=None)[0] == 401
        assert get(api, path, key=KEYS["revoked"])[0] in (401, 403)


def test_codex_reads_the_model_metadata(api, served, tmp_path):
    """Codex asks GET {base_url}/models for a provider whose key comes from an auth command."""
    if not CODEX.exists():
        missing("Codex CLI not installed: scripts/install_tools.sh runs npm ci in tests/codex")
    proc, address = start_extra_api(api, [{"text": "Hello from loopwire."}], "codex-models-api")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "loopwire"\nmodel_provider = "loopwire"\n\n[model_providers.loopwire]\nname = "loopwire"\n'
        f'base_url = "http://{address}/v1"\nwire_api = "responses"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n\n"
        f'[model_providers.loopwire.auth]\ncommand = "printf"\nargs = ["{KEYS["alpha"]}"]\n')
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CODEX_HOME": str(home)}
    try:
        out = subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "Say hello"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    finally:
        proc.terminate()
        proc.wait(15)
    both = out.stdout + out.stderr
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Hello from loopwire." in out.stdout
    assert "Model metadata for" not in both and "failed to decode models response" not in both, both[-3000:]
    cache = json.loads((home / "models_cache.json").read_text())  # what Codex took from GET /models
    [info] = [m for m in cache["models"] if m["slug"] == "loopwire"]
    assert info["context_window"] == served.context_length
