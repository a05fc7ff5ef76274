"""The suffix automaton's compact layout (a state's first transition in flat lists, the rest in a
dict) against the textbook construction with a dict per state: the same states, links, counts
and transitions in the same order, hence the same matches and votes, whatever the text and
however it is cut into appends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.inference.suffix_tree import WALK_LIMIT, SuffixAutomaton


class _DictPerState:
    """The construction as written in the textbooks: one transition dict per state."""

    def __init__(self) -> None:
        self.length, self.link, self.count, self.last = [0], [-1], [0], 0
        self.next: list[dict[int, int]] = [{}]

    def _state(self, length: int, link: int, nxt: dict[int, int], count: int) -> int:
        self.length.append(length)
        self.link.append(link)
        self.next.append(nxt)
        self.count.append(count)
        return len(self.length) - 1

    def extend(self, tokens: list[int]) -> None:
        length, link, nxt = self.length, self.link, self.next
        for t in tokens:
            cur = self._state(length[self.last] + 1, 0, {}, 0)
            p = self.last
            while p != -1 and t not in nxt[p]:
                nxt[p][t] = cur
                p = link[p]
            if p != -1:
                q = nxt[p][t]
                if length[p] + 1 == length[q]:
                    link[cur] = q
                else:
                    clone = self._state(length[p] + 1, link[q], dict(nxt[q]), self.count[q])
                    while p != -1 and nxt[p].get(t) == q:
                        nxt[p][t] = clone
                        p = link[p]
                    link[q] = clone
                    link[cur] = clone
            self.last = cur
            v, n = cur, 0
            while v > 0 and n < WALK_LIMIT:
                self.count[v] += 1
                v = link[v]
                n += 1


# Small alphabets repeat a lot (clones, long suffix-link chains); negative ids are the shared
# store's separators.
texts = st.lists(st.one_of(st.integers(0, 3), st.integers(-3, 40)), max_size=160)


@settings(max_examples=300, deadline=None)
@given(texts, st.lists(st.integers(1, 40), max_size=12), st.lists(st.lists(st.integers(-3, 40), max_size=8),
                                                               max_size=6))
def test_the_compact_layout_is_the_textbook_automaton(text: list[int], cuts: list[int],
                                                       patterns: list[list[int]]) -> None:
    compact, reference = SuffixAutomaton(), _DictPerState()
    i = 0
    for cut in [*cuts, len(text)]:  # appended piece by piece, as a session's turns do
        compact.extend(text[i : i + cut])
        reference.extend(text[i : i + cut])
        i += cut
    compact.extend(text[i:])
    reference.extend(text[i:])
    assert (compact.length, compact.link, compact.count, compact.last) == (
        reference.length, reference.link, reference.count, reference.last)
    assert compact.num_tokens == len(text)
    for state, transitions in enumerate(reference.next):
        assert list(compact.children(state).items()) == list(transitions.items())  # order decides ties
        for token in {*transitions, -4, 41}:
            assert compact.child(state, token) == transitions.get(token, -1)
    for pattern in [*patterns, text[-6:]]:
        state, matched = compact.match(pattern)
        scores: dict[int, float] = {}
        compact.vote(state, 1.0, scores)
        expected: dict[int, float] = {}
        total = sum(reference.count[w] for w in reference.next[state].values())
        for t, w in reference.next[state].items():
            expected[t] = reference.count[w] / total
        assert scores == expected
        assert matched == max((n for n in range(len(pattern) + 1) if _occurs(text, pattern[len(pattern) - n :])),
                              default=0)


def _occurs(text: list[int], part: list[int]) -> bool:
    return any(text[i : i + len(part)] == part for i in range(len(text) - len(part) + 1))
