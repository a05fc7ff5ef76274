"""Render only the new messages of a conversation with the model's chat template.

Rendering the whole conversation on every append costs time in its length (Jinja walks
every message). Chat templates are almost always a loop that renders each message on its
own, from the message and a little context: whether it is the first one
(``loop.first``, ``messages[0]``), the parity of its index, whether it is the last one.
So the text the new messages add is rendered in a *window*: the conversation's first
message, the messages of the last append or two (at an index of the same parity as in
the whole conversation), then the new messages. The window is trusted only when it proves
itself on the text held:

1. the first message alone renders as the start of the text held;
2. the window without the new messages renders as that start followed by exactly the text
   held for its messages (so the context it lacks did not change them);
3. with the new messages it extends that rendering (and the generation prompt extends it).

Any failed check (or a template error in the window) answers None and the caller renders
the whole conversation, which also catches templates that rewrite earlier turns. A
template's first windowed renderings in this process, and every one while a conversation
is short, are also compared with the full rendering; a template that ever differs is
marked and always rendered in full from then on.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loopwire.common.chat_template import ChatTemplate, ChatTemplateError

Message = dict[str, Any]

# A windowed rendering is also checked against a full one below this many characters of text,
# and for the first VERIFY_FIRST windowed renderings of each template in this process.
VERIFY_BELOW_CHARS = 2048
VERIFY_FIRST = 32
# How many append boundaries back a window may start.
MAX_LOOKBACK = 8

# Templates whose windowed rendering once differed from the full one: always rendered in full.
_unstable: weakref.WeakSet[ChatTemplate] = weakref.WeakSet()
_verified: weakref.WeakKeyDictionary[ChatTemplate, int] = weakref.WeakKeyDictionary()


def is_stable(template: ChatTemplate) -> bool:
    return template not in _unstable


def should_verify(template: ChatTemplate, text_len: int) -> bool:
    return text_len < VERIFY_BELOW_CHARS or _verified.get(template, 0) < VERIFY_FIRST


def verified(template: ChatTemplate, same: bool) -> None:
    """Record a comparison of a windowed rendering with the full one."""
    _verified[template] = _verified.get(template, 0) + 1
    if not same:
        _unstable.add(template)


@dataclass(frozen=True)
class Boundary:
    """An append boundary of the held text: this many messages rendered as this many characters."""

    messages: int
    text_len: int


class HeldText:
    """Text that grows at its end, held as the pieces it grew by: an append, a check of its start
    and a read of a recent tail cost what they touch, never a copy of the whole text (one
    ``str`` would be copied whole on every append)."""

    __slots__ = ("_pieces", "_ends")

    def __init__(self, text: str = "") -> None:
        self._pieces: list[str] = []
        self._ends: list[int] = []  # where each piece ends in the text
        self.append(text)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __str__(self) -> str:
        if len(self._pieces) > 1:  # joined once, then held as one piece
            self._pieces, self._ends = ["".join(self._pieces)], [len(self)]
        return self._pieces[0] if self._pieces else ""

    def copy(self) -> HeldText:
        other = HeldText()
        other._pieces, other._ends = list(self._pieces), list(self._ends)
        return other

    def append(self, text: str) -> None:
        if text:
            self._ends.append(len(self) + len(text))
            self._pieces.append(text)

    def slice(self, start: int, stop: int | None = None) -> str:
        """``str(self)[start:stop]`` for ``0 <= start``, reading only the pieces it spans."""
        stop = len(self) if stop is None else min(stop, len(self))
        if start >= stop:
            return ""
        i = bisect.bisect_right(self._ends, start)
        offset = self._ends[i - 1] if i else 0
        out = []
        while offset < stop:
            piece = self._pieces[i]
            out.append(piece[max(0, start - offset) : stop - offset])
            offset += len(piece)
            i += 1
        return "".join(out)

    def startswith(self, prefix: str) -> bool:
        return len(prefix) <= len(self) and self.slice(0, len(prefix)) == prefix

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` characters."""
        i = bisect.bisect_left(self._ends, length)
        if i == len(self._ends):
            return
        start = self._ends[i - 1] if i else 0
        cut = self._pieces[i][: length - start]
        del self._pieces[i:], self._ends[i:]
        self.append(cut)


def render_full(template: ChatTemplate, schemas: list[dict[str, Any]] | None,
                messages: list[Message]) -> tuple[str, str]:
    """The whole conversation's text, and that text with the generation prompt."""
    return template.render(messages, schemas, False), template.render(messages, schemas, True)


def render_appended(
    template: ChatTemplate,
    schemas: list[dict[str, Any]] | None,
    head: str,
    held: Sequence[Message],
    text: HeldText,
    boundaries: Sequence[Boundary],
    new: list[Message],
) -> tuple[str, str] | None:
    """(the text ``new`` adds to ``text``, the generation prompt after it) for ``held + new``,
    rendering only a window; None when the window cannot be trusted.

    ``head`` is the first held message rendered alone, ``text`` the held rendering, and
    ``boundaries`` the append boundaries of ``text``, oldest first.
    """
    n = len(held)
    if n < 2 or not new or not text.startswith(head):
        return None
    start = _window_start(boundaries, n)
    if start is None:
        return None
    context = [held[0], *held[start.messages:]]
    try:
        before = template.render(context, schemas, False)
        if before != head + text.slice(start.text_len):
            return None
        window = [*context, *new]
        after = template.render(window, schemas, False)
        prompted = template.render(window, schemas, True)
    except ChatTemplateError:
        return None
    if not after.startswith(before) or not prompted.startswith(after):
        return None
    return after[len(before):], prompted[len(after):]


def _window_start(boundaries: Sequence[Boundary], n: int) -> Boundary | None:
    """The latest boundary after the first message and before the last one whose message index
    has the parity it has in the window (1: odd), so index-parity templates render alike."""
    for b in reversed(boundaries[-MAX_LOOKBACK:]):
        if 1 <= b.messages < n and b.messages % 2 == 1:
            return b
    return None
