"""What a conversation summary is asked to be, and when one is unusable.

Shared by the harness's compaction and the api's ``/v1/responses/compact``: the same request to
the model, and the same rule for a summary to drop (a small model loops until its cap).
"""

from __future__ import annotations

import re

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


def degenerate(text: str, output_tokens: int, max_tokens: int, finish_reason: int = 0) -> str:
    """Why a summary is unusable ('' when it is not): it hit the output cap (cut off, and small
    models loop until they do), or it repeats the same sentences or phrases."""
    if finish_reason == common_pb2.FINISH_REASON_LENGTH or (max_tokens and output_tokens >= max_tokens):
        return f"it hit the {max_tokens}-token output cap"
    sentences = [s.strip().lower() for s in _SENTENCE.split(text) if len(s.strip()) > 8]
    if len(sentences) >= 4 and len(set(sentences)) * 2 <= len(sentences):
        return f"it repeats itself ({len(set(sentences))} distinct of {len(sentences)} sentences)"
    words = text.lower().split()
    grams = [tuple(words[i:i + 6]) for i in range(len(words) - 5)]
    if len(grams) >= 40 and len(set(grams)) * 2 <= len(grams):
        return f"it repeats itself ({len(set(grams))} distinct of {len(grams)} 6-word phrases)"
    return ""
