"""Helpers of the inference unit tests: small engines, a step-until-idle driver, prompts."""

from __future__ import annotations

import numpy as np

from loopwire.inference.config import EngineConfig
from loopwire.inference.engine_core import EngineCore
from loopwire.inference.model import LlamaModel
from loopwire.inference.reference_engine import reference_core
from loopwire.inference.sequence import Finished, GenerationRequest


def make_core(model: LlamaModel, **changes: object) -> EngineCore:
    config = EngineConfig(model=model.config, num_kv_blocks=256, max_batch_tokens=256).with_(**changes)
    return reference_core(config, model)


def run_all(core: EngineCore, requests: list[GenerationRequest]) -> tuple[dict[str, list[int]], dict[str, Finished]]:
    """Submit every request, step until idle; the tokens and the finish of each."""
    for r in requests:
        core.add(r)
    tokens: dict[str, list[int]] = {r.request_id: [] for r in requests}
    finished: dict[str, Finished] = {}
    while core.has_work():
        for out in core.step():
            tokens[out.request_id].extend(out.token_ids)
            if out.finished is not None:
                finished[out.request_id] = out.finished
    return tokens, finished


def repetitive_prompt(rng: np.random.Generator, length: int, alphabet: int = 50) -> list[int]:
    """Text-like ids with repeated phrases, so prompt lookup finds n-grams."""
    phrases = [list(rng.integers(0, alphabet, rng.integers(3, 9))) for _ in range(6)]
    out: list[int] = []
    while len(out) < length:
        out += phrases[int(rng.integers(0, len(phrases)))]
    return [int(t) for t in out[:length]]
