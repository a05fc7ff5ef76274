"""Fuzzing the checks of GenerationStart: any message either resolves to a valid prompt or
raises a RequestError that names a field (DESIGN §3 invariant 8)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.errors import RequestError
from loopwire.common.hashing import SequenceHash
from loopwire.inference.config import EngineConfig
from loopwire.inference.validation import HeldSequence, check_params, resolve_prompt
from loopwire.v1 import inference_pb2

VOCAB = 1000
CONFIG = EngineConfig(num_kv_blocks=64, block_size=16, max_output_tokens=512)
ids = st.lists(st.integers(0, 2**32 - 1) | st.integers(0, VOCAB - 1), max_size=20)


@st.composite
def starts(draw: st.DrawFn) -> inference_pb2.GenerationStart:
    start = inference_pb2.GenerationStart(request_id=draw(st.text(max_size=5)))
    kind = draw(st.sampled_from(["full", "append", "none"]))
    if kind == "full":
        start.full.token_ids.extend(draw(ids))
    elif kind == "append":
        start.append.base_length = draw(st.integers(0, 2**32 - 1) | st.just(3))
        start.append.base_hash = draw(st.integers(0, 2**64 - 1) | st.just(SequenceHash().extend([1, 2, 3]).value))
        start.append.token_ids.extend(draw(ids))
    p = start.params
    p.max_tokens = draw(st.integers(-(2**31), 2**31 - 1) | st.integers(1, 600))
    p.temperature = draw(st.floats(allow_nan=True, width=32))
    p.top_p = draw(st.floats(allow_nan=True, width=32))
    p.num_draft_tokens = draw(st.integers(0, 2**32 - 1) | st.integers(0, 10))
    p.stop_token_ids.extend(draw(ids))
    start.oracle_token_ids.extend(draw(ids))
    if draw(st.booleans()):
        start.kv_handle = b"h"
    return start


@settings(max_examples=400)
@given(start=starts(), held=st.booleans())
def test_every_start_is_accepted_or_rejected_with_a_named_field(start: inference_pb2.GenerationStart,
                                                                 held: bool) -> None:
    holding = HeldSequence([1, 2, 3], 3, SequenceHash().extend([1, 2, 3]), "", []) if held else None
    try:
        resolved = resolve_prompt(start, holding, VOCAB, CONFIG.block_size)
        check_params(start, resolved.length, CONFIG, VOCAB)
    except RequestError as e:
        assert e.field and e.message.startswith(e.field.split("[")[0])
        return
    prompt = resolved.token_ids()
    assert prompt and all(t < VOCAB for t in prompt) and resolved.seq_hash.length == len(prompt) == resolved.length
    assert 1 <= start.params.max_tokens <= CONFIG.max_output_tokens
    assert all(t < VOCAB for t in start.oracle_token_ids)
