"""The gateway's per-token log-probabilities as OpenAI's ``logprobs`` entries.

Both APIs use one entry shape: ``token``, ``bytes`` (the token's UTF-8 bytes as integers: a
character split over tokens is joined from them), ``logprob`` and ``top_logprobs``; the
Responses API puts a list of them on ``output_text`` parts and deltas, Chat Completions under
``logprobs.content``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from loopwire.v1 import gateway_pb2


def entries(logprobs: Iterable[gateway_pb2.TextTokenLogprob]) -> list[dict[str, Any]]:
    return [{"token": e.token, "bytes": list(e.bytes), "logprob": e.logprob,
             "top_logprobs": [{"token": c.token, "bytes": list(c.bytes), "logprob": c.logprob}
                              for c in e.top_logprobs]}
            for e in logprobs]
