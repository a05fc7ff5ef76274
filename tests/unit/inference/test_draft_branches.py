"""Draft branches (DESIGN §4): alternatives verified as forks of their sequence leave greedy
output unchanged whichever branch wins, give every fork's blocks back, and sampled
verification over several branches draws each token from the target's distribution."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from inference_helpers import make_core, repetitive_prompt, run_all

from loopwire.inference.drafter import Draft
from loopwire.inference.sampling import SamplingSettings, target_probs, verify, verify_branches
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.suffix_tree import SuffixDrafter


class _KnowsTheAnswer:
    """Drafts whose favourite branch is always wrong and one of whose alternatives holds the true
    continuation (a true head, then anything): the fork has to win for any draft to be accepted."""

    name = "knows"

    def __init__(self, rng: np.random.Generator, vocab: int, answers: dict[tuple[int, ...], list[int]]) -> None:
        self.rng, self.vocab, self.answers = rng, vocab, answers

    def open(self, token_ids, session_id: str = "", namespace: str = "", base=None):  # type: ignore[no-untyped-def]
        return _Knowing(self, list(token_ids), self.answers[tuple(token_ids)])


class _Knowing:
    def __init__(self, drafter: _KnowsTheAnswer, tokens: list[int], answer: list[int]) -> None:
        self.d, self.tokens, self.answer = drafter, tokens, answer

    def extend(self, token_ids: Sequence[int]) -> None:
        self.tokens += list(token_ids)

    def propose(self, k: int, branches: int = 1) -> Draft:
        truth = self.answer[len(self.tokens):][:k]
        if not truth or branches < 2:
            return Draft([])
        rng, vocab = self.d.rng, self.d.vocab

        def tail(n: int) -> list[int]:
            return [int(t) for t in rng.integers(0, vocab, int(rng.integers(0, n + 1)))]

        wrong = (truth[0] + int(rng.integers(1, vocab))) % vocab
        head = int(rng.integers(1, len(truth) + 1))
        right = truth[:head] + tail(k - head)
        firsts = [t for t in rng.permutation(vocab) if t not in (wrong, truth[0])][: int(rng.integers(0, branches - 1))]
        alternatives = [[int(t), *tail(k - 1)] for t in firsts]
        alternatives.insert(int(rng.integers(0, len(alternatives) + 1)), right)
        return Draft([wrong, *tail(k - 1)], alternatives=alternatives)

    def finish(self) -> None:
        pass


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_winning_fork_gives_the_plain_output_and_its_blocks_become_the_sequences(tiny_model, seed: int) -> None:
    """Every accepted draft comes from a fork, so every later token is computed on K/V a fork
    wrote (the adopted blocks, the copied partial block among them): any slip shows in the output."""
    rng = np.random.default_rng(seed)
    prompts = [repetitive_prompt(rng, int(rng.integers(2, 40)), alphabet=12) for _ in range(3)]
    plain, _ = run_all(make_core(tiny_model), [GenerationRequest(f"r{i}", p, 24, speculative=False)
                                              for i, p in enumerate(prompts)])
    answers = {tuple(p): p + plain[f"r{i}"] for i, p in enumerate(prompts)}
    core = make_core(tiny_model, num_draft_tokens=6, draft_branches=4, draft_length="fixed")
    core.drafter = _KnowsTheAnswer(rng, tiny_model.config.vocab_size, answers)
    spec, fin = run_all(core, [GenerationRequest(f"r{i}", p, 24) for i, p in enumerate(prompts)])
    assert spec == plain
    usage = [f.usage for f in fin.values()]
    assert sum(u.draft_tokens_accepted for u in usage) > 0
    assert sum(u.verification_steps for u in usage) < sum(u.output_tokens for u in usage)
    assert core.blocks.num_used == 0, "a fork's blocks were not given back"


def test_forks_without_free_blocks_are_dropped_and_the_output_stays_the_same(tiny_model) -> None:
    """Forks never preempt: with blocks for little more than the sequence itself most of its
    alternatives are dropped (fewer drafts proposed, fewer accepted, as every accepted one needs a
    fork), and the output never moves."""
    prompt = repetitive_prompt(np.random.default_rng(3), 70, alphabet=6)
    plain, _ = run_all(make_core(tiny_model), [GenerationRequest("r", prompt, 20, speculative=False)])
    answers = {tuple(prompt): prompt + plain["r"]}

    def usage(blocks: int) -> tuple[int, int]:
        core = make_core(tiny_model, num_kv_blocks=blocks, block_size=16, num_draft_tokens=4, draft_branches=4,
                         draft_length="fixed")
        core.drafter = _KnowsTheAnswer(np.random.default_rng(0), tiny_model.config.vocab_size, answers)
        spec, fin = run_all(core, [GenerationRequest("r", prompt, 20)])
        assert spec == plain
        assert core.blocks.num_used == 0
        return fin["r"].usage.draft_tokens_proposed, fin["r"].usage.draft_tokens_accepted

    tight, ample = usage(7), usage(64)  # the sequence ends holding 6 blocks
    assert tight[0] < ample[0] and tight[1] < ample[1], (tight, ample)


@settings(max_examples=40, deadline=None)
@given(logits=st.lists(st.floats(-4, 4), min_size=6, max_size=6), data=st.data())
def test_greedy_verification_follows_the_branch_of_the_argmax(logits: list[float], data: st.DataObject) -> None:
    vocab = 6
    row = np.asarray(logits)
    firsts = data.draw(st.lists(st.integers(0, vocab - 1), min_size=2, max_size=4, unique=True))
    drafts = [[f, *data.draw(st.lists(st.integers(0, vocab - 1), max_size=3))] for f in firsts]
    rows = [np.stack([row, *data.draw(st.lists(st.just(np.roll(row, 1)), min_size=len(d), max_size=len(d)))])
            for d in drafts]
    out, j = verify_branches(rows, drafts, SamplingSettings(), np.random.default_rng(0))
    best = int(np.argmax(row))
    assert out[0] == best
    if best in firsts:
        assert j == firsts.index(best)
        assert out == verify(rows[j], Draft(drafts[j]), SamplingSettings(), np.random.default_rng(0))
    else:
        assert (j, out) == (0, [best])


def test_sampled_verification_over_branches_draws_from_the_target() -> None:
    """Frequencies of the first token and of the second given the first, against the target's
    probabilities from their definition (softmax at the temperature): 40,000 draws, seeds fixed."""
    temperature, vocab = 0.8, 5
    first = np.log(np.asarray([0.30, 0.25, 0.20, 0.15, 0.10])) * temperature
    second = np.log(np.asarray([0.10, 0.50, 0.20, 0.10, 0.10])) * temperature
    drafts = [[1, 1], [0, 3], [3]]  # three branches: first tokens 1, 0 and 3
    rows = [np.stack([first, second, second]), np.stack([first, second, second]), np.stack([first, second])]
    sampling = SamplingSettings(temperature=temperature)
    p1 = target_probs(first[None], sampling)[0]
    p2 = target_probs(second[None], sampling)[0]
    n = 40_000
    counts = np.zeros(vocab)
    seconds = {b: np.zeros(vocab) for b in (1, 0)}
    for i in range(n):
        out, j = verify_branches(rows, drafts, sampling, np.random.default_rng(i))
        assert out[0] == drafts[j][0] or j == 0
        counts[out[0]] += 1
        if out[0] in seconds and len(out) > 1:
            seconds[out[0]][out[1]] += 1
    sigma = np.sqrt(p1 * (1 - p1) / n)
    assert np.all(np.abs(counts / n - p1) < 5 * sigma), counts / n
    for b, c in seconds.items():  # after branch b's first token, the next is the target's too
        m = c.sum()
        assert m > 0.5 * p1[b] * n
        assert np.all(np.abs(c / m - p2) < 5 * np.sqrt(p2 * (1 - p2) / m)), (b, c / m)


def test_suffix_alternatives_start_with_the_runners_up() -> None:
    """After "0 1 2" the context continued with 3 three times, 4 twice and 5 once (and "9 0 1 2"
    is new): the favourite branch starts with 3, its alternatives with 4 and then 5, and one
    branch is what it was."""
    drafter = SuffixDrafter()
    text = [0, 1, 2, 3, 0, 1, 2, 4, 0, 1, 2, 3, 0, 1, 2, 5, 0, 1, 2, 4, 0, 1, 2, 3, 9, 0, 1, 2]
    ctx = drafter.open(text)
    one, three = ctx.propose(4, 1), ctx.propose(4, 3)
    assert one.alternatives == [] and three.token_ids == one.token_ids
    assert [b[0] for b in [three.token_ids, *three.alternatives]] == [3, 4, 5]
    assert three.alternatives[0][:2] == [4, 0]
