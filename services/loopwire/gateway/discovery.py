"""Where the inference replicas are: a static list, or every address a DNS name has.

``--inference`` takes ``host:port,host:port`` (static) or a gRPC-style DNS target:
``dns:///name:port`` asks the system resolver (a Kubernetes headless Service name), and
``dns://server:port/name:port`` asks that DNS server (any port). The router re-resolves the
name periodically: a name's A and AAAA records are its replicas.

A name that does not exist or has no address is an answer (no replicas: the router drains
what it had and says so); a resolver that does not answer is not (the router keeps what it had).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.resolver


class DiscoveryError(Exception):
    """The resolver did not answer (timeout, refused, no server): the replica set is unknown."""


@dataclass(frozen=True)
class DnsName:
    name: str
    port: int
    nameserver: str = ""  # "" = the system resolver; else an IP
    nameserver_port: int = 53

    def __str__(self) -> str:
        server = f"{_join(self.nameserver, self.nameserver_port)}" if self.nameserver else ""
        return f"dns://{server}/{self.name}:{self.port}"

    async def resolve(self, timeout_s: float = 2.0) -> list[str]:
        """Every ``host:port`` the name has (IPv6 in brackets), sorted; [] when it has none."""
        if self.nameserver:
            hosts = await self._ask_server(timeout_s)
        else:
            hosts = await self._ask_system(timeout_s)
        return sorted({_join(h, self.port) for h in hosts})

    async def _ask_server(self, timeout_s: float) -> list[str]:
        resolver = dns.asyncresolver.Resolver(configure=False)
        resolver.nameservers = [self.nameserver]
        resolver.port = self.nameserver_port
        resolver.lifetime = timeout_s
        resolver.cache = None
        hosts: list[str] = []
        for rdtype in ("A", "AAAA"):
            try:
                answer = await resolver.resolve(self.name, rdtype, search=False)
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                continue
            except (dns.exception.Timeout, dns.resolver.NoNameservers) as e:
                raise DiscoveryError(f"{self}: the resolver did not answer ({type(e).__name__}: {e})") from None
            hosts += [r.to_text() for r in answer]
        return hosts

    async def _ask_system(self, timeout_s: float) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(self.name, self.port, type=socket.SOCK_STREAM), timeout_s)
        except socket.gaierror as e:
            if e.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
                return []
            raise DiscoveryError(f"{self}: the resolver did not answer ({e})") from None
        except TimeoutError:
            raise DiscoveryError(f"{self}: the resolver did not answer within {timeout_s:.0f} s") from None
        return [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]


def parse_inference(spec: str) -> list[str] | DnsName:
    """A static list of ``host:port`` or a DnsName; ValueError says what is wrong."""
    spec = spec.strip()
    if not spec.startswith("dns:"):
        addresses = [a.strip() for a in spec.split(",") if a.strip()]
        if not addresses:
            raise ValueError("--inference: at least one host:port (or a dns:///name:port target) is needed")
        return addresses
    rest = spec.removeprefix("dns:")
    if not rest.startswith("//"):
        raise ValueError(f"--inference {spec!r}: write dns:///name:port or dns://server:port/name:port")
    authority, _, target = rest[2:].partition("/")
    name, port = _split(target, f"--inference {spec!r}: the name")
    if not port:
        raise ValueError(f"--inference {spec!r}: the replicas' port is needed (dns:///name:port)")
    if not authority:
        return DnsName(name, port)
    server, server_port = _split(authority, f"--inference {spec!r}: the DNS server")
    try:
        ipaddress.ip_address(server)
    except ValueError:
        raise ValueError(f"--inference {spec!r}: the DNS server must be an IP address, not {server!r}") from None
    return DnsName(name, port, server, server_port or 53)


def _split(hostport: str, what: str) -> tuple[str, int]:
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
    if not host:
        raise ValueError(f"{what} is empty")
    try:
        port = int(port_text) if port_text else 0
    except ValueError:
        raise ValueError(f"{what}: {port_text!r} is not a port") from None
    if not 0 <= port < 65536:
        raise ValueError(f"{what}: port {port} is out of range")
    return host, port


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
