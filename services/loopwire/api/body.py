"""Request bodies: read, undone of their ``Content-Encoding`` and parsed off the event loop.

Decoding a large body (zstd, gzip) and parsing its JSON into the request's protobuf are CPU work
that, on the loop, stalls every other tenant's requests and streams (40 bodies near the limit:
200-300x; 1.7 M empty zstd frames: 1.1 s each). So a body larger than ``INLINE_BYTES`` is
handled by a worker, at most ``per_tenant`` of one tenant's at once: a tenant over its bound
waits its turn in its own queue (first come, first served), never in another tenant's.

A compressed body, or one over ``PROCESS_BYTES``, is decoded, parsed and converted in a worker
process (spawned: it shares no lock or GIL with this one). Threads were not enough: ``json.loads``
and the conversion into protobuf hold the GIL (a body of 250,000 small items: 0.6 s and 5.6 s),
and even handing the GIL back at each object left another tenant's canary at 3-6x its idle time.
The process sends back only what the route needs, with the large parts in slices (the request's
input items as serialized protobuf, their JSON as pickles of a few thousand items), merged here
in a worker thread slice by slice, so the loop gets the GIL between any two slices (rebuilding
the whole body at once held it 0.4 s). A body between ``INLINE_BYTES`` and ``PROCESS_BYTES``,
not compressed, is parsed in a thread: its parse is shorter than the round trip to a process.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import io
import multiprocessing
import os
import pickle
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, TypeVar

import zstandard
from starlette.requests import ClientDisconnect, Request

from loopwire.api import items
from loopwire.api.create import ParsedCreate
from loopwire.api.errors import ApiError
from loopwire.api.gateway_client import OWNER
from loopwire.v1 import gateway_pb2

T = TypeVar("T")

INLINE_BYTES = 64 * 1024
"""An uncompressed body of at most this many bytes is parsed where it is read (cheaper than a hop)."""
PROCESS_BYTES = 1024 * 1024
"""A body of more bytes than this, or compressed (a small one may decompress to the limit), is
decoded and parsed in a worker process."""
SLICE_ITEMS = 2048
"""Input items per slice of a result a worker process sends back (each merged here in about a
millisecond, the GIL's switch interval)."""
MAX_ZSTD_FRAMES = 16
"""zstd frames in one body (a client compresses a body as one); each costs the same whatever its
size, so a body of empty frames is refused by their number, not its bytes. gzip allows one
member: anything after it is trailing data (400)."""
ZSTD_MAX_WINDOW = 1 << 24
"""A frame that needs a larger window (memory) to decode is refused; ordinary levels use 8 MiB at most."""


@dataclass
class _Tenant:
    running: int = 0
    waiting: collections.deque[asyncio.Future[None]] = field(default_factory=collections.deque)


class Decoding:
    """The workers that decode and parse bodies, with a per-tenant bound: ``per_tenant`` threads
    for every tenant (a tenant's work never queues behind another's) and, started at first use,
    ``processes`` worker processes (default: one per CPU, at most one per tenant slot), which
    tenants share first come, first served, each with at most ``per_tenant`` bodies in them.
    ``preload`` names the modules of the routes' conversions, which each worker imports before
    its first body (the server names them: this module knows no route)."""

    def __init__(self, per_tenant: int = 1, tenants: int = 16, processes: int | None = None,
                 preload: tuple[str, ...] = ()) -> None:
        self.per_tenant = per_tenant
        self.preload = preload
        self._tenants: dict[str, _Tenant] = {}
        self._executor = ThreadPoolExecutor(per_tenant * tenants, thread_name_prefix="api-decode")
        self.processes = processes or max(1, min(per_tenant * tenants, os.cpu_count() or 1))
        self._processes: ProcessPoolExecutor | None = None

    async def run(self, owner: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread once one of ``owner``'s slots is free. Cancelled while
        it waits, it leaves the queue; once running, its slot is held until the thread is done."""
        await self._acquire(owner)
        job = asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        job.add_done_callback(lambda _: self._release(owner))
        return await asyncio.shield(job)

    async def run_in_process(self, owner: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (picklable, as its arguments) in a worker process once one of ``owner``'s
        slots is free, its result merged back in a worker thread (``_pack``); an ``ApiError`` it
        raises is raised here as it was. Cancelled while it waits, it leaves the queue; once
        running, its slot is held until its result is merged."""
        await self._acquire(owner)
        job = asyncio.ensure_future(self._in_process(fn, *args))
        job.add_done_callback(lambda _: self._release(owner))
        return await asyncio.shield(job)

    async def _in_process(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        pool = self._pool()
        try:
            packed = await loop.run_in_executor(pool, _packed_call, fn, *args)
        except BrokenProcessPool:  # a worker died (killed, out of memory): a fresh pool for the next body
            if self._processes is pool:
                self._processes = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise ApiError(503, "The server could not decode the request body: retry it.", type="server_error",
                           code="unavailable") from None
        if isinstance(packed, _Refused):
            raise packed.error()
        result: T = await loop.run_in_executor(self._executor, _unpack, packed)
        return result

    def start(self) -> None:
        """Spawn the worker processes now (each imports the conversions, about a second), not
        when the first compressed body comes."""
        pool = self._pool()
        for _ in range(self.processes):  # each job finding no idle worker spawns one
            pool.submit(os.getpid)

    def _pool(self) -> ProcessPoolExecutor:
        if self._processes is None:
            self._processes = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_worker_start, initargs=(self.preload,))
        return self._processes

    async def _acquire(self, owner: str) -> None:
        tenant = self._tenants.setdefault(owner, _Tenant())
        if tenant.running < self.per_tenant and not tenant.waiting:
            tenant.running += 1
            return
        turn = asyncio.get_running_loop().create_future()
        tenant.waiting.append(turn)
        try:
            await turn  # a release hands its slot over: running stays counted
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release(owner)  # handed a slot, but gone: pass it on
            else:
                tenant.waiting.remove(turn)
                self._forget(owner, tenant)
            raise

    def _release(self, owner: str) -> None:
        tenant = self._tenants[owner]
        while tenant.waiting:
            turn = tenant.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        tenant.running -= 1
        self._forget(owner, tenant)

    def _forget(self, owner: str, tenant: _Tenant) -> None:
        if not tenant.running and not tenant.waiting:
            del self._tenants[owner]

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._processes is not None:
            self._processes.shutdown(wait=False, cancel_futures=True)
            self._processes = None


def _worker_start(preload: tuple[str, ...]) -> None:
    """A worker process imports the routes' body conversions once, before its first body (the
    pickled job would import them too, while that body waits)."""
    for module in preload:
        importlib.import_module(module)


@dataclass
class _Refused:
    """An ``ApiError`` a worker process raised, by its fields (an exception's pickle keeps only its message)."""

    status: int
    message: str
    type: str
    param: str | None
    code: str | None

    def error(self) -> ApiError:
        return ApiError(self.status, self.message, type=self.type, param=self.param, code=self.code)


@dataclass
class _Packed:
    """A worker process's result with its large parts emptied: ``inputs`` holds the input items of
    its ``CreateResponse`` as serialized slices, ``input_json`` a ``ParsedCreate``'s input JSON as
    pickled slices."""

    value: Any
    inputs: list[bytes]
    input_json: list[bytes]


def _create_of(value: Any) -> gateway_pb2.CreateResponse | None:
    """The ``CreateResponse`` in a parse's result: a ``ParsedCreate``'s, or first in a tuple (chat)."""
    if isinstance(value, ParsedCreate):
        return value.create
    if isinstance(value, tuple) and value and isinstance(value[0], gateway_pb2.CreateResponse):
        return value[0]
    return None


def _packed_call(fn: Callable[..., Any], *args: Any) -> _Packed | _Refused:
    """In a worker process: ``fn(*args)`` packed for the trip back."""
    try:
        value = fn(*args)
    except ApiError as e:
        return _Refused(e.status, e.message, e.type, e.param, e.code)
    inputs: list[bytes] = []
    create = _create_of(value)
    if create is not None:
        given = create.input
        inputs = [gateway_pb2.CreateResponse(input=given[i:i + SLICE_ITEMS]).SerializeToString()
                  for i in range(0, len(given), SLICE_ITEMS)]
        del create.input[:]
    input_json: list[bytes] = []
    if isinstance(value, ParsedCreate):
        given_json, value.input_json = value.input_json, []
        input_json = [pickle.dumps(given_json[i:i + SLICE_ITEMS], pickle.HIGHEST_PROTOCOL)
                      for i in range(0, len(given_json), SLICE_ITEMS)]
    return _Packed(value, inputs, input_json)


def _unpack(packed: _Packed) -> Any:
    """In a worker thread: the result rebuilt slice by slice (a serialized message merged into
    another appends its repeated fields)."""
    value = packed.value
    create = _create_of(value)
    for part in packed.inputs:
        assert create is not None
        create.MergeFromString(part)
    for part in packed.input_json:
        value.input_json.extend(pickle.loads(part))
    return value


async def read_json(request: Request, limit: int, decoding: Decoding, owner: str,
                    parse: Callable[[dict[str, Any]], T]) -> T:
    """The body as one JSON object, passed to ``parse`` (which turns it into what the route needs),
    under ``owner``'s bound in a worker process (``parse`` picklable) when the body is compressed
    or over ``PROCESS_BYTES``, else in a worker thread unless it is small."""
    encoding = request.headers.get("content-encoding", "")
    declared = request.headers.get("content-length", "")
    identity = encoding.strip().lower() in ("", "identity")
    if identity and declared.isdigit() and int(declared) <= INLINE_BYTES:
        return parse(items.json_object(await read_body(request, limit)))
    body = await read_body(request, limit)
    run = decoding.run if identity and len(body) <= PROCESS_BYTES else decoding.run_in_process
    work = asyncio.ensure_future(run(owner, _decode_and_parse, body, encoding, limit, parse))
    watch = OWNER.get(None)
    if watch is None:
        return await work
    gone = asyncio.ensure_future(watch.gone.wait())
    try:
        await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if not work.done():  # the client left while its body waited its turn: it leaves the queue
        work.cancel()
        raise ApiError(499, "The client closed the connection before its body was decoded.", type="cancelled",
                       code="cancelled")
    return work.result()


def _decode_and_parse(body: bytes, encoding: str, limit: int, parse: Callable[[dict[str, Any]], T]) -> T:
    try:
        return parse(items.json_object(decode_body(body, encoding, limit)))
    except ApiError as e:
        # Its traceback's frames hold the parsed body: dropped here, the body is freed in this
        # thread, not on the event loop when the error is answered (0.3-1 s for a large body).
        e.__context__ = e.__cause__ = None
        raise e.with_traceback(None) from None


async def read_body(request: Request, limit: int) -> bytes:
    """The body as sent, refused with 413 past ``limit`` bytes (before reading it all when the
    length is declared). A client gone mid-body (or cut off by the body deadline) is a 499 that
    no one reads, not a bug."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(499, "The client closed the connection before its body arrived.", type="cancelled",
                       code="cancelled") from None
    return b"".join(chunks)


def decode_body(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` undone of its ``Content-Encoding`` (gzip, zstd: Codex compresses with zstd), each
    step stopped past ``limit`` bytes of output, so a decompression bomb is a 413 after reading
    at most ``limit`` + 1 bytes of it; an encoding not known here is a 415."""
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip()]
    for coding in reversed(codings):  # the last one applied is undone first
        if coding == "identity":
            continue
        if coding in ("gzip", "x-gzip"):
            body = _gunzip(body, limit)
        elif coding == "zstd":
            body = _unzstd(body, limit)
        else:
            raise ApiError(415, f"Unsupported Content-Encoding {coding!r}: send gzip, zstd or identity.",
                           param="content-encoding", code="unsupported_encoding")
        if len(body) > limit:
            raise _too_large(len(body), limit, decompressed=True)
    return body


def _gunzip(body: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, limit + 1)
        if len(out) <= limit and not d.eof:  # all input consumed (else the output bound stopped it)
            out += d.flush()
    except zlib.error as e:
        raise _bad_encoding("gzip", e) from None
    if len(out) <= limit and (not d.eof or d.unused_data):
        raise _bad_encoding("gzip", "truncated, or trailing data after the stream")
    return out


def _unzstd(body: bytes, limit: int) -> bytes:
    if zstd_frames(body, MAX_ZSTD_FRAMES) > MAX_ZSTD_FRAMES:
        raise ApiError(400, f"The request body has more than {MAX_ZSTD_FRAMES} zstd frames, this server's limit: "
                       "compress it as one frame.", param="content-encoding", code="too_many_frames")
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    try:
        with decompressor.stream_reader(io.BytesIO(body), read_across_frames=True) as reader:
            out = bytearray()
            while len(out) <= limit:
                chunk = reader.read(min(1 << 20, limit + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
    except zstandard.ZstdError as e:
        raise _bad_encoding("zstd", e) from None
    if not out and body:
        raise _bad_encoding("zstd", "no frame")
    return bytes(out)


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_frames(data: bytes, most: int) -> int:
    """How many frames ``data`` holds, counting no further than ``most`` + 1: a walk over frame and
    block headers (RFC 8878 §3.1), a few hundred steps for a body at the size limit. Where the
    data stops making sense the count stops too; decoding then reports what is wrong."""
    view, at, frames = memoryview(data), 0, 0
    while at < len(view) and frames <= most:
        frames += 1
        magic = bytes(view[at:at + 4])
        if len(magic) == 4 and magic[1:] == b"\x2a\x4d\x18" and magic[0] & 0xF0 == 0x50:  # skippable frame
            at += 8 + int.from_bytes(view[at + 4:at + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            break
        try:
            header = bytes(view[at:at + 18])
            at += zstandard.frame_header_size(header)
            checksum = zstandard.get_frame_parameters(header).has_checksum
        except zstandard.ZstdError:
            break
        last = False
        while not last and at + 3 <= len(view):
            block = int.from_bytes(view[at:at + 3], "little")
            last, kind = bool(block & 1), (block >> 1) & 3
            at += 3 + (1 if kind == 1 else block >> 3)  # an RLE block is one byte repeated
        at += 4 if checksum else 0
    return frames


def _bad_encoding(coding: str, problem: object) -> ApiError:
    return ApiError(400, f"The request body is not valid {coding}: {problem}.", param="content-encoding",
                    code="invalid_body")


def _too_large(size: int, limit: int, *, decompressed: bool = False) -> ApiError:
    what = "Decompressed, the request body is" if decompressed else "Request body is"
    return ApiError(413, f"{what} {size} bytes or more, over this server's {limit}-byte limit.",
                    code="request_too_large")
