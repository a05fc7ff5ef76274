"""The HTTP front door closes slow clients (slowloris): headers not in within --header-timeout-s,
a body not in within --body-timeout-s after its headers, get a 408 and a closed connection;
trickling bytes does not extend a deadline, and a WebSocket upgrade leaves the deadlines behind.
Each test waits for the server to act (a read that returns when it closes), never on a sleep."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from websockets.sync.client import connect

from loopwire.mesh import free_port, wait_http_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

HEADER_S, BODY_S = 1.0, 1.5


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """`loopwire api` alone, with short deadlines (no gateway needed to read requests)."""
    log = tmp_path_factory.mktemp("api-timeouts") / "api.log"
    address = f"127.0.0.1:{free_port()}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loopwire.cli", "api", "--listen", address, "--gateway", "127.0.0.1:1",
             "--insecure-dev", "--header-timeout-s", str(HEADER_S), "--body-timeout-s", str(BODY_S)],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_http_healthy(address, proc=proc)
        yield address, log
    finally:
        proc.terminate()
        proc.wait(30)


def open_socket(address: str) -> socket.socket:
    host, port = address.split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket timeout is a failsafe)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def healthy(address: str) -> bool:
    with open_socket(address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        return read_until_closed(sock).startswith(b"HTTP/1.1 200")


def test_a_partial_request_line_gets_a_408_and_is_closed(api):
    address, _ = api
    with open_socket(address) as sock:
        start = time.monotonic()
        sock.sendall(b"GET /heal")
        reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408") and b'"code":"request_timeout"' in reply
    assert HEADER_S * 0.9 <= time.monotonic() - start < 20
    assert healthy(address)


def test_trickled_headers_do_not_extend_the_deadline(api):
    address, _ = api
    with open_socket(address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        sock.settimeout(0.2)
        start, reply = time.monotonic(), b""
        while time.monotonic() - start < 20:  # a header byte every 0.2 s, until the server answers
            try:
                sock.sendall(b"x")
                reply = sock.recv(65536)
                break
            except TimeoutError:
                continue
            except OSError:  # closed while we were writing
                break
    assert reply.startswith(b"HTTP/1.1 408") or reply == b""
    assert time.monotonic() - start < HEADER_S + 5


def test_a_body_that_never_arrives_gets_a_408(api):
    address, log = api
    with open_socket(address) as sock:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n{\"model\"")
        start = time.monotonic()
        reply = read_until_closed(sock)
    assert reply.startswith(b"HTTP/1.1 408")
    assert BODY_S * 0.9 <= time.monotonic() - start < 20
    assert healthy(address)
    assert "Traceback" not in log.read_text()


def test_an_idle_connection_is_closed_without_an_answer(api):
    address, _ = api
    with open_socket(address) as sock:
        assert read_until_closed(sock) == b""


def test_many_slow_connections_are_all_closed_and_others_are_served(api):
    address, _ = api
    socks = [open_socket(address) for _ in range(200)]
    try:
        for sock in socks:
            sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nx-slow: ")
        assert healthy(address)  # served while the slow ones wait
        replies = [read_until_closed(sock) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert all(r.startswith(b"HTTP/1.1 408") for r in replies)


def test_a_kept_alive_connection_gets_a_new_header_deadline(api):
    address, _ = api
    with open_socket(address) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        first = b""
        while not first.endswith(b'{"status":"ok"}'):
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /hea")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408")


def test_a_websocket_outlives_the_request_deadlines(api):
    address, _ = api
    with connect(f"ws://{address}/v1/responses", open_timeout=30) as ws:
        time.sleep(HEADER_S + BODY_S + 0.5)  # past both deadlines: the connection must not care
        ws.send("{not json")
        assert '"invalid_json"' in ws.recv(timeout=30)
