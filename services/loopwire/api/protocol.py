"""How the api reads HTTP/1.1 off the wire: uvicorn's h11 protocol, with the bounds it lacks.

h11 parses; this module only refuses what it would accept. Each refusal is answered with an
OpenAI-shaped error and the connection is closed (nothing after it on that connection is read),
before any route, key check or body work:

- a request line plus headers over ``MAX_HEADER_BYTES``, or more than ``MAX_HEADERS`` header
  fields: 431. h11 checks ``max_incomplete_event_size`` only while a head is still incomplete, so
  a head that arrives whole in one read (asyncio reads up to 256 KiB at once) was parsed at any
  size; the bound is now checked on the bytes received before h11 parses them.
- both ``Content-Length`` and ``Transfer-Encoding``: 400 (RFC 9112 §6.1; h11 lets
  Transfer-Encoding win and keeps the connection, so a request hidden in the body was served).
- headers or a body that do not arrive in time (slowloris): 408.
"""

from __future__ import annotations

import asyncio
import http
import json
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from loopwire.api.errors import ApiError

MAX_HEADER_BYTES = 16 * 1024
"""Request line and headers together, as nginx's and Envoy's default buffers (8-16 KiB, 60 KiB)."""
MAX_HEADERS = 100
"""Header fields in one request (Envoy's ``max_headers_count`` default)."""
LINGER_S = 2.0
LINGER_BYTES = 1 << 20
"""After a refusal, what the client still sends is read and dropped for up to ``LINGER_S`` seconds
or ``LINGER_BYTES`` bytes before closing (nginx's lingering close), so that closing with unread
bytes does not reset the connection and destroy the error reply before the client reads it."""
# Where h11 finds the end of a head (its own ReceiveBuffer pattern: a bare LF ends lines too).
_HEAD_END = re.compile(rb"\n\r?\n")


def _too_large(problem: str) -> ApiError:
    return ApiError(431, f"Request header fields too large: {problem}.", code="request_header_fields_too_large")


class BoundedConnection(h11.Connection):
    """h11's server connection that refuses, as ``RemoteProtocolError``, a head over the size or
    count bound and a request framed both ways; ``refusal`` keeps the error to answer with."""

    def __init__(self, max_incomplete_event_size: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size)
        self.refusal: ApiError | None = None

    def next_event(self) -> Any:
        if self.their_state is h11.IDLE:  # a request head is (being) received: bound it before parsing
            self._check_head_size()
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:
            status = e.error_status_hint if e.error_status_hint in (400, 431) else 400
            self.refusal = self.refusal or ApiError(status, f"Invalid HTTP request: {e}.", code="invalid_request")
            raise
        if isinstance(event, h11.Request):
            self._check_request(event)
        return event

    def _check_head_size(self) -> None:
        received, _ = self.trailing_data
        end = _HEAD_END.search(received, 0, MAX_HEADER_BYTES + 2)
        if (end.end() if end else len(received)) > MAX_HEADER_BYTES:
            self._refuse(_too_large(f"the request line and headers are over this server's {MAX_HEADER_BYTES}-byte "
                                    "limit"))

    def _check_request(self, event: h11.Request) -> None:
        if len(event.headers) > MAX_HEADERS:
            self._refuse(_too_large(f"{len(event.headers)} header fields, over this server's limit of {MAX_HEADERS}"))
        names = {name for name, _ in event.headers}  # h11 lower-cases them
        if b"content-length" in names and b"transfer-encoding" in names:
            self._refuse(ApiError(400, "A request may not have both Content-Length and Transfer-Encoding.",
                                  code="invalid_request"))

    def _refuse(self, error: ApiError) -> None:
        self.refusal = error
        raise h11.RemoteProtocolError(error.message, error_status_hint=error.status)


def _reply(error: ApiError) -> bytes:
    """A complete response that closes the connection (written raw: h11's state may not allow one)."""
    body = json.dumps(error.body(), separators=(",", ":")).encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
            % (error.status, http.HTTPStatus(error.status).phrase.encode(), len(body), body))


_TIMED_OUT = _reply(ApiError(408, "The request was not received in time.", code="request_timeout"))


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with ``BoundedConnection``'s refusals answered in JSON, and with
    deadlines for receiving a request: uvicorn has none (a slowloris client that never finishes
    its headers, or its body, holds the connection forever). Headers must be in
    ``header_timeout_s`` after the connection opens or its last response completes, the body
    ``body_timeout_s`` after the headers; past that a started request gets a 408 and the
    connection closes. A WebSocket upgrade leaves these deadlines behind (its pings time it out)."""

    def __init__(self, *args: Any, header_timeout_s: float, body_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = BoundedConnection(self.config.h11_max_incomplete_event_size or MAX_HEADER_BYTES)
        self._timeouts = {h11.IDLE: header_timeout_s, h11.SEND_BODY: body_timeout_s}
        self._waiting_for: object = None  # the client's h11 state whose deadline runs
        self._started = False  # bytes of the awaited request arrived (else a timeout closes silently)
        self._deadline: asyncio.TimerHandle | None = None
        self._upgraded = False
        self._lingering = -1  # bytes dropped since a refusal; -1: none

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to any ``RemoteProtocolError``: here the refusal's own status and JSON,
        then the write side shut and the rest of the request dropped until the client stops."""
        assert isinstance(self.conn, BoundedConnection)
        error = self.conn.refusal or ApiError(400, msg, code="invalid_request")
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # else a response has begun: only close
            self.transport.write(_reply(error))
        self._cancel()
        self._lingering = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(LINGER_S, self.transport.close)

    def _watch(self) -> None:
        """(Re)arm the deadline when the client's side of the connection enters a new phase."""
        state = self.conn.their_state
        phase = state if state in self._timeouts and not self._upgraded and not self.transport.is_closing() else None
        if phase is self._waiting_for or self._lingering >= 0:
            return  # same phase: its deadline still runs from when it began
        self._cancel()
        self._waiting_for, self._started = phase, False
        if phase is not None:
            self._deadline = self.loop.call_later(self._timeouts[phase], self._timed_out)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        started = self._started or self._waiting_for is h11.SEND_BODY
        if started and self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # no response begun yet
            self.transport.write(_TIMED_OUT)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        if self._lingering >= 0:  # refused: read only to let the client read its reply
            self._lingering += len(data)
            if self._lingering > LINGER_BYTES:
                self.transport.close()
            return
        self._started = True
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._upgraded = True
        self._cancel()
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)
