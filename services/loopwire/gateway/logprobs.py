"""Output tokens' log-probabilities as text, and the think block's share of the output.

The replica sends token ids with their log-probabilities; clients read tokens as text, shaped as
OpenAI's ``logprobs`` entries: ``token`` (the token's bytes as UTF-8, a byte that is not part of
a whole character written as a ``\\xNN`` escape, as OpenAI does), ``bytes`` (the raw bytes, so
split characters can be joined), ``logprob`` and the ``top_logprobs`` alternatives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loopwire.common.model_def import ModelDefinition
from loopwire.gateway.detokenizer import TokenBytes
from loopwire.v1 import inference_pb2


def token_text(data: bytes) -> str:
    """A token's bytes as text: UTF-8, undecodable bytes as ``\\xNN`` (never U+FFFD, which would lose them)."""
    return data.decode("utf-8", "backslashreplace")


class TextLogprobs:
    """Turns a replica's ``TokenLogprobs`` into ``TextTokenLogprob`` fields (dicts: upb builds
    them in place)."""

    def __init__(self, model: ModelDefinition) -> None:
        self._bytes = TokenBytes(model.tokenizer)

    def entry(self, token: int, lp: inference_pb2.TokenLogprobs) -> dict[str, Any]:
        data = self._bytes.join((token,))
        return {"token": token_text(data), "bytes": data, "logprob": lp.logprob,
                "top_logprobs": [self._candidate(c.token_id, c.logprob) for c in lp.top]}

    def _candidate(self, token: int, logprob: float) -> dict[str, Any]:
        data = self._bytes.join((token,))
        return {"token": token_text(data), "bytes": data, "logprob": logprob}


def reasoning_tokens(model: ModelDefinition, generated: Sequence[int], thought: bool) -> int:
    """Output tokens of the think block, markers included: those up to the one that completes the
    closer (every output token but the stop token when it never closed); 0 when the output did not
    open one (``thought``) or the template does not think."""
    markers = model.template.think
    if markers is None or not thought:
        return 0
    closer = markers[1].encode()
    stops = frozenset(model.stop_token_ids)
    token_bytes = TokenBytes(model.tokenizer)
    seen = bytearray()
    count = 0
    for token in generated:
        if token in stops:
            break
        count += 1
        before = len(seen)
        seen += token_bytes.join((token,))
        if seen.find(closer, max(0, before - len(closer) + 1)) >= 0:
            break
    return count
