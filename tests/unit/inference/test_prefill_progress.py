"""A prefill split into chunks tells how far it has come after each chunk that does not end it:
increasing, below the prompt's length, and never after the first output token."""

from __future__ import annotations

import pytest
from inference_helpers import make_core

from loopwire.inference.sequence import GenerationRequest


@pytest.mark.parametrize("cached", [False, True])
def test_progress_counts_prompt_tokens_with_kv_in_order(tiny_model, cached) -> None:
    core = make_core(tiny_model, num_kv_blocks=512, max_batch_tokens=256)
    prompt = list(range(1000, 2100))
    if cached:  # the first 512 tokens are cached: progress starts beyond them
        core.add(GenerationRequest("warm", prompt[:520], 1, cache_salt="s"))
        while core.has_work():
            core.step()
    core.add(GenerationRequest("long", prompt, 3, cache_salt="s"))
    seen: list[int] = []
    first_token_at = None
    while core.has_work():
        for out in core.step():
            if out.request_id != "long":
                continue
            if out.prefilled:
                assert first_token_at is None and not out.token_ids
                seen.append(out.prefilled)
            if out.token_ids and first_token_at is None:
                first_token_at = len(seen)
    assert first_token_at == len(seen) and seen == sorted(set(seen)) and seen[-1] < len(prompt)
    chunk = core.scheduler.prefill_chunk
    assert len(seen) == -(-(len(prompt) - (512 if cached else 0)) // chunk) - 1
    assert seen[0] == (512 if cached else 0) + chunk
