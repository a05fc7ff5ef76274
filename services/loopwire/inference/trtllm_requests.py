"""What a request of the TensorRT-LLM engine maps to in TensorRT-LLM's LLM API: the speculative
config ``--drafter`` names, a request's ``KvCacheRetentionConfig``, the disaggregated params a
prefill hands to its decode, guided decoding, the replay oracle's logits processor, and the
per-token log-probabilities read back. Every TensorRT-LLM name comes in as ``api`` (from
``trtllm_engine.load_api``): nothing here imports the package."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any

from loopwire.inference.constraint import Grammar
from loopwire.inference.kv_host_tier import MIN_PRIORITY
from loopwire.inference.logprobs import TokenLogprobs, certain
from loopwire.inference.sequence import GenerationRequest, RetentionPolicy

# The draft checkpoint's keyword: ``speculative_model`` in current releases, ``speculative_model_dir`` before.
DRAFT_MODEL_KWARGS = ("speculative_model", "speculative_model_dir")


def _fields(cls: Any) -> set[str]:
    """Constructor keywords of a TensorRT-LLM config class (pydantic model or plain class)."""
    import inspect

    fields = getattr(cls, "model_fields", None)
    if fields:
        return set(fields)
    return set(inspect.signature(cls).parameters)


def speculative_config(api: Any, drafter: str, num_draft_tokens: int, draft_model: str) -> Any:
    """The speculative-decoding config ``--drafter`` names (None: no speculation)."""
    if num_draft_tokens <= 0:
        return None
    if drafter in ("prompt_lookup", "suffix"):
        return api.NGramDecodingConfig(max_draft_len=num_draft_tokens, max_matching_ngram_size=3, is_keep_all=True,
                                       is_use_oldest=False, is_public_pool=False)
    if drafter in ("draft_target", "eagle3"):
        if not draft_model:
            raise ValueError(f"--drafter {drafter} needs --draft-model (the draft checkpoint directory)")
        cls = api.DraftTargetDecodingConfig if drafter == "draft_target" else api.EagleDecodingConfig
        key = next((k for k in DRAFT_MODEL_KWARGS if k in _fields(cls)), DRAFT_MODEL_KWARGS[0])
        extra = {"eagle3_one_model": True} if drafter == "eagle3" else {}
        return cls(max_draft_len=num_draft_tokens, **{key: draft_model}, **extra)
    raise ValueError(f"unknown drafter {drafter!r} for trtllm; choose prompt_lookup, suffix, draft_target or eagle3")


def retention_config(api: Any, req: GenerationRequest) -> Any:
    """``KvCacheRetentionConfig`` of a request: its policy one to one, else its retention hint."""
    cls = api.KvCacheRetentionConfig
    policy: RetentionPolicy | None = req.retention
    if policy is not None:
        ranges = [cls.TokenRangeRetentionConfig(r.start, r.end, r.priority, _ms(r.duration_s))
                  for r in policy.token_ranges]
        return cls(ranges, policy.decode_priority, _ms(policy.decode_duration_s))
    if req.retention_seconds > 0:
        return cls([cls.TokenRangeRetentionConfig(0, None, 100, timedelta(seconds=req.retention_seconds))], 35)
    return None


def warm_up_retention(api: Any, num_tokens: int, priority: int, seconds: float) -> Any:
    """A warm-up's retention: its prefix of ``num_tokens`` at ``priority`` for ``seconds``, the scratch
    block after it lowest (dropped when evicted, never offloaded)."""
    cls = api.KvCacheRetentionConfig
    return cls([cls.TokenRangeRetentionConfig(0, num_tokens, priority, timedelta(seconds=seconds)),
                cls.TokenRangeRetentionConfig(num_tokens, None, MIN_PRIORITY, None)], MIN_PRIORITY)


def _ms(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def encode_disagg_state(params: Any) -> bytes:
    """A context-only request's DisaggregatedParams as bytes for the decode replica."""
    opaque = getattr(params, "opaque_state", None)
    return json.dumps({
        "ctx_request_id": getattr(params, "ctx_request_id", None),
        "first_gen_tokens": list(getattr(params, "first_gen_tokens", None) or []),
        "draft_tokens": list(getattr(params, "draft_tokens", None) or []) or None,
        "opaque_state": base64.b64encode(opaque).decode() if opaque is not None else None,
    }).encode()


def generation_params(api: Any, state: bytes) -> Any:
    """DisaggregatedParams for the generation-only half of a prefilled request."""
    data = json.loads(state)
    opaque = data.get("opaque_state")
    return api.DisaggregatedParams(
        request_type="generation_only", first_gen_tokens=data.get("first_gen_tokens") or None,
        ctx_request_id=data.get("ctx_request_id"), draft_tokens=data.get("draft_tokens"),
        opaque_state=base64.b64decode(opaque) if opaque is not None else None)


def guided_decoding(api: Any, grammar: Grammar) -> Any:
    """A request's constraint as TensorRT-LLM guided decoding (its llguidance backend)."""
    field = {"lark": "grammar", "json_schema": "json", "regex": "regex"}.get(grammar.kind)
    if field is None:
        raise ValueError(f"constraint form {grammar.kind!r} has no TensorRT-LLM guided decoding")
    return api.GuidedDecodingParams(**{field: grammar.source})


class OracleLogitsProcessor:
    """Forces the recorded tokens: every logit but the oracle's next token becomes -inf."""

    def __init__(self, oracle: list[int], prompt_len: int) -> None:
        self.oracle = oracle
        self.prompt_len = prompt_len

    def __call__(self, req_id: int, logits: Any, token_ids: list[list[int]], stream_ptr: Any, client_id: Any) -> None:
        import torch

        produced = len(token_ids[0]) - self.prompt_len
        if produced >= len(self.oracle):
            return
        mask = torch.full_like(logits, float("-inf"))
        mask[..., self.oracle[produced]] = 0
        logits.add_(mask)


def output_logprobs(completion: Any, start: int, tokens: list[int], k: int) -> list[TokenLogprobs]:
    """``TokenLogprobs`` of ``tokens``, the output from position ``start``, from TensorRT-LLM's
    per-token entries (dict token id -> Logprob with ``.logprob``, or a float). A sampled token
    missing from its dict (older releases report only the top k) gets the least reported value,
    an upper bound; a position not reported at all reads as probability 1."""
    entries = list(getattr(completion, "logprobs", None) or [])
    out = []
    for i, token in enumerate(tokens):
        entry = entries[start + i] if start + i < len(entries) else None
        if isinstance(entry, dict):
            values = {int(t): float(v if isinstance(v, (int, float)) else v.logprob) for t, v in entry.items()}
            ranked = sorted(values.items(), key=lambda tv: (-tv[1], tv[0]))[:k]
            out.append(TokenLogprobs(min(0.0, values.get(token, min(values.values(), default=0.0))), tuple(ranked)))
        elif isinstance(entry, (int, float)):
            out.append(TokenLogprobs(min(0.0, float(entry))))
        else:
            out.append(certain(token, k))
    return out
