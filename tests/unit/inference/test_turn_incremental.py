"""A stream's turn costs O(new tokens): the incremental paths (held block hashes and sequence
hash extended by each append, parked blocks taken over by the next turn) must equal the full
recomputation after any sequence of turns, cancels, evictions and stream ends."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.hashing import SequenceHash, block_hashes, salted_root
from loopwire.common.model_def import dummy_definition
from loopwire.inference.config import EngineConfig
from loopwire.inference.cost_model import CostModel
from loopwire.inference.engine_core import EngineCore
from loopwire.inference.sequence import FinishReason, GenerationRequest
from loopwire.inference.simulated_engine import simulated_core
from loopwire.inference.validation import HeldSequence, resolve_prompt
from loopwire.v1 import inference_pb2

BS = 4
VOCAB = 50
ids = st.lists(st.integers(0, VOCAB - 1), max_size=3 * BS + 2)


@settings(max_examples=300, deadline=None)
@given(first=ids.filter(bool), appends=st.lists(st.tuples(ids, ids), max_size=6), salt=st.sampled_from(["", "t"]))
def test_appended_prompts_hash_like_the_whole_prompt(first, appends, salt) -> None:
    """resolve_prompt's hashes of an append (held ones + new) == hashing the whole prompt."""
    start = inference_pb2.GenerationStart(full=inference_pb2.FullPrompt(token_ids=first), cache_salt=salt)
    got = resolve_prompt(start, None, VOCAB, BS)
    held, whole = None, list(first)
    for new, output in [((), ()), *appends]:
        if held is not None:
            start = inference_pb2.GenerationStart(cache_salt=salt, append=inference_pb2.AppendPrompt(
                base_length=held.length, base_hash=held.seq_hash.value, token_ids=new))
            got = resolve_prompt(start, held, VOCAB, BS)
            whole += new
        tokens = got.token_ids()
        assert tokens == whole and got.length == len(whole)
        assert got.seq_hash.value == SequenceHash().extend(whole).value
        assert got.block_hashes == block_hashes(whole, BS, salted_root(salt))
        tokens += output  # the engine appends the output to the prompt list
        whole += output
        done = len(got.block_hashes) // 2  # the engine commits some of the blocks; the rest is extended
        hashes = got.block_hashes[:done]
        parent = hashes[-1] if hashes else salted_root(salt)
        hashes += block_hashes(whole[done * BS : len(whole) // BS * BS], BS, parent)
        held = HeldSequence(tokens, len(whole), got.seq_hash.copy().extend(output), salt, hashes)
        assert held.block_hashes == block_hashes(whole, BS, salted_root(salt))


def _core(num_blocks: int) -> EngineCore:
    cost = CostModel.named("h200", "8b")
    config = EngineConfig(model=cost.model, num_kv_blocks=num_blocks, block_size=BS, max_batch_tokens=64,
                          max_running=8, num_draft_tokens=0)
    return simulated_core(config, cost, dummy_definition())[0]


def _run(core: EngineCore, req: GenerationRequest, cancel_after: int | None) -> tuple[list[int], object]:
    core.add(req)
    out: list[int] = []
    for step in range(10_000):
        if cancel_after is not None and step == cancel_after:
            core.cancel(req.request_id)
        for o in core.step():
            out += o.token_ids
            if o.finished is not None:
                return out, o.finished
    raise AssertionError("never finished")


turns = st.lists(st.tuples(st.lists(st.integers(1, VOCAB - 1), min_size=1, max_size=3 * BS),
                           st.integers(1, 6), st.none() | st.integers(0, 3), st.booleans(),
                           st.none() | st.integers(0, 3 * BS)),
                 min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(turns=turns, num_blocks=st.sampled_from([6, 12, 64]))
def test_parked_turns_equal_matching_the_whole_prompt(turns, num_blocks) -> None:
    """The same turns on two engines, one stream parking its blocks and passing held hashes,
    the other matching every whole prompt from scratch: the same tokens, and with room for
    everything the same cache hits; each turn's blocks are those of its whole sequence."""
    parked, plain = _core(num_blocks), _core(num_blocks)
    sequence: list[int] = []
    held_hashes: list[int] = []
    parked_hashes: list[int] = []  # of the sequence of the last turn that parked
    for n, (new, max_tokens, cancel_after, other_stream, keep) in enumerate(turns):
        if keep is not None:  # a full prompt that rewrites the stream's history: what it parked is stale
            sequence, held_hashes = sequence[:keep], block_hashes(sequence[:keep], BS)
        prompt = sequence + new
        if -(-(len(prompt) + max_tokens) // BS) > num_blocks:
            break  # the service refuses what could never fit (check_capacity)
        base = GenerationRequest(f"t{n}", list(prompt), max_tokens, speculative=False)
        if other_stream:  # another session's turn: its blocks compete for the same pool
            _run(parked, replace(base, request_id=f"o{n}"), None)
            _run(plain, replace(base, request_id=f"o{n}"), None)
            continue
        hashes = held_hashes + block_hashes(prompt[len(held_hashes) * BS :], BS, held_hashes[-1] if held_hashes else 0)
        assert hashes == block_hashes(prompt, BS)
        a_out, a = _run(parked, replace(base, prompt=list(prompt), block_hashes=hashes, park_key="s",
                                        hand_over_prompt=True), cancel_after)
        b_out, b = _run(plain, base, cancel_after)
        assert a_out == b_out and a.token_ids == b.token_ids == prompt + a_out
        if num_blocks == 64:  # no eviction: parking changes nothing the caller sees
            assert a.usage.cached_input_tokens == b.usage.cached_input_tokens
        assert a.block_hashes == block_hashes(a.token_ids, BS)[: len(a.block_hashes)]
        if a.reason is not FinishReason.CANCELLED:
            sequence = a.token_ids
            held_hashes = parked_hashes = block_hashes(sequence, BS)
        parked_ids = parked.blocks._parked.get("s")
        if parked_ids is not None:  # what is parked is the prefix of the stream's sequence, cached
            got = [parked.blocks.blocks[b].hash for b in parked_ids.block_ids]
            assert all(h in (0, w) for h, w in zip(got, parked_hashes, strict=False)) and len(got) <= len(parked_hashes)
            assert all(parked.blocks.blocks[b].ref >= 1 for b in parked_ids.block_ids)
    parked.blocks.drop_parked("s")
    for core in (parked, plain):
        assert core.blocks.num_used == 0 and core.blocks.num_parked == 0 and not core.seqs
    if num_blocks == 64:
        assert set(parked.blocks.cached_hashes()) == set(plain.blocks.cached_hashes())
