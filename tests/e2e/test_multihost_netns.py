"""The mesh across hosts: network namespaces joined by veth pairs to a bridge stand for four
machines — two inference hosts, a gateway host and a harness host — with real addresses, mutual
TLS on every hop (certificates naming the hosts' IPs), the service token to inference, tenant keys
at the harness and the gateway, and DNS from the test's dnsmasq (the gateway resolves one name to
both replicas, as a Kubernetes headless Service). The test process reaches the hosts through one
more veth (it is the client).

Two phases: concurrent replays spread over both hosts by cache-aware routing (hit rate and load
reported); then the replica serving a long session is SIGKILLed mid-session, the session fails
over (or fails with a retryable error and completes on ResumeSession) with the recorded transcript.
Needs root (namespaces, veth, bridge); everything is created by the test and torn down after it.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from required import missing
from session_files import session_path

from loopwire.client import run_task
from loopwire.common import tls
from loopwire.common.auth import create_dev_config
from loopwire.common.grpc_server import service_channel
from loopwire.common.recorded import load_session
from loopwire.common.service_auth import create_token_file
from loopwire.mesh import wait_healthy
from loopwire.replay import start_for
from loopwire.v1 import harness_pb2, harness_pb2_grpc, inference_pb2, inference_pb2_grpc

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

DNSMASQ = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if os.path.exists("/usr/sbin/dnsmasq") else None)
HOSTS = ("inf-a", "inf-b", "gw", "hs")
INFERENCE_NAME = "inference.loopwire.test"
PORTS = {"inference": 50053, "gateway": 50052, "harness": 50051}


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _why_not() -> str:
    if os.geteuid() != 0:
        return "the multi-host test needs root (network namespaces, veth pairs, a bridge)"
    if shutil.which("ip") is None:
        missing("the multi-host test needs iproute2 (`ip`; scripts/install_tools.sh installs it)")
    probe = f"lwprobe{os.getpid()}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return "the multi-host test needs `ip netns` (network namespaces are not available here)"
    _ip("netns", "del", probe, check=False)
    if DNSMASQ is None:
        missing("the multi-host test needs dnsmasq (scripts/install_tools.sh installs dnsmasq-base)")
    return ""


@dataclass
class Hosts:
    """Namespaces named ``<prefix>-<host>`` on one /24, the bridge in its own namespace."""

    prefix: str
    subnet: str  # "10.231.N"
    addresses: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    root_veth: str = ""

    @property
    def client_ip(self) -> str:
        return f"{self.subnet}.1"

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def up(self) -> None:
        switch = self.ns("sw")
        _ip("netns", "add", switch)
        self.created.append(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        # The test process: a veth from the root namespace into the switch.
        self.root_veth = f"{self.prefix}c"
        _ip("link", "add", self.root_veth, "type", "veth", "peer", "name", "pc", "netns", switch)
        _ip("addr", "add", f"{self.client_ip}/24", "dev", self.root_veth)
        _ip("link", "set", self.root_veth, "up")
        self._plug(switch, "pc")
        for i, host in enumerate(HOSTS):
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self.created.append(ns)
            address = f"{self.subnet}.{i + 2}"
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", switch)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self._plug(switch, f"p{i}")
            self.addresses[host] = address

    def _plug(self, switch: str, port: str) -> None:
        _ip("-n", switch, "link", "set", port, "master", "br0")
        _ip("-n", switch, "link", "set", port, "up")

    def down(self) -> None:
        if self.root_veth:
            _ip("link", "del", self.root_veth, check=False)
        for ns in reversed(self.created):
            _ip("netns", "del", ns, check=False)


def _free_subnet() -> str:
    used = _ip("-4", "addr").stdout + _ip("-4", "route").stdout
    for _ in range(50):
        subnet = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
        if f"{subnet}." not in used:
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 for the test network")


@dataclass
class Cluster:
    hosts: Hosts
    root: Path
    api_key: str
    token: str
    dns_port: int
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def address(self, name: str) -> str:
        """host:port of "gateway", "harness" or an inference host ("inf-a", "inf-b")."""
        host, port = {"gateway": ("gw", PORTS["gateway"]), "harness": ("hs", PORTS["harness"])}.get(
            name, (name, PORTS["inference"]))
        return f"{self.hosts.addresses[host]}:{port}"

    def start(self, name: str, host: str, args: list[str]) -> subprocess.Popen:
        log = (self.root / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts.ns(host), sys.executable, "-m", "loopwire.cli", *args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True)
        self.processes[name] = proc
        return proc

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(self.root.glob("*.log")))

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.processes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = _why_not()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("netns")
    hosts = Hosts(f"lw{os.getpid() % 100000}", _free_subnet())
    previous_tls = tls.active()
    c: Cluster | None = None
    try:
        hosts.up()
        pki = tls.create_dev_pki(root / "tls", hosts=list(hosts.addresses.values()))
        tls_args = ["--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]), "--tls-ca", str(pki["ca"])]
        # This process is the client on the fifth "host": it presents the client certificate.
        tls.use(tls.load(str(pki["client_cert"]), str(pki["client_key"]), str(pki["ca"])))
        api_key = create_dev_config(root / "auth.json")
        token = create_token_file(root / "service-token")
        (root / "hosts").write_text("".join(f"{hosts.addresses[h]} {INFERENCE_NAME}\n" for h in ("inf-a", "inf-b")))
        c = Cluster(hosts, root, api_key, token, dns_port=5353)
        # The resolver, on the client's address (reachable from every host).
        assert DNSMASQ is not None  # _why_not skipped otherwise
        dns = subprocess.Popen(
            [DNSMASQ, "--keep-in-foreground", "--conf-file=/dev/null", f"--port={c.dns_port}",
             f"--listen-address={hosts.client_ip}", "--bind-interfaces", "--no-resolv", "--no-hosts", "--local=/test/",
             f"--addn-hosts={root / 'hosts'}", "--no-negcache", "--local-ttl=0", "--log-facility=-",
             "--pid-file=", "--user=root"],
            stdout=(root / "dnsmasq.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        c.processes["dnsmasq"] = dns
        token_args = ["--service-token-file", str(root / "service-token")]
        for host in ("inf-a", "inf-b"):
            c.start(host, host, ["inference", "--listen", c.address(host), "--replica-id", host,
                                 "--engine", "simulated", "--time-scale", "0", *token_args, *tls_args])
        for host in ("inf-a", "inf-b"):
            wait_healthy(c.address(host), proc=c.processes[host])
        c.start("gateway", "gw", [
            "gateway", "--listen", c.address("gateway"),
            "--inference", f"dns://{hosts.client_ip}:{c.dns_port}/{INFERENCE_NAME}:{PORTS['inference']}",
            "--routing", "cache-aware", "--auth-config", str(root / "auth.json"), "--allow-replay", *token_args, *tls_args])
        wait_healthy(c.address("gateway"), proc=c.processes["gateway"])
        c.start("harness", "hs", ["harness", "--listen", c.address("harness"), "--gateway", c.address("gateway"),
                                  "--state-dir", str(root / "harness"), "--auth-config", str(root / "auth.json"),
                                  *tls_args])
        wait_healthy(c.address("harness"), proc=c.processes["harness"])
        yield c
    except BaseException:
        if c is not None:
            print(c.logs())
        raise
    finally:
        if c is not None:
            c.stop()
        hosts.down()
        tls.use(previous_tls)
        leftovers = [ns for ns in _ip("netns", "list").stdout.split() if ns.startswith(hosts.prefix + "-")]
        assert not leftovers, f"namespaces left behind: {leftovers}"


def _status(c: Cluster, host: str) -> inference_pb2.GetStatusResponse:
    files = tls.active()
    assert files is not None
    with grpc.secure_channel(c.address(host), files.channel_credentials()) as channel:
        return inference_pb2_grpc.InferenceServiceStub(channel).GetStatus(
            inference_pb2.GetStatusRequest(), timeout=5, metadata=(("authorization", f"Bearer {c.token}"),))


async def _resume(c: Cluster, session_id: str) -> tuple[bool, str]:
    async with service_channel(c.address("harness")) as channel:
        stub = harness_pb2_grpc.HarnessServiceStub(channel)
        request = harness_pb2.RunRequest(resume=harness_pb2.ResumeSession(session_id=session_id))
        async for event in stub.Run(iter([request]), timeout=300,
                                    metadata=(("authorization", f"Bearer {c.api_key}"),)):
            kind = event.WhichOneof("event")
            if kind == "completed":
                return True, ""
            if kind == "failed":
                return False, event.failed.error.message
    return False, "stream ended"


async def _items(c: Cluster, session_id: str) -> harness_pb2.GetSessionResponse:
    async with service_channel(c.address("harness")) as channel:
        return await harness_pb2_grpc.HarnessServiceStub(channel).GetSession(
            harness_pb2.GetSessionRequest(session_id=session_id), timeout=30,
            metadata=(("authorization", f"Bearer {c.api_key}"),))


def test_cache_aware_routing_spreads_sessions_over_hosts(cluster):
    c = cluster
    session = load_session(session_path("marshmallow-1867"))
    before = {h: _status(c, h) for h in ("inf-a", "inf-b")}

    async def replay_all():
        return await asyncio.gather(*(
            run_task(c.address("harness"), start_for(session, "stateful"), timeout=300, api_key=c.api_key)
            for _ in range(6)))

    t0 = time.monotonic()
    results = asyncio.run(replay_all())
    wall = time.monotonic() - t0
    assert all(r.completed for r in results), [r.error for r in results]
    turns = [p for r in results for p in r.turns]
    assert len(turns) == 6 * len(session.turns)
    prompt = sum(p.usage.input_tokens for p in turns)
    cached = sum(p.usage.cached_input_tokens for p in turns)
    after = {h: _status(c, h) for h in ("inf-a", "inf-b")}
    load = {h: after[h].prefix_cache_queried_tokens - before[h].prefix_cache_queried_tokens for h in after}
    hits = {h: after[h].prefix_cache_hit_tokens - before[h].prefix_cache_hit_tokens for h in after}
    mean = sum(load.values()) / len(load)
    print(f"\nmulti-host routing: 6 sessions x {len(session.turns)} turns in {wall:.1f}s; "
          f"gateway-reported hit rate {cached / prompt:.3f}; per host prompt tokens {load}, "
          f"engine hits {hits}; load max/mean {max(load.values()) / mean:.2f}")
    # Both hosts served, and every turn after a session's first reused its host's cache.
    assert min(load.values()) > 0
    assert max(load.values()) / mean < 1.75
    for r in results:
        assert all(p.usage.cached_input_tokens > 0 for p in r.turns[1:])


def test_killing_the_serving_replica_mid_session_fails_over_and_the_session_completes(cluster):
    c = cluster
    recorded = load_session(session_path("sqlfluff__sqlfluff-2419"))
    queried = {h: _status(c, h).prefix_cache_queried_tokens for h in ("inf-a", "inf-b")}
    killed: list[str] = []
    turns = 0

    def on_event(event: harness_pb2.RunResponse) -> None:
        nonlocal turns
        turns += event.WhichOneof("event") == "turn_completed"
        if turns == 5 and not killed:
            # The replica this session sticks to is the one whose work grew since it started.
            grew = {h: _status(c, h).prefix_cache_queried_tokens - queried[h] for h in queried}
            victim = max(grew, key=lambda h: grew[h])
            os.killpg(c.processes[victim].pid, signal.SIGKILL)
            c.processes[victim].wait()
            killed.append(victim)

    t0 = time.monotonic()
    first = asyncio.run(run_task(c.address("harness"), start_for(recorded, "stateful"), on_event=on_event,
                                 timeout=300, api_key=c.api_key))
    assert killed, "the session ended before its fifth turn"
    survivor = next(h for h in ("inf-a", "inf-b") if h not in killed)
    resumed = ""
    if not first.completed:
        # A clean, retryable failure is allowed; the session then completes on resume.
        assert re.search(r"unavailable|retry", first.error, re.I), first.error
        ok, error = asyncio.run(_resume(c, first.session_id))
        assert ok, error
        resumed = " (failed cleanly, completed on resume)"
    wall = time.monotonic() - t0
    got = asyncio.run(_items(c, first.session_id))
    assert list(got.items) == recorded.items()
    assert got.session.turn_count == len(recorded.turns)
    assert _status(c, survivor).prefix_cache_queried_tokens > queried[survivor]
    c.processes["gateway"].send_signal(signal.SIGTERM)  # its counters go to the log at shutdown
    c.processes["gateway"].wait(30)
    log = (c.root / "gateway.log").read_text()
    moved = {name: int(re.findall(rf"'{name}': (\d+)", log)[-1]) for name in ("failovers", "relinks")}
    if first.completed:
        # No retryable failure reached the client: the gateway moved the session, mid-generation
        # (a failover) or, when it saw the stream end while tools ran, at the next turn (a relink).
        assert moved["failovers"] + moved["relinks"] >= 1, moved
    print(f"\nmulti-host failover: killed {killed[0]} after turn 5 of {len(recorded.turns)}; "
          f"session completed on {survivor}{resumed} in {wall:.1f}s; gateway {moved}")
