"""The generated clients in Python, Go, TypeScript, Rust and Java: each example is built and
run against a live mesh with the tenant key in $LOOPWIRE_API_KEY (and refuses, in one line,
to run without it), and the committed generated code matches what scripts/clients.sh makes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "clients"
IN_CI = bool(os.environ.get("CI"))
BUILD_TIMEOUT = 900
RUN_TIMEOUT = 240


def _tool(name: str) -> str:
    """A toolchain binary; outside CI a missing one skips the test, in CI it fails it."""
    found = shutil.which(name) or next(
        (str(p) for p in (Path.home() / "go/bin" / name, Path.home() / ".cargo/bin" / name) if p.exists()),
        None,
    )
    if found is None:
        if IN_CI:
            pytest.fail(f"{name} is not installed (scripts/install_tools.sh installs the client toolchains)")
        pytest.skip(f"{name} is not installed (run scripts/install_tools.sh)")
    return found


def _run(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-4000:]}"
    return proc.stdout


def _run_example(mesh, cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run an example with the mesh's key; first check it refuses, in one clear line, to run without one."""
    keyless = {k: v for k, v in os.environ.items() if k != "LOOPWIRE_API_KEY"}
    proc = subprocess.run(
        cmd, cwd=cwd, env={**keyless, **(env or {})}, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert proc.returncode == 2, f"{' '.join(cmd)} without a key exited {proc.returncode}:\n{proc.stderr[-2000:]}"
    assert proc.stdout == "", proc.stdout[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("LOOPWIRE_API_KEY is not set"), proc.stderr[-2000:]
    return _run(cmd, cwd, RUN_TIMEOUT, env={**(env or {}), "LOOPWIRE_API_KEY": mesh.api_key})


def _check_run_output(output: str, language: str, completed_marker: str) -> None:
    """Every example prints the run's events: the replay came through intact and the run completed."""
    assert f"{language} client example (built in)" in output, output[-2000:]
    assert completed_marker in output, output[-2000:]


def test_python_client_runs_a_replay_without_the_server_package(mesh) -> None:
    # Importing anything of the server package `loopwire` fails: the client stands alone.
    code = (
        "import runpy, sys; sys.modules['loopwire'] = None; "
        "sys.argv = ['example.py', sys.argv[1]]; runpy.run_path('example.py', run_name='__main__')"
    )
    output = _run_example(mesh, [sys.executable, "-c", code, mesh.harness], CLIENTS / "python")
    events = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    kinds = [next(k for k in e if k not in ("sessionId", "sequence")) for e in events]
    assert kinds[0] == "started" and kinds[-1] == "completed"
    assert events[0]["started"]["replaySource"] == "python client example (built in)"
    sequences = [int(e.get("sequence", 0)) for e in events]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    ended = [e["toolCallEnded"] for e in events if "toolCallEnded" in e]
    assert [(t["callId"], t["output"]) for t in ended] == [("call_1", "hello\n")]
    assert events[-1]["completed"]["finalText"] == "Done: the shell said hello."


def test_python_client_depends_on_grpcio_and_protobuf_only() -> None:
    import tomllib

    project = tomllib.loads((CLIENTS / "python" / "pyproject.toml").read_text())["project"]
    assert sorted(d.split(">")[0].split("=")[0] for d in project["dependencies"]) == ["grpcio", "protobuf"]


def test_go_client(mesh) -> None:
    go = _tool("go")
    _run([go, "build", "-o", "bin/example", "./cmd/example"], CLIENTS / "go", BUILD_TIMEOUT)
    output = _run_example(mesh, [str(CLIENTS / "go/bin/example"), mesh.harness], CLIENTS / "go")
    _check_run_output(output, "go", '"completed":')


def test_node_client(mesh) -> None:
    npm, node = _tool("npm"), _tool("node")
    node_dir = CLIENTS / "node"
    if not (node_dir / "node_modules").is_dir():
        _run([npm, "ci", "--no-audit", "--no-fund"], node_dir, BUILD_TIMEOUT)
    _run([npm, "run", "--silent", "build"], node_dir, BUILD_TIMEOUT)
    output = _run_example(mesh, [node, "dist/example.js"], node_dir, env={"LOOPWIRE_HARNESS": mesh.harness})
    _check_run_output(output, "node", '"completed":')


def test_rust_client(mesh) -> None:
    cargo = _tool("cargo")
    _tool("protoc")
    rust_dir = CLIENTS / "rust"
    _run([cargo, "build", "--locked", "--quiet", "--bin", "example"], rust_dir, BUILD_TIMEOUT)
    output = _run_example(mesh, [str(rust_dir / "target/debug/example"), mesh.harness], rust_dir)
    _check_run_output(output, "rust", "Completed(RunCompleted")


def test_java_client(mesh) -> None:
    mvn, java = _tool("mvn"), _tool("java")
    java_dir = CLIENTS / "java"
    _run([mvn, "-q", "-B", "--no-transfer-progress", "package", "-DskipTests"], java_dir, BUILD_TIMEOUT)
    output = _run_example(
        mesh,
        [java, "-jar", "target/loopwire-client-example.jar"],
        java_dir,
        env={"LOOPWIRE_HARNESS": mesh.harness},
    )
    _check_run_output(output, "java", "completed {")


def test_committed_generated_clients_are_fresh(tmp_path: Path) -> None:
    """scripts/clients.sh run on a copy of the tree regenerates exactly the committed code."""
    _tool("buf")
    _tool("protoc-gen-go")
    _tool("protoc-gen-go-grpc")
    node_modules = CLIENTS / "node" / "node_modules"
    if not node_modules.is_dir():
        pytest.skip("clients/node/node_modules is missing (scripts/install_tools.sh runs npm ci)")
    for name in ("protos", "scripts", "buf.yaml", "buf.gen.yaml"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    generated = [
        "clients/python/loopwire_client/v1",
        "clients/go/gen",
        "clients/node/protos",
        "clients/node/src/generated",
    ]
    for rel in ("clients/node/package.json", *generated):
        dst = tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (ROOT / rel).is_dir() else shutil.copy)(ROOT / rel, dst)
    (tmp_path / "clients/node/node_modules").symlink_to(node_modules)
    path = os.pathsep.join([str(Path.home() / "go/bin"), os.environ.get("PATH", "")])
    _run(
        ["bash", "scripts/clients.sh", "generate"],
        tmp_path,
        BUILD_TIMEOUT,
        env={"PYTHON": sys.executable, "PATH": path},
    )

    def files(base: Path) -> dict[Path, bytes]:
        return {
            p.relative_to(base): p.read_bytes()
            for p in base.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }

    for rel in generated:
        committed, fresh = files(ROOT / rel), files(tmp_path / rel)
        assert sorted(fresh) == sorted(committed), rel
        stale = [str(name) for name in fresh if fresh[name] != committed[name]]
        assert not stale, f"{rel}: stale generated files {stale}; run scripts/clients.sh"
