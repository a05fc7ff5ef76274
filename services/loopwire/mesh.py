"""Start the three services as real subprocesses on loopback — for `loopwire up`,
embedded replays and the end-to-end tests alike.

Each service is its own process (`python -m loopwire.cli <service>`), so what runs here
is what runs in production; the mesh waits until every one answers its health check.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports: every socket stays bound until all are chosen, so the
    kernel cannot hand one port out twice (two services of one mesh told the same port would race
    for it, and a client would reach the wrong one)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


# The development API key `loopwire up` makes, beside the state; `loopwire run` reads it.
DEV_KEY_FILE = "dev-api-key"


# The development CA and certificates of `loopwire up --tls`, under the state directory.
TLS_DIR = "tls"

# Held (flock) by the `loopwire up` that owns a state directory, for as long as it runs.
LOCK_FILE = "mesh.lock"


class StateDirBusy(Exception):
    """Another `loopwire up` holds the state directory."""


def lock_state_dir(state_dir: str | Path) -> IO[str]:
    """Hold ``<state_dir>/mesh.lock`` exclusively while the returned file stays open (the lock
    goes with the process): a second `loopwire up` on the same directory would otherwise rewrite
    the key, auth file and service token the running mesh uses, locking its clients out."""
    path = Path(state_dir)
    path.mkdir(parents=True, exist_ok=True)
    lock = open(path / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - held by the caller
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip()
        lock.close()
        raise StateDirBusy(f"{path} is in use by a running `loopwire up`" + (f" (pid {holder})" if holder else "")
                           + "; stop it first or pass another --state-dir") from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def use_client_certificate(state_dir: str | Path) -> bool:
    """Speak mutual TLS with the client certificate `loopwire up --tls` left, if there is one."""
    from loopwire.common import tls

    directory = Path(state_dir) / TLS_DIR
    if not (directory / "client.pem").exists():
        return False
    tls.use(tls.load(str(directory / "client.pem"), str(directory / "client.key"), str(directory / "ca.pem")))
    return True


def read_dev_key(state_dir: str | Path) -> str:
    try:
        return (Path(state_dir) / DEV_KEY_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return ""


@dataclass
class Mesh:
    """Addresses of a running mesh and the processes behind it."""

    harness: str
    gateway: str
    inference: list[str]
    api_key: str
    state_dir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    api: str = ""  # host:port of the OpenAI-compatible front door, when started
    gateways: list[str] = field(default_factory=list)  # every gateway process, ``gateway`` first

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM in reverse start order (harness first), so streams drain top-down."""
        for name in reversed(list(self.processes)):
            proc = self.processes[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.processes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_healthy(address: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Poll grpc.health.v1 (over mutual TLS when this process has TLS files) until SERVING."""
    from loopwire.common import tls

    deadline = time.monotonic() + timeout
    last = ""
    files = tls.active()
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {address} exited with code {proc.returncode}")
        try:
            channel = (grpc.secure_channel(address, files.channel_credentials()) if files
                       else grpc.insecure_channel(address))
            with channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.RpcError as e:
            last = e.code().name
        time.sleep(0.1)
    raise TimeoutError(f"{address} not healthy after {timeout:.0f}s ({last})")


def wait_http_healthy(address: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Wait for an HTTP service's ``GET /healthz`` (the api service speaks HTTP, not gRPC health)."""
    import http.client
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process for {address} exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://{address}/healthz", timeout=1.0) as reply:
                if reply.status == 200:
                    return
        except (OSError, http.client.HTTPException):
            pass  # not up yet, or another service answers on the port: the process's exit says why
        time.sleep(0.1)
    raise TimeoutError(f"{address} not healthy after {timeout:.0f}s")


def _pump(stream: IO[bytes], prefix: str, sink: IO[str]) -> None:
    for raw in iter(stream.readline, b""):
        sink.write(f"{prefix} {raw.decode(errors='replace').rstrip()}\n")
        sink.flush()


def start_mesh(
    state_dir: Path,
    *,
    ports: dict[str, int] | None = None,
    inference_replicas: int = 1,
    extra_args: dict[str, list[str]] | None = None,
    log: IO[str] | None = None,
    env: dict[str, str] | None = None,
    use_tls: bool = False,
    api: bool = False,
    allow_replay: bool = True,
    gateways: int = 1,
) -> Mesh:
    """Start inference replica(s), gateway and harness; return when all are healthy.

    ``log`` receives every line the services print, prefixed with the service name;
    without it their output goes to files in ``state_dir/logs``. ``use_tls`` makes a
    development CA in ``state_dir/tls`` and runs every hop over mutual TLS; this process then
    speaks TLS too (with the client certificate), as `loopwire run` does when it finds one.
    ``allow_replay`` lets the gateway accept recorded output (replays, tests, benchmarks);
    `loopwire up` passes it only when asked. ``gateways`` > 1 starts that many gateway
    processes on the same replicas, with ids g0, g1, ...; the api fronts them all (each
    continuation to the gateway its response id names), the harness uses g0.
    """
    from loopwire.common import tls
    from loopwire.common.auth import create_dev_config, write_private_file
    from loopwire.common.service_auth import create_token_file

    state_dir.mkdir(parents=True, exist_ok=True)
    ports = dict(ports or {})
    extra_args = extra_args or {}
    auth_path = state_dir / "auth.json"
    api_key = create_dev_config(str(auth_path))
    write_private_file(state_dir / DEV_KEY_FILE, api_key + "\n")
    token_path = state_dir / "service-token"
    create_token_file(token_path)
    tls_args: list[str] = []
    if use_tls:
        pki = tls.create_dev_pki(state_dir / TLS_DIR)
        tls_args = ["--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]), "--tls-ca", str(pki["ca"])]
        use_client_certificate(state_dir)
    spare = iter(free_ports(inference_replicas + gateways + 2))
    inference_addrs = []
    for i in range(inference_replicas):
        port = ports.get("inference", 0) + i if ports.get("inference") else next(spare)
        inference_addrs.append(f"127.0.0.1:{port}")
    gateway_addrs = [f"127.0.0.1:{ports.get('gateway') or next(spare)}"]
    gateway_addrs += [f"127.0.0.1:{next(spare)}" for _ in range(gateways - 1)]
    gateway = gateway_addrs[0]
    harness = f"127.0.0.1:{ports.get('harness') or next(spare)}"
    commands: dict[str, list[str]] = {}
    for i, addr in enumerate(inference_addrs):
        name = "inference" if inference_replicas == 1 else f"inference-{i}"
        commands[name] = ["inference", "--listen", addr, "--replica-id", name, "--service-token-file", str(token_path),
                          *extra_args.get("inference", [])]
    for i, addr in enumerate(gateway_addrs):
        commands["gateway" if i == 0 else f"gateway-{i}"] = [
            "gateway", "--listen", addr, "--inference", ",".join(inference_addrs),
            "--auth-config", str(auth_path), "--service-token-file", str(token_path),
            *(["--gateway-id", f"g{i}"] if gateways > 1 else []),
            *(["--allow-replay"] if allow_replay else []), *extra_args.get("gateway", []),
        ]
    commands["harness"] = [
        "harness", "--listen", harness, "--gateway", gateway, "--state-dir", str(state_dir),
        "--auth-config", str(auth_path), *extra_args.get("harness", []),
    ]
    for args in commands.values():
        args[1:1] = tls_args
    api_address = ""
    if api:  # `loopwire api`, the OpenAI-compatible front door: a gRPC client of the gateway
        api_address = f"127.0.0.1:{ports.get('api') or next(spare)}"
        fronted = gateway if gateways == 1 else ",".join(f"g{i}={a}" for i, a in enumerate(gateway_addrs))
        commands["api"] = ["api", *tls_args, "--listen", api_address, "--gateway", fronted,
                           "--auth-config", str(auth_path), *extra_args.get("api", [])]
    proc_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    mesh = Mesh(harness, gateway, inference_addrs, api_key, state_dir, api=api_address, gateways=gateway_addrs)
    (state_dir / "logs").mkdir(exist_ok=True)
    try:
        for name, args in commands.items():
            out: IO[bytes] | int
            if log is None:
                out = open(state_dir / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
            else:
                out = subprocess.PIPE
            proc = subprocess.Popen(
                [sys.executable, "-m", "loopwire.cli", *args],
                stdout=out, stderr=subprocess.STDOUT, env=proc_env, start_new_session=True,
            )
            mesh.processes[name] = proc
            if log is not None and proc.stdout is not None:
                threading.Thread(target=_pump, args=(proc.stdout, f"[{name:>11}]", log), daemon=True).start()
            address = args[args.index("--listen") + 1]
            (wait_http_healthy if name == "api" else wait_healthy)(address, proc=proc)
    except BaseException:
        mesh.stop()
        raise
    return mesh
