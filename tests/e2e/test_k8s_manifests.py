"""The Kubernetes manifests (infra/k8s), rendered and checked without a cluster.

The Go module infra/k8s/validate renders every kustomize target in process and strictly decodes
each object into the k8s.io/api types (unknown fields are errors), then checks the deployment
invariants (gRPC health probes, grace period vs drain deadline, GPUs, headless Service, budgets).
Here the rendered pods are checked against the services themselves: every LOOPWIRE_* setting is
a real flag with a valid value, readiness asks for the services' real names, and the secret
placeholders fail closed."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from loopwire import cli
from loopwire.common import grpc_server, service_auth
from loopwire.common.auth import Authenticator, AuthError
from loopwire.v1 import gateway_pb2, harness_pb2, inference_pb2

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
VALIDATOR = REPO / "infra/k8s/validate"
GO_TESTS = {"TestRendersAndDecodesStrictly", "TestProbesAreGRPCHealthOnTheServingPort",
            "TestGracePeriodCoversTheDrainDeadline", "TestGPURequests", "TestInferenceHeadlessService",
            "TestSelectorsAndDisruptionBudgets", "TestReferencesResolve", "TestTelemetryWiring"}
TARGETS = ("base", "overlays-cpu")
SERVICE_NAMES = {
    "inference": inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name,
    "gateway": gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"].full_name,
    "harness": harness_pb2.DESCRIPTOR.services_by_name["HarnessService"].full_name,
}


def _go() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("go is not installed (scripts/install_tools.sh expects the Go toolchain)")
        pytest.skip("go is not installed (the manifest validator is a Go test)")
    return found


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`go test` of the validator, with the rendered YAML of every target left in a directory."""
    out = tmp_path_factory.mktemp("k8s")
    drain = inspect.signature(grpc_server.serve).parameters["drain_seconds"].default
    env = {**os.environ, "LOOPWIRE_K8S_RENDER_DIR": str(out), "LOOPWIRE_DRAIN_SECONDS": str(drain),
           # Modules come from the cache scripts/install_tools.sh filled (go mod download): never
           # from the network at test time, and go.sum must already pin them.
           "GOPROXY": "off", "GOFLAGS": "-mod=readonly"}
    proc = subprocess.run([_go(), "test", "-count=1", "-v", "."], cwd=VALIDATOR, env=env,
                          capture_output=True, text=True, timeout=840)
    return proc, out


def _pods(rendered: Path) -> list[tuple[str, dict, dict[str, dict]]]:
    """(target, pod template, ConfigMaps by name) for every workload of every target."""
    pods = []
    for target in TARGETS:
        docs = [d for d in yaml.safe_load_all((rendered / f"{target}.yaml").read_text()) if d]
        maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        pods += [(target, d["spec"]["template"], maps) for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    return pods


def _container_env(container: dict, maps: dict[str, dict]) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]].get("data", {}))
    for var in container.get("env", []):
        env[var["name"]] = var.get("value", "<from the pod>")
    return env


def test_go_validator_renders_and_strictly_validates_every_target(validated):
    proc, rendered = validated
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    passed = set(re.findall(r"^--- PASS: (\w+) ", proc.stdout, re.M))
    assert passed == GO_TESTS, f"not run or not passed: {GO_TESTS - passed}"
    for test in GO_TESTS - {"TestRendersAndDecodesStrictly"}:
        for target in ("base", "overlays/cpu"):
            assert f"--- PASS: {test}/{target} " in proc.stdout
    for target in TARGETS:
        kinds = {d["kind"] for d in yaml.safe_load_all((rendered / f"{target}.yaml").read_text()) if d}
        assert {"StatefulSet", "Deployment", "Service", "PodDisruptionBudget", "ConfigMap", "Secret"} <= kinds


def test_every_setting_is_a_real_flag_with_a_valid_value(validated, monkeypatch):
    _, rendered = validated
    pods = _pods(rendered)
    assert {p["metadata"]["labels"]["app.kubernetes.io/component"] for _, p, _ in pods} == set(SERVICE_NAMES)
    for target, pod, maps in pods:
        for container in pod["spec"]["containers"]:
            command = container["command"]
            assert command[0] == "loopwire" and command[1] in SERVICE_NAMES, command
            service = command[1]
            settings = {k: v for k, v in _container_env(container, maps).items() if k.startswith("LOOPWIRE_")}
            for key in [k for k in os.environ if k.startswith("LOOPWIRE_")]:
                monkeypatch.delenv(key)
            for key, value in settings.items():
                monkeypatch.setenv(key, value)
            # Flags read LOOPWIRE_<FLAG> when the parser is built: build it with the pod's environment.
            parser = cli.service_parser(service)
            flags = {opt: action for action in parser._actions for opt in action.option_strings}
            for key, value in settings.items():
                flag = "--" + key.removeprefix("LOOPWIRE_").lower().replace("_", "-")
                where = f"{target} {service}: {key}={value}"
                assert flag in flags, f"{where}: `loopwire {service}` has no {flag}"
                action = flags[flag]
                if isinstance(action, argparse._StoreTrueAction):
                    assert value == "1", f"{where}: a switch is turned on by 1"
                elif action.choices is not None:
                    assert value in action.choices, f"{where}: not one of {sorted(action.choices)}"
                elif action.type is not None and value != "<from the pod>":
                    action.type(value)  # int/float flags: raises on a bad number
            args = parser.parse_args(command[2:] + container.get("args", []))
            assert args.listen.endswith(f":{container['ports'][0]['containerPort']}")


def test_readiness_asks_for_the_services_real_names_and_health_needs_no_token(validated):
    _, rendered = validated
    for _, pod, _ in _pods(rendered):
        component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        (container,) = pod["spec"]["containers"]
        assert container["readinessProbe"]["grpc"]["service"] == SERVICE_NAMES[component]
        assert "service" not in container["livenessProbe"]["grpc"]  # "" = the whole server
    # The kubelet probes without credentials: health must stay open behind the service token.
    assert any("/grpc.health.v1.Health/Check".startswith(p) for p in service_auth.OPEN_PREFIXES)


def test_secret_placeholders_fail_closed(validated, tmp_path):
    _, rendered = validated
    docs = [d for d in yaml.safe_load_all((rendered / "base.yaml").read_text()) if d and d["kind"] == "Secret"]
    secrets = {d["metadata"]["name"]: d for d in docs}
    token = tmp_path / "token"
    token.write_text(secrets["loopwire-service-token"]["stringData"]["token"])
    with pytest.raises(service_auth.ServiceAuthError, match="at least 16 characters"):
        service_auth.read_token_file(token)
    auth = tmp_path / "auth.json"
    auth.write_text(secrets["loopwire-auth"]["stringData"]["auth.json"])
    authenticator = Authenticator.from_file(auth)
    with pytest.raises(AuthError):
        authenticator.authenticate((("authorization", "Bearer lw-any-key-at-all"),))
    assert secrets["loopwire-tls"]["type"] == "kubernetes.io/tls"
