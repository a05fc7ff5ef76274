"""The generated clients in Python, Go, TypeScript, Rust and Java: each example is built and
run against a live mesh with the tenant key in $LOOPWIRE_API_KEY (and refuses, in one line,
to run without it); every example prints each event as one line of proto3 canonical JSON, and
the events of each language's run equal the Python example's (the reference: protobuf's own
json_format) once the fields that legitimately differ between two runs are set aside. The
committed generated code matches what scripts/clients.sh makes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from required import missing

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


# JSON string literals; what is left between them must hold no whitespace at all.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_UINT64 = re.compile(r"[0-9]+")
# Differ between two runs of the same replay: ids, positions, clocks, and what the engine's
# prefix cache and cross-session drafter already held when the run came (the mesh is shared).
_RUN_SPECIFIC = {"sessionId", "sequence", "workspace", "replaySource"}
_ENGINE_STATE = {"cachedInputTokens", "draftTokensProposed", "draftTokensAccepted", "verificationSteps"}


def _json_events(output: str, language: str) -> list[dict]:
    """Parse an example's stdout: every line one RunResponse in proto3 canonical JSON."""
    lines = output.splitlines()
    assert lines, f"{language}: no output"
    events = []
    for line in lines:
        assert not re.search(r"\s", _STRING.sub("", line)), f"{language}: whitespace outside strings: {line}"
        event = json.loads(line)
        assert isinstance(event, dict), line
        # uint64 as a decimal string; every *_us field (clock or duration) is a uint64 too.
        assert isinstance(event["sequence"], str) and _UINT64.fullmatch(event["sequence"]), line
        _check_us_fields(event, line)
        events.append(event)
    started = events[0]["started"]
    assert started["replaySource"] == f"{language} client example (built in)", started
    assert started["sessionId"] == events[0]["sessionId"] and started["workspace"].endswith(started["sessionId"])
    assert all(e["sessionId"] == started["sessionId"] for e in events)
    sequences = [int(e["sequence"]) for e in events]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences), sequences
    return events


def _check_us_fields(value: object, line: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("Us"):
                assert isinstance(item, str) and _UINT64.fullmatch(item), f"{key} is not a uint64 string: {line}"
            _check_us_fields(item, line)
    elif isinstance(value, list):
        for item in value:
            _check_us_fields(item, line)


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in _RUN_SPECIFIC and k not in _ENGINE_STATE and not k.endswith("Us")
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


# Events whose presence follows how long a step took, not what the client asked: a prefill that
# outlasts the progress interval reports its progress (a loaded machine, a cold engine).
_TIMING_EVENTS = {"prefillProgress"}


def _comparable(events: list[dict]) -> list[dict]:
    """The events with run-specific fields and timing events set aside and consecutive text deltas
    of a turn joined (how the streamed text is cut into deltas follows decode steps, not the client)."""
    out: list[dict] = []
    for event in map(_strip, events):
        assert isinstance(event, dict)
        if _TIMING_EVENTS & event.keys():
            continue
        delta, last = event.get("textDelta"), out[-1].get("textDelta") if out else None
        if delta is not None and last is not None and last.get("turn") == delta.get("turn"):
            out[-1] = {"textDelta": {**last, "text": last.get("text", "") + delta.get("text", "")}}
        else:
            out.append(event)
    return out


@pytest.fixture(scope="module")
def python_events(mesh) -> list[dict]:
    """The reference run: the Python example, which prints with protobuf's json_format."""
    # Importing anything of the server package `loopwire` fails: the client stands alone.
    code = (
        "import runpy, sys; sys.modules['loopwire'] = None; "
        "sys.argv = ['example.py', sys.argv[1]]; runpy.run_path('example.py', run_name='__main__')"
    )
    output = _run_example(mesh, [sys.executable, "-c", code, mesh.harness], CLIENTS / "python")
    return _json_events(output, "python")


def _check_same_events(output: str, language: str, reference: list[dict]) -> None:
    """The example printed canonical JSON lines carrying the same events as the Python example."""
    ours, theirs = _comparable(_json_events(output, language)), _comparable(reference)
    assert [next(iter(e)) for e in ours] == [next(iter(e)) for e in theirs]
    for i, (mine, python) in enumerate(zip(ours, theirs, strict=True)):
        assert mine == python, f"{language} event {i} differs from python's:\n{mine}\n{python}"


def test_python_client_runs_a_replay_without_the_server_package(python_events: list[dict]) -> None:
    events = python_events
    kinds = [next(k for k in e if k not in ("sessionId", "sequence")) for e in events]
    assert kinds[0] == "started" and kinds[-1] == "completed"
    # The replayed text arrives whole, through deltas of its turn.
    text = {t: "".join(e["textDelta"]["text"] for e in events if e.get("textDelta", {}).get("turn") == t) for t in (1, 2)}
    assert {t: s.rstrip("\n") for t, s in text.items()} == {1: "I will greet from the shell.", 2: "Done: the shell said hello."}
    began = [e["toolCallBegan"]["call"] for e in events if "toolCallBegan" in e]
    assert began == [{"callId": "call_1", "name": "bash", "arguments": '{"command":"echo hello"}'}]
    profiles = [e["turnCompleted"]["profile"] for e in events if "turnCompleted" in e]
    assert [p["finishReason"] for p in profiles] == ["FINISH_REASON_TOOL_CALLS", "FINISH_REASON_STOP"]
    assert events[-1]["completed"]["turns"] == 2
    ended = [e["toolCallEnded"] for e in events if "toolCallEnded" in e]
    assert [(t["callId"], t["output"]) for t in ended] == [("call_1", "hello\n")]
    assert events[-1]["completed"]["finalText"] == "Done: the shell said hello."


def test_python_client_depends_on_grpcio_and_protobuf_only() -> None:
    import tomllib

    project = tomllib.loads((CLIENTS / "python" / "pyproject.toml").read_text())["project"]
    assert sorted(d.split(">")[0].split("=")[0] for d in project["dependencies"]) == ["grpcio", "protobuf"]


def test_go_client(mesh, python_events: list[dict]) -> None:
    go = _tool("go")
    _run([go, "build", "-o", "bin/example", "./cmd/example"], CLIENTS / "go", BUILD_TIMEOUT)
    output = _run_example(mesh, [str(CLIENTS / "go/bin/example"), mesh.harness], CLIENTS / "go")
    _check_same_events(output, "go", python_events)


def test_node_client(mesh, python_events: list[dict]) -> None:
    npm, node = _tool("npm"), _tool("node")
    node_dir = CLIENTS / "node"
    if not (node_dir / "node_modules").is_dir():
        _run([npm, "ci", "--no-audit", "--no-fund"], node_dir, BUILD_TIMEOUT)
    _run([npm, "run", "--silent", "build"], node_dir, BUILD_TIMEOUT)
    output = _run_example(mesh, [node, "dist/example.js"], node_dir, env={"LOOPWIRE_HARNESS": mesh.harness})
    _check_same_events(output, "node", python_events)


def test_rust_client(mesh, python_events: list[dict]) -> None:
    cargo = _tool("cargo")
    _tool("protoc")
    rust_dir = CLIENTS / "rust"
    _run([cargo, "build", "--locked", "--quiet", "--bin", "example"], rust_dir, BUILD_TIMEOUT)
    output = _run_example(mesh, [str(rust_dir / "target/debug/example"), mesh.harness], rust_dir)
    _check_same_events(output, "rust", python_events)


def test_java_client(mesh, python_events: list[dict]) -> None:
    mvn, java = _tool("mvn"), _tool("java")
    java_dir = CLIENTS / "java"
    _run([mvn, "-q", "-B", "--no-transfer-progress", "package", "-DskipTests"], java_dir, BUILD_TIMEOUT)
    output = _run_example(
        mesh,
        [java, "-jar", "target/loopwire-client-example.jar"],
        java_dir,
        env={"LOOPWIRE_HARNESS": mesh.harness},
    )
    _check_same_events(output, "java", python_events)


def test_committed_generated_clients_are_fresh(tmp_path: Path) -> None:
    """scripts/clients.sh run on a copy of the tree regenerates exactly the committed code."""
    _tool("buf")
    _tool("protoc-gen-go")
    _tool("protoc-gen-go-grpc")
    node_modules = CLIENTS / "node" / "node_modules"
    if not node_modules.is_dir():
        missing("clients/node/node_modules is missing (scripts/install_tools.sh runs npm ci)")
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
