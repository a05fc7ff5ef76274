"""Streaming detokenization: never emit broken UTF-8, never leak part of a stop string.

A token can end in the middle of a multi-byte character (emoji, CJK), so bytes are
carried across tokens until they decode. A stop string may arrive split over many
tokens, so the longest tail that could still grow into one is held back.
"""

from __future__ import annotations

import codecs
import weakref
from collections.abc import Callable, Sequence
from typing import Any

# Per tokenizer, the bytes of every token seen so far: a token's bytes are looked up once per
# process, then a batch is one dict lookup a token and one join (some tokenizers map each
# byte-level character on every call).
_BYTES: weakref.WeakKeyDictionary[Any, dict[int, bytes]] = weakref.WeakKeyDictionary()


class TokenBytes:
    """``tokenizer.token_bytes`` memoised and applied to a whole batch at once."""

    __slots__ = ("_cache", "_lookup")

    def __init__(self, tokenizer: Any) -> None:
        self._lookup: Callable[[int], bytes] = tokenizer.token_bytes
        try:
            cache = _BYTES.get(tokenizer)
            if cache is None:
                cache = _BYTES[tokenizer] = {}
        except TypeError:  # not weakly referenceable: a cache of this stream's own
            cache = {}
        self._cache = cache

    def join(self, token_ids: Sequence[int]) -> bytes:
        cache = self._cache
        try:
            return b"".join([cache[t] for t in token_ids])
        except KeyError:
            for t in token_ids:
                if t not in cache:
                    cache[t] = self._lookup(t)
            return b"".join([cache[t] for t in token_ids])


class Utf8Stream:
    """Bytes in, complete characters out; invalid bytes become U+FFFD only at the end."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopStringFilter:
    """Releases text up to (never including) the first stop string."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._longest = max((len(s) for s in self.stops), default=0)
        self._pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self.stops:
            return text
        self._pending += text
        hits = [i for i in (self._pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            out = self._pending[: min(hits)]
            self._pending = ""
            self.stopped = True
            return out
        hold = self._held_tail()
        out = self._pending[: len(self._pending) - hold]
        self._pending = self._pending[len(self._pending) - hold :]
        return out

    def flush(self) -> str:
        """The text ended without a stop string: release what was held back."""
        out, self._pending = self._pending, ""
        return "" if self.stopped else out

    def _held_tail(self) -> int:
        pending = self._pending
        for n in range(min(self._longest - 1, len(pending)), 0, -1):
            tail = pending[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0
