"""Suffix decoding: the automaton's counts against brute force, drafts that continue real
occurrences, the shared store's memory bound and oldest-first eviction, tenant isolation,
and lossless greedy speculation on random and recorded sessions (DESIGN §4)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inference_helpers import make_core, repetitive_prompt, run_all
from test_engine_core import _session_prompts

from loopwire.inference.drafter import Draft
from loopwire.inference.sequence import GenerationRequest
from loopwire.inference.suffix_tree import SharedOutputs, SuffixAutomaton, SuffixDrafter, SuffixSettings


def _occurrences(text: list[int], pattern: list[int]) -> int:
    n = len(pattern)
    return sum(text[i : i + n] == pattern for i in range(len(text) - n + 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=80), st.data())
def test_state_counts_equal_brute_force_occurrences(text: list[int], data: st.DataObject) -> None:
    sam = SuffixAutomaton()
    split = data.draw(st.integers(0, len(text)))
    sam.extend(text[:split])  # appends in two pieces: the automaton is online
    sam.extend(text[split:])
    start = data.draw(st.integers(0, len(text) - 1))
    pattern = text[start : start + data.draw(st.integers(1, 6))]
    state, matched = sam.match(pattern)
    assert matched == len(pattern)
    assert sam.count[state] == _occurrences(text, pattern)
    absent = [*pattern, 9]
    assert sam.match(absent)[1] < len(absent)
    assert sam.num_states <= 2 * len(text)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=80), st.integers(1, 12))
def test_session_drafts_continue_an_earlier_occurrence_of_a_matched_suffix(text: list[int], k: int) -> None:
    settings_ = SuffixSettings(min_match=1, max_spec_factor=2.0)
    ctx = SuffixDrafter(settings_).open(text)
    draft = ctx.propose(k).token_ids
    assert len(draft) <= k
    if draft:
        p = ctx.sam.length[ctx.sam.link[ctx.sam.last]]  # the longest match
        assert len(draft) <= int(settings_.max_spec_factor * p)
        # some suffix of the context (the longest match or a shorter one that voted) followed by the
        # whole draft occurs somewhere before the end
        assert any(_occurrences(text, [*text[len(text) - m :], *draft]) for m in range(1, p + 1))


def test_draft_length_follows_how_often_the_continuation_occurred() -> None:
    drafter = SuffixDrafter(SuffixSettings(min_token_prob=0.3))
    for _ in range(5):  # a frequent output: drafted in full
        ctx = drafter.open([7, 7], "")
        ctx.extend([10, 11, 12, 13, 14, 15])
        ctx.finish()
    ctx = drafter.open([99, 98, 10, 11], "")
    assert ctx.propose(8).token_ids == [12, 13, 14, 15]
    # the same pattern followed by four different continuations: no continuation is likely enough
    other = SuffixDrafter(SuffixSettings(min_token_prob=0.3))
    for tail in ([20, 21], [30, 31], [40, 41], [50, 51]):
        ctx = other.open([7, 7], "")
        ctx.extend([10, 11, *tail])
        ctx.finish()
    assert other.open([99, 98, 10, 11], "").propose(8).token_ids == []
    # the long match earns a longer draft than a one-token match (adaptive length)
    short = SuffixDrafter(SuffixSettings(max_spec_factor=2.0))
    ctx = short.open([0], "")
    ctx.extend([5, 1, 2, 3, 4, 5, 6, 7, 8, 9])  # its output
    ctx.finish()
    assert len(short.open([42, 1], "").propose(8).token_ids) == 2
    assert len(short.open([42, 1, 2, 3], "").propose(8).token_ids) == 6


def test_shared_outputs_stay_within_budget_and_evict_oldest_first() -> None:
    rng = np.random.default_rng(0)
    store = SharedOutputs(max_tokens=500)
    added: list[list[int]] = []
    for i in range(200):
        doc = [int(t) for t in rng.integers(0, 50, int(rng.integers(1, 40)))]
        store.add(f"ns{i % 3}", doc)
        added.append(doc)
        assert store.num_tokens <= 500
        # automaton size is linear in what it holds (each document adds a separator)
        assert store.num_states() <= 2 * (store.num_tokens + len(store.docs)) + len(store.automata)
    kept = [d.tokens for d in store.docs]
    assert kept == added[len(added) - len(kept) :]  # the newest, in order: the oldest went first
    assert sum(map(len, kept)) == store.num_tokens
    # what was evicted can no longer be drafted from: rebuilt automata hold only what is kept
    for ns, sam in store.automata.items():
        held = sum(len(d.tokens) + 1 for d in store.docs if d.namespace == ns)
        assert sam.num_tokens == held


def test_session_automata_kept_between_turns_stay_within_their_budget() -> None:
    drafter = SuffixDrafter(SuffixSettings(session_tokens=300))
    rng = np.random.default_rng(1)
    for i in range(100):
        prompt = [int(t) for t in rng.integers(0, 20, int(rng.integers(1, 120)))]
        ctx = drafter.open(prompt, f"s{i % 9}")
        ctx.extend([1, 2, 3])
        ctx.finish()
        kept = drafter._sessions
        assert drafter.cached_session_tokens == sum(len(c.tokens) for c in kept.values()) <= 300
        assert all(c.sam.num_tokens == len(c.tokens) for c in kept.values())
    assert list(drafter._sessions)[-1] == f"\x00s{99 % 9}"  # the most recent survives


def test_a_namespace_never_drafts_from_another() -> None:
    drafter = SuffixDrafter()
    ctx = drafter.open([1, 2], "a", namespace="tenant-a")
    ctx.extend([100, 101, 102, 103, 104, 105])
    ctx.finish()
    assert drafter.open([9, 100, 101], "b", namespace="tenant-a").propose(4).token_ids == [102, 103, 104, 105]
    assert drafter.open([9, 100, 101], "c", namespace="tenant-b").propose(4).token_ids == []


def test_a_session_context_is_extended_not_rebuilt_on_the_next_turn() -> None:
    drafter = SuffixDrafter()
    ctx = drafter.open([1, 2, 3, 4], "s")
    ctx.extend([5, 6])
    ctx.finish()
    sam = ctx.sam
    again = drafter.open([1, 2, 3, 4, 5, 6, 7, 8], "s")
    assert again.sam is sam and again.tokens == [1, 2, 3, 4, 5, 6, 7, 8]
    assert again.prompt_len == 8
    again.finish()
    forked = drafter.open([1, 2, 9], "s")  # not an extension: a fresh automaton
    assert forked.sam is not sam and forked.tokens == [1, 2, 9]


def _turns(prompts: list[list[int]], max_tokens: int, session: str, **req: object) -> list[GenerationRequest]:
    return [GenerationRequest(f"{session}-{i}", p, max_tokens, session_id=session, **req)  # type: ignore[arg-type]
            for i, p in enumerate(prompts)]


def _run_turns(core, requests: list[GenerationRequest]) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    out: dict[str, list[int]] = {}
    for r in requests:  # one turn after the other, as an agent loop sends them
        tokens, _ = run_all(core, [r])
        out.update(tokens)
    return out


@pytest.mark.parametrize("drafter", ["suffix", "prompt_lookup"])
@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 16))
def test_speculation_is_lossless_on_random_sessions(tiny_model, drafter: str, seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    prompts: list[list[int]] = []
    base = repetitive_prompt(rng, int(rng.integers(2, 60)), alphabet=12)
    for _ in range(3):  # each turn extends the last: the session automaton is reused
        prompts.append(list(base))
        base = base + repetitive_prompt(rng, int(rng.integers(1, 20)), alphabet=12)
    plain = _run_turns(make_core(tiny_model), _turns(prompts, 30, "s", speculative=False))
    core = make_core(tiny_model, drafter=drafter, num_draft_tokens=k)
    spec = _run_turns(core, _turns(prompts, 30, "s"))
    assert spec == plain


def test_suffix_speculation_is_lossless_on_recorded_sessions_and_drafts_from_them(tiny_model) -> None:
    prompts, _ = _session_prompts("sqlfluff__sqlfluff-2419.traj.json", 3)
    plain = _run_turns(make_core(tiny_model, num_kv_blocks=1024), _turns(prompts, 24, "s", speculative=False))
    core = make_core(tiny_model, num_kv_blocks=1024, drafter="suffix")
    # a second session on the same replica: its drafts may come from the first one's outputs
    spec = _run_turns(core, _turns(prompts, 24, "s"))
    again = _run_turns(core, _turns(prompts, 24, "t"))
    assert spec == plain
    assert list(again.values()) == list(plain.values())
    assert core.drafter.shared.num_tokens > 0  # type: ignore[attr-defined]


def test_replayed_turns_with_suffix_drafts_emit_exactly_the_recording(tiny_model) -> None:
    prompts, oracles = _session_prompts("sqlfluff__sqlfluff-2419.traj.json", 4)
    core = make_core(tiny_model, num_kv_blocks=1024, drafter="suffix", num_draft_tokens=16)
    steps = tokens = 0
    for i, (prompt, oracle) in enumerate(zip(prompts, oracles, strict=True)):
        got, fin = run_all(core, [GenerationRequest(f"r{i}", prompt, 4096, oracle=oracle, session_id="s")])
        assert got[f"r{i}"] == oracle
        steps += fin[f"r{i}"].usage.verification_steps
        tokens += fin[f"r{i}"].usage.output_tokens
    assert steps < tokens  # drafts were accepted


def test_live_requests_of_a_tenant_draft_from_each_other_never_from_another_tenant() -> None:
    drafter = SuffixDrafter()
    writer = drafter.open([1, 2], "w", namespace="tenant-a")
    writer.extend([100, 101, 102, 103, 104, 105])  # generating, not finished
    assert drafter.open([9, 100, 101], "a2", namespace="tenant-a").propose(4).token_ids == [102, 103, 104, 105]
    assert drafter.open([9, 100, 101], "b", namespace="tenant-b").propose(4).token_ids == []
    assert drafter.open([9, 100, 101], "c").propose(4).token_ids == []  # no salt is a namespace of its own
    writer.finish()
    assert "tenant-a" in drafter.live  # a2 is still live
    assert all(id(writer) not in live for live in drafter.live.values())


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_a_draft_never_holds_another_tenants_tokens(data: st.DataObject) -> None:
    """Both tenants write the ids 50..52; only A writes 100..102, only B 0..2. Whatever sequence
    of opens, extends, proposals and finishes, no draft of B holds an id only A writes, and the
    other way round, though the shared ids let their texts match."""
    drafter = SuffixDrafter(SuffixSettings(live_peers=3, shared_tokens=200))
    common = st.integers(50, 52)
    alphabet = {"a": st.one_of(st.integers(100, 102), common), "b": st.one_of(st.integers(0, 2), common)}
    live: list[tuple[str, object]] = []
    for _ in range(data.draw(st.integers(1, 25))):
        op = data.draw(st.sampled_from(["open", "extend", "finish", "propose"]))
        if op == "open" or not live:
            tenant = data.draw(st.sampled_from(["a", "b"]))
            prompt = data.draw(st.lists(alphabet[tenant], min_size=1, max_size=20))
            session = data.draw(st.sampled_from(["s1", "s2"]))  # the same session id in both tenants
            live.append((tenant, drafter.open(prompt, session, namespace=tenant)))
            continue
        i = data.draw(st.integers(0, len(live) - 1))
        tenant, ctx = live[i]
        if op == "extend":
            ctx.extend(data.draw(st.lists(alphabet[tenant], min_size=1, max_size=12)))  # type: ignore[attr-defined]
        elif op == "finish":
            ctx.finish()  # type: ignore[attr-defined]
            live.pop(i)
        else:
            draft = ctx.propose(data.draw(st.integers(1, 16))).token_ids  # type: ignore[attr-defined]
            foreign = range(0, 3) if tenant == "a" else range(100, 103)
            assert not [t for t in draft if t in foreign], (tenant, draft)


class _AnyDrafts:
    """A drafter whose proposals are drawn by hypothesis: arbitrary tokens, arbitrary lengths."""

    name = "any"

    def __init__(self, data: st.DataObject, vocab: int) -> None:
        self.data, self.vocab = data, vocab

    def open(self, token_ids, session_id: str = "", namespace: str = "", base=None):  # type: ignore[no-untyped-def]
        return self

    def extend(self, token_ids) -> None:  # type: ignore[no-untyped-def]
        pass

    def propose(self, k: int, branches: int = 1) -> Draft:
        tokens = st.integers(0, self.vocab - 1)
        main = self.data.draw(st.lists(tokens, max_size=k + 2))  # longer than asked: the scheduler cuts it
        # Alternatives of any length, first tokens possibly repeated (the scheduler drops those).
        alternatives = self.data.draw(st.lists(st.lists(tokens, min_size=1, max_size=k), max_size=branches - 1))
        return Draft(main, alternatives=alternatives)

    def finish(self) -> None:
        pass


@settings(max_examples=10, deadline=None)
@given(data=st.data(), seed=st.integers(0, 10_000))
def test_any_draft_leaves_the_output_unchanged(tiny_model, data: st.DataObject, seed: int) -> None:
    rng = np.random.default_rng(seed)
    prompts = [repetitive_prompt(rng, int(rng.integers(2, 40)), alphabet=12) for _ in range(3)]
    requests = [GenerationRequest(f"r{i}", p, 16, speculative=False) for i, p in enumerate(prompts)]
    plain, _ = run_all(make_core(tiny_model), requests)
    for branches in (1, 4):  # with alternatives, each verified as a fork of its sequence
        core = make_core(tiny_model, num_draft_tokens=8, draft_branches=branches, num_kv_blocks=data.draw(
            st.sampled_from([64, 4096]), label="kv blocks"))  # few blocks: forks find none and are dropped
        core.drafter = _AnyDrafts(data, tiny_model.config.vocab_size)
        spec, _ = run_all(core, [GenerationRequest(f"r{i}", p, 16) for i, p in enumerate(prompts)])
        assert spec == plain, branches
        assert core.blocks.num_used == 0, "a fork's blocks were not given back"


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_speculation_is_lossless_with_live_requests_of_one_tenant_drafting_from_each_other(tiny_model,
                                                                                          seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = repetitive_prompt(rng, 30, alphabet=10)
    prompts = [base + repetitive_prompt(rng, int(rng.integers(1, 12)), alphabet=10) for _ in range(4)]

    def requests(**req: object) -> list[GenerationRequest]:
        return [GenerationRequest(f"r{i}", p, 24, session_id=f"s{i}", cache_salt="t", **req)  # type: ignore[arg-type]
                for i, p in enumerate(prompts)]

    plain, _ = run_all(make_core(tiny_model), requests(speculative=False))
    core = make_core(tiny_model, drafter="suffix", num_draft_tokens=8)
    spec, fin = run_all(core, requests())  # all four live together: each drafts from the others' outputs
    assert spec == plain
    assert not core.drafter.live  # type: ignore[attr-defined]


def test_a_stream_turn_goes_on_from_its_finished_context_without_reading_the_prefix(tiny_model) -> None:
    """The engine hands each finish its draft context (weakly); the next turn naming it as its
    base continues that context's automaton and never reads the prefix it indexed."""
    core = make_core(tiny_model, drafter="suffix", num_draft_tokens=4)
    _, fin = run_all(core, [GenerationRequest("a", list(range(40)), 6, session_id="s")])
    first = fin["a"]
    assert first.draft is not None and first.draft() is not None
    kept = first.draft()

    class Prompt(list):  # type: ignore[type-arg]
        def __getitem__(self, i):  # type: ignore[no-untyped-def]
            assert not (isinstance(i, slice) and (i.start or 0) < len(first.token_ids)), "read the held prefix"
            return super().__getitem__(i)

    prompt = Prompt([*first.token_ids, 7, 8, 9])
    core.add(GenerationRequest("b", prompt, 6, session_id="s", draft_base=first.draft, hand_over_prompt=True))
    ctx = core.seqs["b"].draft
    assert ctx.sam is kept.sam and ctx.tokens == list(prompt)  # type: ignore[attr-defined,union-attr]
