"""grpcurl against a live mesh, exactly as clients/grpcurl/README.md shows it: list services
through reflection, describe a method, call GetStatus, drive Run and Converse from JSON files.
Harness and gateway calls carry the tenant key, inference calls the service token; reflection
and health need neither."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "clients" / "grpcurl"


@pytest.fixture(scope="module")
def grpcurl() -> str:
    found = shutil.which("grpcurl") or str(Path.home() / "go/bin/grpcurl")
    if not Path(found).exists():
        if os.environ.get("CI"):
            pytest.fail("grpcurl is not installed (scripts/install_tools.sh installs it)")
        pytest.skip("grpcurl is not installed (run scripts/install_tools.sh)")
    return found


def _grpcurl(binary: str, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [binary, "-plaintext", *args], input=stdin, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, f"grpcurl {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
    return proc.stdout


def _refused(binary: str, *args: str, stdin: str | None = None) -> str:
    """grpcurl's stderr for a call that must end UNAUTHENTICATED."""
    proc = subprocess.run(
        [binary, "-plaintext", *args], input=stdin, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0, proc.stdout
    assert "Code: Unauthenticated" in proc.stderr, proc.stderr
    return proc.stderr


def _key(mesh) -> str:
    return f"authorization: Bearer {mesh.api_key}"


def _token(mesh) -> str:
    """The README's `$(cat .state/service-token)`, for this mesh's state dir."""
    return f"authorization: Bearer {(Path(mesh.state_dir) / 'service-token').read_text().strip()}"


def _json_stream(text: str) -> list[dict]:
    """grpcurl prints one pretty JSON object per streamed message."""
    decoder, events, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        obj, i = decoder.raw_decode(text, i)
        events.append(obj)
    return events


def test_list_services_through_reflection(grpcurl: str, mesh) -> None:
    for address, service in (
        (mesh.harness, "loopwire.v1.HarnessService"),
        (mesh.gateway, "loopwire.v1.GatewayService"),
        (mesh.inference[0], "loopwire.v1.InferenceService"),
    ):
        listed = set(_grpcurl(grpcurl, address, "list").split())
        assert {service, "grpc.health.v1.Health"} <= listed, (address, listed)
    methods = _grpcurl(grpcurl, mesh.harness, "list", "loopwire.v1.HarnessService").split()
    assert sorted(methods) == [
        "loopwire.v1.HarnessService.GetSession",
        "loopwire.v1.HarnessService.ListSessions",
        "loopwire.v1.HarnessService.Run",
    ]


def test_describe_a_service_and_a_message(grpcurl: str, mesh) -> None:
    service = _grpcurl(grpcurl, mesh.gateway, "describe", "loopwire.v1.GatewayService")
    assert (
        "rpc Converse ( stream .loopwire.v1.ConverseRequest ) returns ( stream .loopwire.v1.ConverseResponse );"
        in service
    )
    message = _grpcurl(grpcurl, mesh.inference[0], "describe", "loopwire.v1.GetStatusResponse")
    assert "uint32 vocab_size = 16;" in message


def test_describe_a_method(grpcurl: str, mesh) -> None:
    # grpcio-reflection alone cannot resolve method symbols (grpc/grpc#34743); the servers'
    # reflection must look a method up through its service (common/grpc_server.py).
    method = _grpcurl(grpcurl, mesh.harness, "describe", "loopwire.v1.HarnessService.Run")
    assert method.startswith("loopwire.v1.HarnessService.Run is a method:")
    assert "rpc Run ( stream .loopwire.v1.RunRequest ) returns ( stream .loopwire.v1.RunResponse )" in method


def test_get_status(grpcurl: str, mesh) -> None:
    status = json.loads(
        _grpcurl(
            grpcurl, "-H", _token(mesh), "-d", "{}", mesh.inference[0], "loopwire.v1.InferenceService/GetStatus"
        )
    )
    assert status["vocab_size"] == 100279  # the dummy model: cl100k and <|im_start|>, <|im_end|>
    assert len(status["tokenizer_digest"]) == 64
    assert int(status["kv_blocks_total"]) > 0
    assert status["replica_id"]


def test_run_stream_from_json_file(grpcurl: str, mesh) -> None:
    request = (EXAMPLES / "run.json").read_text()
    events = _json_stream(
        _grpcurl(
            grpcurl, "-H", _key(mesh), "-d", "@", mesh.harness, "loopwire.v1.HarnessService/Run", stdin=request
        )
    )
    kinds = [next(k for k in e if k not in ("session_id", "sequence")) for e in events]
    assert kinds[0] == "started" and kinds[-1] == "completed", kinds
    assert events[0]["started"]["replay_source"] == "grpcurl example (clients/grpcurl/run.json)"
    assert [e["tool_call_ended"]["output"] for e in events if "tool_call_ended" in e] == ["hello\n"]
    assert kinds.count("turn_completed") == 2
    assert events[-1]["completed"]["final_text"] == "Done: the shell said hello."
    # The stored sessions, as the README lists and fetches them.
    session_id = events[0]["session_id"]
    listed = json.loads(
        _grpcurl(
            grpcurl, "-H", _key(mesh), "-d", '{"page_size": 5}', mesh.harness,
            "loopwire.v1.HarnessService/ListSessions",
        )
    )
    assert session_id in {s["session_id"] for s in listed["sessions"]}
    got = json.loads(
        _grpcurl(
            grpcurl, "-H", _key(mesh), "-d", json.dumps({"session_id": session_id}), mesh.harness,
            "loopwire.v1.HarnessService/GetSession",
        )
    )
    assert got["items"]


def test_converse_stream_from_json_file(grpcurl: str, mesh) -> None:
    request = (EXAMPLES / "converse.json").read_text()
    events = _json_stream(
        _grpcurl(
            grpcurl,
            "-H",
            f"authorization: Bearer {mesh.api_key}",
            "-d",
            "@",
            mesh.gateway,
            "loopwire.v1.GatewayService/Converse",
            stdin=request,
        )
    )
    kinds = [next(k for k in e if k != "response_id") for e in events]
    assert kinds[0] == "created" and kinds[-1] == "completed", kinds
    text = "".join(e["text_delta"]["text"] for e in events if "text_delta" in e)
    assert text == "Hello there, friend."
    usage = events[-1]["completed"]["usage"]
    assert int(usage["output_tokens"]) > 0 and int(usage["input_tokens"]) > 0


def test_converse_without_a_key_is_unauthenticated(grpcurl: str, mesh) -> None:
    proc = subprocess.run(
        [grpcurl, "-plaintext", "-d", "@", mesh.gateway, "loopwire.v1.GatewayService/Converse"],
        input=(EXAMPLES / "converse.json").read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "Unauthenticated" in proc.stderr


def test_harness_without_a_key_is_unauthenticated(grpcurl: str, mesh) -> None:
    _refused(grpcurl, "-d", "@", mesh.harness, "loopwire.v1.HarnessService/Run",
             stdin=(EXAMPLES / "run.json").read_text())
    _refused(grpcurl, "-d", "{}", mesh.harness, "loopwire.v1.HarnessService/ListSessions")
    # The service token is inference's credential, not a tenant key.
    _refused(grpcurl, "-H", _token(mesh), "-d", "{}", mesh.harness, "loopwire.v1.HarnessService/ListSessions")
    health = json.loads(_grpcurl(grpcurl, mesh.harness, "grpc.health.v1.Health/Check"))
    assert health["status"] == "SERVING"


def test_inference_without_the_service_token_is_unauthenticated(grpcurl: str, mesh) -> None:
    stderr = _refused(grpcurl, "-d", "{}", mesh.inference[0], "loopwire.v1.InferenceService/GetStatus")
    assert "service token" in stderr
    # A tenant key is not the service token: clients never call inference.
    _refused(grpcurl, "-H", _key(mesh), "-d", "{}", mesh.inference[0], "loopwire.v1.InferenceService/GetStatus")
    # Health and reflection stay open.
    health = json.loads(_grpcurl(grpcurl, mesh.inference[0], "grpc.health.v1.Health/Check"))
    assert health["status"] == "SERVING"
    assert "loopwire.v1.InferenceService" in _grpcurl(grpcurl, mesh.inference[0], "list").split()
