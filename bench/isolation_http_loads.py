"""The api's share of the isolation benchmark's loads (issue 36): what one tenant sends to the
HTTP front door to stall the others. Each function runs one load against an api on loopback,
for a bounded number of rounds and at most ``duration_s`` seconds, and returns what the server
answered; it stops by itself (every request has a deadline, nothing is left running).

- ``compressed_bodies``: ``concurrency`` (40) bodies at once, each decompressing to just under the
  body limit, zstd or gzip, authenticated. A body carries one unknown top-level field, so the api
  decodes and parses all of it, then answers 400 itself: the load is the api's, not the gateway's.
- ``empty_zstd_frames``: ``bodies`` (4) bodies at once, each of ~1.7 M empty zstd frames.
- ``header_flood``: ``concurrency`` (5) requests at once with 10,000 small headers each, no key.
- ``smuggling``: one request with both Content-Length and Transfer-Encoding whose chunked body
  hides a pipelined ``GET /v1/models``; reports whether that request was answered.

Raw HTTP/1.1 over asyncio streams (exact bytes on the wire, ``connection: close``), no client
library in between. Used by the isolation benchmark; ``python bench/isolation_http_loads.py URL KEY``
runs each load once and prints the results.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import zstandard

DEFAULT_LIMIT = 16 * 1024 * 1024  # the api's --max-body-bytes default
REQUEST_TIMEOUT_S = 300.0  # a body waits its tenant's turn to be decoded: 40 of them take a while
_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


@dataclass
class LoadResult:
    """What one load sent and got back: ``statuses`` counts HTTP statuses (0: no answer, the
    connection failed or timed out); ``detail`` holds what a load reports beyond that."""

    name: str
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    detail: dict[str, object] = field(default_factory=dict)


def loopback(base_url: str) -> tuple[str, int]:
    """host and port of ``base_url``, refused unless it is a loopback address."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme != "http" or not (host == "localhost" or ipaddress.ip_address(host).is_loopback):
        raise ValueError(f"{base_url}: the loads run against an http:// api on loopback only")
    return host, parts.port or 80


async def exchange(base_url: str, request: bytes, timeout_s: float = REQUEST_TIMEOUT_S) -> bytes:
    """Send ``request`` on a new connection and read until the server closes it (b"" on failure)."""
    host, port = loopback(base_url)
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            await writer.drain()
            return await reader.read()
    except (OSError, TimeoutError):
        return b""
    finally:
        if writer is not None:
            writer.close()


def statuses(reply: bytes) -> list[int]:
    """Every response status in ``reply`` (pipelined responses included)."""
    return [int(s) for s in _STATUS.findall(reply)] or [0]


def _post(path: str, key: str, body: bytes, encoding: str = "") -> bytes:
    headers = [b"POST " + path.encode() + b" HTTP/1.1", b"host: loopwire", b"content-type: application/json",
               b"connection: close", b"content-length: %d" % len(body)]
    if key:
        headers.append(b"authorization: Bearer " + key.encode())
    if encoding:
        headers.append(b"content-encoding: " + encoding.encode())
    return b"\r\n".join(headers) + b"\r\n\r\n" + body


def near_limit_body(limit: int = DEFAULT_LIMIT, shape: str = "items") -> bytes:
    """A /v1/responses body of just under ``limit`` bytes: ``items`` (many small input messages, the
    costliest to parse) or ``text`` (one long string); its unknown field makes the api refuse it
    (400) once parsed."""
    head = {"model": "loopwire", "loopwire_bench_load": True}
    if shape == "text":
        filler = limit - 4096 - len(json.dumps({**head, "input": ""}))
        return json.dumps({**head, "input": "lorem ipsum " * (filler // 12)}).encode()
    item = {"role": "user", "content": "hello there, how are you?"}
    size = len(json.dumps(item)) + 2
    body = json.dumps({**head, "input": [item] * ((limit - 4096) // size)}).encode()
    assert len(body) <= limit
    return body


def compress(body: bytes, encoding: str) -> bytes:
    if encoding == "zstd":
        return zstandard.ZstdCompressor(level=3).compress(body)
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=6)
    raise ValueError(f"encoding {encoding!r}: zstd or gzip")


async def _rounds(result: LoadResult, rounds: int, duration_s: float, one_round) -> LoadResult:
    start = time.monotonic()
    for _ in range(rounds):
        if time.monotonic() - start >= duration_s:
            break
        for reply in await one_round():
            result.requests += 1
            result.statuses.update(statuses(reply)[:1])
    result.elapsed_s = time.monotonic() - start
    return result


async def compressed_bodies(base_url: str, key: str, *, encoding: str = "zstd", concurrency: int = 40,
                            rounds: int = 1, duration_s: float = 120.0, limit: int = DEFAULT_LIMIT,
                            shape: str = "items") -> LoadResult:
    """``rounds`` times (while under ``duration_s``), ``concurrency`` near-limit bodies at once."""
    request = _post("/v1/responses", key, compress(near_limit_body(limit, shape), encoding), encoding)
    result = LoadResult(f"{concurrency} x {shape} body, {encoding}", detail={"compressed_bytes": len(request)})

    async def one_round() -> list[bytes]:
        return await asyncio.gather(*(exchange(base_url, request) for _ in range(concurrency)))
    return await _rounds(result, rounds, duration_s, one_round)


async def empty_zstd_frames(base_url: str, key: str, *, bodies: int = 4, frames: int = 1_700_000,
                            rounds: int = 1, duration_s: float = 120.0) -> LoadResult:
    """``rounds`` times (while under ``duration_s``), ``bodies`` bodies of ``frames`` empty zstd frames at once."""
    data = zstandard.ZstdCompressor().compress(b"") * frames
    request = _post("/v1/responses", key, data, "zstd")
    result = LoadResult(f"{bodies} x {frames} empty zstd frames", detail={"body_bytes": len(data)})

    async def one_round() -> list[bytes]:
        return await asyncio.gather(*(exchange(base_url, request) for _ in range(bodies)))
    return await _rounds(result, rounds, duration_s, one_round)


async def header_flood(base_url: str, *, concurrency: int = 5, headers: int = 10_000, rounds: int = 1,
                       duration_s: float = 120.0) -> LoadResult:
    """``rounds`` times (while under ``duration_s``), ``concurrency`` GET /v1/models at once, each
    with ``headers`` small headers (~109 KB for 10,000) and no key."""
    request = (b"GET /v1/models HTTP/1.1\r\nhost: loopwire\r\n" + b"".join(b"x-h%d: v\r\n" % i for i in range(headers))
               + b"connection: close\r\n\r\n")
    result = LoadResult(f"{concurrency} x {headers} headers, no key", detail={"request_bytes": len(request)})

    async def one_round() -> list[bytes]:
        return await asyncio.gather(*(exchange(base_url, request) for _ in range(concurrency)))
    return await _rounds(result, rounds, duration_s, one_round)


async def smuggling(base_url: str, key: str = "") -> LoadResult:
    """One POST with Content-Length and Transfer-Encoding: chunked whose body (an empty chunked
    body, then ``GET /v1/models``) smuggles a second request. ``detail``: every status the
    server sent, and ``smuggled_served`` (whether a second response, the hidden request's, came back)."""
    hidden = b"GET /v1/models HTTP/1.1\r\nhost: loopwire\r\n" + \
        (b"authorization: Bearer " + key.encode() + b"\r\n" if key else b"") + b"\r\n"
    body = b"0\r\n\r\n" + hidden
    request = (b"POST /v1/responses HTTP/1.1\r\nhost: loopwire\r\ncontent-type: application/json\r\n"
               + (b"authorization: Bearer " + key.encode() + b"\r\n" if key else b"")
               + b"content-length: %d\r\ntransfer-encoding: chunked\r\n\r\n%s" % (len(body), body))
    start = time.monotonic()
    reply = await exchange(base_url, request, timeout_s=15.0)  # a server that keeps the connection: cut at 15 s
    seen = statuses(reply)
    return LoadResult("Content-Length + Transfer-Encoding", requests=1, statuses=Counter(seen[:1]),
                      elapsed_s=time.monotonic() - start,
                      detail={"statuses": seen, "smuggled_served": len(seen) > 1})


async def _main(base_url: str, key: str) -> None:
    for load in (compressed_bodies(base_url, key, encoding="zstd"), compressed_bodies(base_url, key, encoding="gzip"),
                 empty_zstd_frames(base_url, key), header_flood(base_url), smuggling(base_url, key)):
        result = await load
        print(f"{result.name}: {result.requests} requests in {result.elapsed_s:.2f} s, statuses "
              f"{dict(result.statuses)} {result.detail}")


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""))
