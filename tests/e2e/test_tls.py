"""Mutual TLS on every hop: `loopwire up --tls` runs harness → gateway → inference over TLS with
its own CA; plaintext, certificate-less and foreign-CA callers are turned away at the handshake;
plaintext on a non-loopback address is refused at start."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from loopwire.client import run_task
from loopwire.common import tls
from loopwire.mesh import start_mesh
from loopwire.v1 import common_pb2, harness_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


def health(address: str, credentials: grpc.ChannelCredentials | None) -> str:
    """The health status, or the gRPC error code name when the call does not get through."""
    channel = grpc.secure_channel(address, credentials) if credentials else grpc.insecure_channel(address)
    try:
        with channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    except grpc.RpcError as e:
        return e.code().name


@pytest.fixture(scope="module")
def tls_mesh(tmp_path_factory):
    state = tmp_path_factory.mktemp("tls-mesh")
    mesh = start_mesh(state, use_tls=True, extra_args={"inference": ["--engine", "simulated", "--time-scale", "0"]})
    yield mesh
    mesh.stop()
    tls.use(None)


async def test_a_run_crosses_every_hop_over_mutual_tls(tls_mesh):
    start = harness_pb2.StartTask(task="say hi", max_turns=2, replay=harness_pb2.ReplayScript(
        source="tls test", turns=[harness_pb2.ReplayTurn(output=common_pb2.ReplayOutput(text="hi over TLS"))]))
    result = await run_task(tls_mesh.harness, start, api_key=tls_mesh.api_key, timeout=120)
    assert result.completed, result.error
    assert result.final_text == "hi over TLS" and result.turns[0].usage.output_tokens > 0


def test_every_service_refuses_callers_without_a_certificate_of_its_ca(tls_mesh, tmp_path):
    client = tls.active()
    assert client is not None
    foreign = tls.create_dev_pki(tmp_path / "other-ca")
    foreign_client = grpc.ssl_channel_credentials(
        root_certificates=client.ca,  # trusts the real servers, but presents a certificate of another CA
        private_key=foreign["client_key"].read_bytes(), certificate_chain=foreign["client_cert"].read_bytes())
    for address in [tls_mesh.harness, tls_mesh.gateway, *tls_mesh.inference]:
        assert health(address, client.channel_credentials()) == "SERVING", address
        assert health(address, None) == "UNAVAILABLE", address  # plaintext never reaches a handler
        assert health(address, grpc.ssl_channel_credentials(root_certificates=client.ca)) == "UNAVAILABLE", address
        assert health(address, foreign_client) == "UNAVAILABLE", address


def test_a_service_refuses_plaintext_on_a_non_loopback_address():
    proc = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "inference", "--listen", "0.0.0.0:0", "--engine", "simulated",
         "--insecure-dev"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "TLS is required" in lines[0], proc.stderr[-2000:]


@pytest.mark.parametrize(("cert", "key", "ca", "message"), [
    ("a.pem", "", "", "missing --tls-key, --tls-ca"),
    ("nope.pem", "nope.key", "nope-ca.pem", "No such file"),
    ("notpem.txt", "notpem.txt", "notpem.txt", "not a PEM file"),
])
def test_bad_tls_flags_end_in_one_line(tmp_path, cert, key, ca, message):
    (tmp_path / "notpem.txt").write_text("hello")
    paths = [str(tmp_path / p) if p else "" for p in (cert, key, ca)]
    with pytest.raises(ValueError, match=message):
        tls.load(*paths)
