"""Replica discovery by DNS against a real resolver: dnsmasq, started by the test on a loopback
port, answering from a hosts file the test rewrites (SIGHUP reloads it) while sessions run.

Inference replicas are real simulated-engine servers on 127.0.0.2, .3, .4 (one port, as pods
behind a headless Service), the gateway a real gateway servicer whose router resolves the name.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from required import missing

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.gateway.discovery import DiscoveryError, DnsName, parse_inference
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.mesh import free_port
from loopwire.v1 import common_pb2, gateway_pb2

pytestmark = [pytest.mark.timeout(180)]
NAME = "inference.loopwire.test"
DNSMASQ = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if os.path.exists("/usr/sbin/dnsmasq") else None)


class Dnsmasq:
    """dnsmasq answering only from ``hosts`` for *.test (authoritative there: a missing record is
    NXDOMAIN or no data, never a refusal), with no upstream, no cache of misses, TTL 0."""

    def __init__(self, root: Path) -> None:
        self.hosts = root / "hosts"
        self.hosts.write_text("")
        self.port = free_port()
        self.log = (root / "dnsmasq.log").open("wb")
        user = ["--user=root"] if os.geteuid() == 0 else []  # it reads the hosts file again on SIGHUP
        self.proc = subprocess.Popen(
            [DNSMASQ, "--keep-in-foreground", "--conf-file=/dev/null", f"--port={self.port}",
             "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts", "--local=/test/",
             f"--addn-hosts={self.hosts}", "--no-negcache", "--local-ttl=0", "--log-queries",
             "--log-facility=-", "--pid-file=", *user], stdout=self.log, stderr=subprocess.STDOUT)

    async def ready(self) -> None:
        """Answering (before that, a SIGHUP would kill it)."""
        deadline = time.monotonic() + 20
        while True:
            try:
                await self.name("ready.test", 1).resolve(timeout_s=0.5)
                return
            except DiscoveryError:
                assert self.proc.poll() is None, "dnsmasq exited: see dnsmasq.log"
                assert time.monotonic() < deadline, "dnsmasq did not start answering"
                await asyncio.sleep(0.05)

    def name(self, name: str = NAME, port: int = 0) -> DnsName:
        return DnsName(name, port, "127.0.0.1", self.port)

    async def publish(self, records: dict[str, list[str]]) -> None:
        """Replace every record, reload, and wait until dnsmasq answers with them."""
        self.hosts.write_text("".join(f"{ip} {name}\n" for name, ips in records.items() for ip in ips))
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        for name, ips in records.items():
            want = sorted(f"[{ip}]:1" if ":" in ip else f"{ip}:1" for ip in ips)
            while True:
                try:
                    if await self.name(name, 1).resolve() == want:
                        break
                except DiscoveryError:
                    pass
                assert time.monotonic() < deadline, f"dnsmasq did not serve {records}"
                await asyncio.sleep(0.05)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
async def dns(tmp_path):
    if DNSMASQ is None:
        missing("dnsmasq not found: `make tools` installs Debian's dnsmasq-base (scripts/install_tools.sh)")
    server = Dnsmasq(tmp_path)
    await server.ready()
    yield server
    server.close()


def test_the_inference_flag_takes_static_lists_and_dns_targets():
    assert parse_inference("127.0.0.1:1, 10.0.0.2:2") == ["127.0.0.1:1", "10.0.0.2:2"]
    assert parse_inference("dns:///inference.ns.svc:50053") == DnsName("inference.ns.svc", 50053)
    assert parse_inference("dns://127.0.0.1:5353/x.test:7") == DnsName("x.test", 7, "127.0.0.1", 5353)
    assert parse_inference("dns://[::1]/x.test:7") == DnsName("x.test", 7, "::1", 53)
    for bad in ["", "dns:x:1", "dns:///x.test", "dns://resolver.example:53/x:1", "dns:///x:notaport"]:
        with pytest.raises(ValueError, match="--inference"):
            parse_inference(bad)


async def test_a_name_resolves_to_all_its_records_and_follows_the_hosts_file(dns):
    await dns.publish({NAME: ["127.0.0.2", "127.0.0.3", "::1"], "other.test": ["127.0.0.9"]})
    assert await dns.name(port=50053).resolve() == ["127.0.0.2:50053", "127.0.0.3:50053", "[::1]:50053"]
    await dns.publish({"other.test": ["127.0.0.9"]})
    assert await dns.name(port=50053).resolve() == []  # no such name: an answer, not an error
    with pytest.raises(DiscoveryError, match="did not answer"):  # nobody listens there
        await DnsName(NAME, 1, "127.0.0.1", free_port()).resolve(timeout_s=0.5)


async def start_replicas(hosts: list[str]) -> tuple[int, list, list]:
    """Simulated-engine replicas on each host, all on one port."""
    for _ in range(20):
        port = free_port()
        servers, engines = [], []
        try:
            for host in hosts:
                engine = build_engine(EngineOptions(engine="simulated", replica_id=f"sim-{host}", time_scale=1.0))
                server = grpc_server.make_server()
                add_servicer(server, engine)
                server.add_insecure_port(f"{host}:{port}")
                await engine.start()
                await server.start()
                servers.append(server)
                engines.append(engine)
            return port, servers, engines
        except RuntimeError:  # the port was taken on one of the hosts: try another
            for server in servers:
                await server.stop(0)
            for engine in engines:
                await engine.close()
    raise RuntimeError("no port free on every replica host")


def user(text: str) -> common_pb2.Item:
    return common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER,
                                                      content=[common_pb2.ContentPart(text=text)]))


def create(text: str) -> gateway_pb2.ConverseRequest:
    return gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user("count")], replay=common_pb2.ReplayOutput(text=text), safety_mode=gateway_pb2.SAFETY_MODE_OFF))


async def until_end(call) -> list[gateway_pb2.ConverseResponse]:  # noqa: ANN001
    events = []
    while True:
        event = await call.read()
        assert event is not grpc.aio.EOF
        events.append(event)
        if event.WhichOneof("event") in ("completed", "failed"):
            return events


async def wait_for(condition, what: str, timeout: float = 30) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_replicas_join_and_leave_by_dns_while_streams_run(dns):
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    port, servers, engines = await start_replicas(hosts)
    await dns.publish({NAME: hosts[:2]})
    gw = await start_gateway(dns.name(port=port), routing="round-robin", poll_interval_s=0.1,
                             discovery_interval_s=0.1, drain_timeout_s=120, model_timeout_s=20,
                             authenticator=Authenticator.open(),
                             config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    gateway, router, stub = gw.servicer, gw.router, gw.stub
    addresses = lambda: sorted(r.address for r in router.replicas if not r.draining)  # noqa: E731
    try:
        assert addresses() == [f"{h}:{port}" for h in hosts[:2]]
        # Each replica has answered a status poll (its id is known, not just its address).
        await wait_for(lambda: all(r.replica_id for r in router.replicas), "the first status polls")
        # Two long generations, one on each listed replica.
        text = "counting slowly " * 150
        calls = [stub.Converse() for _ in range(2)]
        created = []
        for call in calls:
            await call.write(create(text))
            created.append((await call.read()).created.replica_id)
            assert (await call.read()).WhichOneof("event") == "text_delta"
        assert sorted(created) == [f"sim-{h}" for h in hosts[:2]]

        # .2 leaves the name and .4 joins it, mid-stream.
        await dns.publish({NAME: hosts[1:]})
        await wait_for(lambda: addresses() == [f"{h}:{port}" for h in hosts[1:]], "the new replica set")
        leaving = next(r for r in router.replicas if r.address.startswith(hosts[0]))
        assert leaving.draining and leaving.sessions == 1  # its stream runs on
        for call in calls:  # both streams finish where they started: nothing dropped, nothing failed over
            events = await asyncio.wait_for(until_end(call), 60)
            assert events[-1].WhichOneof("event") == "completed", events[-1]
        assert gateway.metrics.failovers == 0
        # New sessions only go to listed replicas.
        fresh = []
        for _ in range(4):
            call = stub.Converse()
            await call.write(create("short"))
            events = await until_end(call)
            fresh.append(events[0].created.replica_id)
            await call.done_writing()
        assert set(fresh) == {f"sim-{h}" for h in hosts[1:]}
        # Once its last stream closes, the drained replica is let go.
        for call in calls:
            await call.done_writing()
        await wait_for(lambda: leaving not in router.replicas, "the drained replica to be closed")

        # The name resolves to nothing: a clear, retryable error, not a hang.
        await dns.publish({"other.test": ["127.0.0.9"]})
        await wait_for(lambda: not addresses(), "every replica to leave")
        call = stub.Converse()
        await call.write(create("short"))
        failed = (await until_end(call))[-1].failed.error
        assert failed.code == common_pb2.ERROR_CODE_UNAVAILABLE and failed.retryable
        assert f"{NAME}:{port} resolved to no address" in failed.message
        # And it comes back.
        await dns.publish({NAME: [hosts[2]]})
        await wait_for(lambda: addresses() == [f"{hosts[2]}:{port}"], "the replica to return")
        await wait_for(lambda: all(r.healthy and r.replica_id for r in router.replicas), "a status poll")
        await call.write(create("short"))
        events = await until_end(call)
        assert events[-1].WhichOneof("event") == "completed" and events[0].created.replica_id == f"sim-{hosts[2]}"
        await call.done_writing()
    finally:
        await gw.close()
        for server in servers:
            await server.stop(0)
        for engine in engines:
            await engine.close()


def test_the_gateway_refuses_to_start_on_a_name_without_address(dns, tmp_path):
    """`loopwire gateway --inference dns://...` on an empty name: a clear message and a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "gateway", "--insecure-dev", "--listen", "127.0.0.1:0",
         "--inference", f"dns://127.0.0.1:{dns.port}/{NAME}:50053", "--replica-wait", "2"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0
    assert f"{NAME}:50053 resolved to no address" in done.stderr + done.stdout
