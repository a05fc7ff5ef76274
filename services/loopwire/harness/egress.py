"""Network for a command granted ``network=true``: a namespace of its own, and egress only
through an allow-listed HTTP(S) proxy of the harness.

The command never shares the host's network namespace: bwrap gives it a new one holding only
its own loopback, so nothing listening on the host's loopback (the inference port, the
harness itself) can be reached from it. While bwrap waits on ``--block-fd``, the harness makes
a listening socket *inside* that namespace (setns in a throwaway thread: a socket stays in the
namespace it was made in) at 127.0.0.1:3128 and serves it from its own event loop: a CONNECT
proxy (HTTPS, git, pip) that also forwards plain ``http://`` requests, connecting out from
the harness's namespace only to a host:port the allow-list names. The proxy resolves names
itself and connects to the address it checked; an address that is not global (loopback,
private, link-local: the host's own services, cloud metadata) is reached only when the
allow-list names that very IP literal and the request asks for it, never through a wildcard
or a host name, so no DNS answer can turn an allowed name into the host's loopback. An IPv6
address that carries an IPv4 one (mapped, compatible, translated, NAT64, 6to4, Teredo) is as
public as the IPv4 it carries, never more: ``::127.0.0.1`` is loopback (``public``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fnmatch
import ipaddress
import os
import socket
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
DEFAULT_ALLOW = ("*:80", "*:443")
_CLONE_NEWNET = 0x40000000
_HEAD_LIMIT = 64 << 10
_MAX_CONNECTIONS = 128  # client and upstream sockets of one command together
_TIMEOUT = 30.0
_resolver = ThreadPoolExecutor(4, thread_name_prefix="egress-dns")  # never the store's default executor


def proxy_env() -> list[str]:
    """bwrap --setenv arguments pointing the usual clients at the proxy."""
    args = []
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        args += ["--setenv", name, PROXY_URL]
    for name in ("no_proxy", "NO_PROXY"):  # the namespace's own loopback is the command's own
        args += ["--setenv", name, "localhost,127.0.0.1,::1"]
    return args


@dataclass(frozen=True)
class Rule:
    host: str  # a glob over the lower-case host name or IP literal
    port: str  # a glob over the port number

    @classmethod
    def parse(cls, text: str) -> Rule:
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port:
            raise ValueError(f"egress allow-list entry {text!r} is not host:port (a glob in each, e.g. *.example.org:443)")
        return cls(host.strip("[]").lower(), port)

    def matches(self, host: str, port: int) -> bool:
        return fnmatch.fnmatchcase(host, self.host) and fnmatch.fnmatchcase(str(port), self.port)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class Egress:
    """The allow-list and the proxies of running commands."""

    def __init__(self, allow: Sequence[str] = DEFAULT_ALLOW) -> None:
        self.rules = [Rule.parse(a) for a in allow]

    def describe(self) -> str:
        allowed = ", ".join(map(str, self.rules)) or "nothing"
        return (f"network=true: a network namespace of its own (no route to the host's loopback), egress only through "
                f"the harness's proxy to {allowed}")

    async def destination(self, host: str, port: int) -> tuple[str | None, str]:
        """(the address to connect to, '') or (None, why not)."""
        host = host.lower().rstrip(".")
        rules = [r for r in self.rules if r.matches(host, port)]
        if not 0 < port < 65536 or not rules:
            return None, f"{host}:{port} is not in the harness's egress allow-list"
        literal = _ip(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                infos = await asyncio.get_running_loop().run_in_executor(
                    _resolver, socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
            except OSError as e:
                return None, f"{host} cannot be resolved ({e})"
            addresses = [a for a in (_ip(str(i[4][0])) for i in infos) if a is not None]
        for address in addresses:
            if public(address) or (literal is not None and any(r.host == str(address) for r in rules)):
                return str(address), ""
        return None, (f"{host}:{port} is not a global address (loopback, private or link-local); only an IP literal "
                      "the allow-list names exactly is reached there")

    async def serve(self, child_pid: int) -> Proxy:
        """A proxy listening inside the network namespace of the sandbox whose init is ``child_pid``."""
        proxy = Proxy(self)
        proxy.server = await asyncio.start_server(proxy.handle, sock=_listen_in(child_pid), limit=_HEAD_LIMIT)
        return proxy


class Proxy:
    """One command's proxy: closed (with every tunnel it holds) when the command ends."""

    def __init__(self, egress: Egress) -> None:
        self.egress = egress
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for w in list(self.writers):
            w.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            if len(self.writers) > _MAX_CONNECTIONS:
                return await _answer(writer, 503, "too many connections through the egress proxy")
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _TIMEOUT)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            method, target = (head.split(b"\r\n", 1)[0].decode("latin-1").split(" ") + ["", ""])[:2]
            host, port = _target(method, target)
            if not host:
                return await _answer(writer, 400, "the egress proxy takes CONNECT host:port or http:// URLs")
            address, reason = await self.egress.destination(host, port)
            if address is None:
                return await _answer(writer, 403, f"loopwire egress proxy: {reason}")
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(address, port), _TIMEOUT)
            except (OSError, TimeoutError) as e:
                return await _answer(writer, 502, f"loopwire egress proxy: {host}:{port}: {e}")
            upstream = up_writer
            self.writers.add(up_writer)
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(head)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, upstream):
                if w is not None:
                    self.writers.discard(w)
                    w.close()


def _target(method: str, target: str) -> tuple[str, int]:
    try:
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            return host.strip("[]"), int(port)
        url = urlsplit(target)
        if url.scheme == "http" and url.hostname:
            return url.hostname, url.port or 80
    except ValueError:
        pass
    return "", 0


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix: the IPv4 in the low 32 bits
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215: the IPv4's place depends on the operator
_COMPATIBLE = ipaddress.IPv6Network("::/96")  # RFC 4291's deprecated IPv4-compatible form (:: and ::1 too)
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # RFC 2765's IPv4-translated form


def public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether the address is global (no loopback, private, link-local, reserved...), and so is
    every IPv4 address it carries: the kernel, a NAT64 gateway or a 6to4/Teredo relay may deliver
    to that IPv4 address, so an embedded one never passes where the plain one would not."""
    if isinstance(address, ipaddress.IPv4Address):
        return address.is_global
    if address in _NAT64_LOCAL:  # where its IPv4 sits is the operator's choice: never public
        return False
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_global
    if any(address in net for net in (_COMPATIBLE, _TRANSLATED, _NAT64)):  # the IPv4 in the low 32 bits
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF).is_global
    carried = [address.sixtofour] if address.sixtofour is not None else list(address.teredo or ())
    return address.is_global and all(v4.is_global for v4 in carried)


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return None


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = (text + "\n").encode()
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}[status]
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 "Connection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def _listen_in(pid: int) -> socket.socket:
    """A listening socket at 127.0.0.1:PROXY_PORT in the network namespace of process ``pid``,
    made by a thread that enters the namespace and then ends (no thread that lives on changes
    namespace). Needs root: setns into a namespace owned by the sandbox's user namespace."""
    ns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    made: list[socket.socket | OSError] = []

    def make() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(ns, _CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns into the sandbox's network namespace: {os.strerror(err)}")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", PROXY_PORT))
            sock.listen(64)
            sock.setblocking(False)
            made.append(sock)
        except OSError as e:
            made.append(e)

    try:
        thread = threading.Thread(target=make, name="egress-listen")
        thread.start()
        thread.join()  # microseconds: a setns and a bind
    finally:
        os.close(ns)
    if isinstance(made[0], OSError):
        raise made[0]
    return made[0]
