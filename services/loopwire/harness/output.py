"""Make tool output fit the transcript: valid UTF-8, capped with head + tail.

Uncached input tokens cost TTFT on every later turn, so a `cat` of a huge file must not
flood the context; the model still sees the start, the end and what was cut.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CappedOutput:
    text: str
    truncated: bool


def to_text(data: bytes | str) -> str:
    """Text that protobuf accepts: undecodable bytes and lone surrogates become escapes."""
    if isinstance(data, str):
        return data.encode("utf-8", "backslashreplace").decode("utf-8")
    return data.decode("utf-8", "backslashreplace")


def cap(data: bytes | str, limit: int) -> CappedOutput:
    """Keep about ``limit`` bytes: the first and last halves, with a note of what was cut."""
    raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    if len(raw) <= limit:
        return CappedOutput(to_text(raw), False)
    head, tail = raw[: limit // 2], raw[len(raw) - limit // 2 :]
    cut = raw[len(head) : len(raw) - len(tail)]
    lines = cut.count(b"\n")
    note = f"\n[... {len(cut)} bytes ({lines} lines) cut from the middle of {len(raw)} bytes ...]\n"
    return CappedOutput(to_text(head) + note + to_text(tail), True)


def looks_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB is what grep and git use to call a file binary."""
    return b"\0" in data[:8192]


class HeadTailBuffer:
    """Collects a stream of output in bounded memory: the first ``limit // 2`` bytes and the last
    ``limit - limit // 2`` (together ``limit``: output of exactly the limit is never cut)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - (self.limit - self.limit // 2))]

    def result(self) -> CappedOutput:
        if self.total <= len(self.head) + len(self.tail):
            return cap(bytes(self.head + self.tail), self.limit)
        cut = self.total - len(self.head) - len(self.tail)
        note = f"\n[... {cut} bytes cut from the middle of {self.total} bytes ...]\n"
        return CappedOutput(to_text(bytes(self.head)) + note + to_text(bytes(self.tail)), True)
