"""The HTTP front door reads requests with bounds (issue 36): a head over 16 KiB or over 100
header fields is a 431, a request with both Content-Length and Transfer-Encoding a 400, and in
both cases the connection is closed, so nothing sent after it (a smuggled request) is served.
A body of more zstd frames than the cap, or JSON nested past the shared bound (in the body or in
a call's arguments), is a 400 naming the limit.
Raw sockets, against the real ``loopwire api`` process; every wait is a read until the server acts."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

import pytest
import zstandard

from loopwire.api.body import MAX_ZSTD_FRAMES
from loopwire.api.protocol import MAX_HEADER_BYTES, MAX_HEADERS
from loopwire.common.json_limits import MAX_JSON_DEPTH
from loopwire.mesh import free_port, wait_http_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """`loopwire api` alone (no gateway is needed to read requests or list models)."""
    log = tmp_path_factory.mktemp("api-wire") / "api.log"
    address = f"127.0.0.1:{free_port()}"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "loopwire.cli", "api", "--listen", address,
                                 "--gateway", "127.0.0.1:1", "--insecure-dev"], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_http_healthy(address, proc=proc)
        yield address
    finally:
        proc.terminate()
        proc.wait(30)


def exchange(address: str, request: bytes) -> bytes:
    """Send ``request`` and read everything the server sends until it closes the connection."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def responses(data: bytes) -> list[int]:
    """The status of each response in ``data`` (a body ends without a line break)."""
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def head(headers: list[bytes], path: bytes = b"/healthz") -> bytes:
    return b"GET " + path + b" HTTP/1.1\r\nhost: x\r\n" + b"".join(h + b"\r\n" for h in headers) + \
        b"connection: close\r\n\r\n"


def error(data: bytes) -> dict:
    return json.loads(data.partition(b"\r\n\r\n")[2])["error"]


def test_ten_thousand_headers_are_431_and_closed(api):
    request = head([b"x-h%d: v" % i for i in range(10_000)])
    assert len(request) > 100_000
    reply = exchange(api, request)
    assert responses(reply) == [431]
    assert str(MAX_HEADER_BYTES) in error(reply)["message"]
    assert responses(exchange(api, head([]))) == [200]  # still serving


def test_a_head_over_the_byte_limit_in_one_header_is_431(api):
    reply = exchange(api, head([b"x-big: " + b"a" * MAX_HEADER_BYTES]))
    assert responses(reply) == [431]


def test_a_head_trickled_past_the_limit_is_431_before_it_ends(api):
    host, port = api.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        reply = b""
        for i in range(MAX_HEADER_BYTES // 100 + 10):  # never ends the head
            try:
                sock.sendall(b"x-%d: %s\r\n" % (i, b"a" * 90))
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.shutdown(socket.SHUT_WR)
        while chunk := sock.recv(65536):
            reply += chunk
    assert responses(reply) == [431]


def test_too_many_header_fields_are_431(api):
    reply = exchange(api, head([b"x-%d: 1" % i for i in range(MAX_HEADERS)]))
    assert responses(reply) == [431]
    assert f"limit of {MAX_HEADERS}" in error(reply)["message"]


def test_a_head_within_both_limits_is_served(api):
    headers = [b"x-%d: 1" % i for i in range(MAX_HEADERS - 3)]  # with host and connection: 2 under
    assert responses(exchange(api, head(headers))) == [200]


def test_content_length_and_transfer_encoding_are_400_and_the_smuggled_request_is_not_served(api):
    smuggled = b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n"
    body = b"0\r\n\r\n" + smuggled
    request = (b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\ntransfer-encoding: chunked\r\n\r\n%s" % (len(body), body))
    reply = exchange(api, request)
    assert responses(reply) == [400]
    assert b"connection: close" in reply.lower()
    assert "Content-Length and Transfer-Encoding" in error(reply)["message"]
    assert b'"object":"list"' not in reply


def test_pipelined_requests_within_the_limits_are_all_served(api):
    one = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
    assert responses(exchange(api, one + one + head([]))) == [200, 200, 200]


def post(address: str, body: bytes, encoding: str = "") -> tuple[int, dict]:
    extra = b"content-encoding: %s\r\n" % encoding.encode() if encoding else b""
    reply = exchange(address, b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                              b"connection: close\r\n%scontent-length: %d\r\n\r\n%s" % (extra, len(body), body))
    return responses(reply)[0], error(reply)


def test_a_body_of_many_empty_zstd_frames_is_400_naming_the_limit(api):
    frames = zstandard.ZstdCompressor().compress(b"") * 1_700_000  # 15 MB, under the body limit
    status, err = post(api, frames, "zstd")
    assert (status, err["code"]) == (400, "too_many_frames")
    assert f"more than {MAX_ZSTD_FRAMES} zstd frames" in err["message"]


def test_a_100000_deep_tool_schema_is_400_naming_the_limit(api):
    schema = '{"type":"object","properties":{"x":' + '{"items":' * 100_000 + "{}" + "}" * 100_000 + "}}"
    body = '{"model":"loopwire","input":"hi","tools":[{"type":"function","name":"f","parameters":' + schema + "}]}"
    for encoding, data in (("", body.encode()), ("zstd", zstandard.ZstdCompressor().compress(body.encode()))):
        status, err = post(api, data, encoding)
        assert (status, err["code"]) == (400, "invalid_json")
        assert f"limit of {MAX_JSON_DEPTH} levels" in err["message"]


def test_deep_call_arguments_are_400_not_the_gateways_to_find(api):
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "[" * 100_000 + "]" * 100_000}
    status, err = post(api, json.dumps({"model": "loopwire", "input": [call]}).encode())
    assert (status, err["param"]) == (400, "input[0].arguments")
