"""What a conversation summary is asked to be, when one is unusable, and what stands in for it.

Shared by the harness's compaction and the api's ``/v1/responses/compact``: the same request to
the model, and the same rule for a summary to drop (a small model loops until its cap). Where the
harness then masks its log, the api, which must answer with one ``compaction`` item, writes the
conversation as masked text instead (``masked_history``): deterministic, so compaction never
fails because the model is weak.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from loopwire.common import masking
from loopwire.v1 import common_pb2

SUMMARY_INSTRUCTIONS = (
    "You compact the history of a coding agent's session so it can continue in a shorter context. "
    "Write a summary for the agent itself: the task, what was done and found (files, commands, "
    "results, errors), decisions made, and what remains to do. Be specific (paths, names, numbers); "
    "no preamble."
)
SUMMARY_REQUEST = "Summarize the conversation above, as instructed, so the work can continue from the summary."
# The output cap of a summary call (the harness's --summary-max-tokens default).
SUMMARY_MAX_TOKENS = 1024
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# Prose compresses (zlib) to about half its length; a loop ("1. 1. 1. 2. 2. 2. ...") to a
# seventh or less. Checked from this many bytes on (a short text compresses poorly anyway).
_LOOP_BYTES = 256
_LOOP_RATIO = 0.25


def degenerate(text: str, output_tokens: int, max_tokens: int, finish_reason: int = 0) -> str:
    """Why a summary is unusable ('' when it is not): it hit the output cap (cut off, and small
    models loop until they do), or it repeats the same sentences, phrases or characters."""
    if finish_reason == common_pb2.FINISH_REASON_LENGTH or (max_tokens and output_tokens >= max_tokens):
        return f"it hit the {max_tokens}-token output cap"
    sentences = [s.strip().lower() for s in _SENTENCE.split(text) if len(s.strip()) > 8]
    if len(sentences) >= 4 and len(set(sentences)) * 2 <= len(sentences):
        return f"it repeats itself ({len(set(sentences))} distinct of {len(sentences)} sentences)"
    words = text.lower().split()
    grams = [tuple(words[i:i + 6]) for i in range(len(words) - 5)]
    if len(grams) >= 40 and len(set(grams)) * 2 <= len(grams):
        return f"it repeats itself ({len(set(grams))} distinct of {len(grams)} 6-word phrases)"
    raw = text.encode("utf-8")
    packed = len(zlib.compress(raw, 9)) if len(raw) >= _LOOP_BYTES else len(raw)
    if packed < _LOOP_RATIO * len(raw):
        return f"it repeats itself (it compresses to {100 * packed // len(raw)}% of its length)"
    return ""


def masked_history(items: Sequence[common_pb2.Item], why: str, max_tokens: int, entry_tokens: int = 256) -> str:
    """What stands in for an unusable summary of `items`: the conversation as text, masked as the
    harness masks its log (each tool output the model has read becomes a one-line pointer where
    that is shorter; any other entry over `entry_tokens` keeps a head and a tail), only the newest
    entries that fit in `max_tokens` (cl100k), and the first and latest user messages left out:
    the compaction keeps those verbatim beside it."""
    users = [i for i, x in enumerate(items) if x.WhichOneof("item") == "message" and x.message.role == common_pb2.ROLE_USER]
    kept = set(users[:1] + users[1:][-1:])
    names = {x.function_call.call_id: x.function_call.name for x in items if x.WhichOneof("item") == "function_call"}
    fresh = masking.unseen(items)
    lines: list[str] = []
    for i, x in enumerate(items):
        kind = x.WhichOneof("item")
        if i in kept:
            continue
        if kind == "message":
            head = common_pb2.Role.Name(x.message.role).removeprefix("ROLE_").lower()
            text = "".join(p.text for p in x.message.content)
        elif kind == "function_call":
            head, text = f"call {x.function_call.name} ({x.function_call.call_id})", x.function_call.arguments
        elif kind == "function_call_output":
            out = x.function_call_output
            head, text = f"output of {out.call_id}", out.output
            pointer = masking.elided(out.call_id, names.get(out.call_id, ""), masking.count(text))
            if i < fresh and masking.count(pointer) < masking.count(text):
                text = pointer
        elif kind == "compaction_summary":
            head, text = "summary of earlier turns", x.compaction_summary.summary
        else:
            head, text = "tools found", ", ".join(t.name for t in x.tool_search_output.tools)
        if masking.count(text) > entry_tokens:
            text = masking.cut(text, entry_tokens)
        lines.append(f"{head}: {text}")
    shown: list[str] = []
    budget = max_tokens
    for line in reversed(lines):
        budget -= masking.count(line) + 1
        if budget < 0:
            break
        shown.append(line)
    dropped = len(lines) - len(shown)
    header = (f"[No summary was written ({why}). The conversation so far, with the tool outputs already "
              f"read elided{f' and its {dropped} oldest entries dropped' if dropped else ''}:]")
    return "\n".join([header, *reversed(shown)])
