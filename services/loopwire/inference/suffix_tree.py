"""Suffix decoding (SuffixDecoding, Oliaro et al., arXiv 2411.04975): drafts from suffix
structures over the session's own context and over the outputs of the tenant's other recent
and live requests on the replica (a per-tenant pool, as TensorRT-LLM's suffix-automaton global
pool but never across tenants), with a draft length that follows how often the matched
continuation occurred.

The index is a suffix automaton (the DAWG of the text, whose suffix-link tree is the suffix
tree of the reversed text): linear size, online appends in amortised O(1), and each state
knows how many times its strings occurred (``count``). That gives the paper's two ingredients
without a quadratic suffix trie:

* the longest suffix of the context that occurred before (the pattern, length ``p``);
* the empirical probability of each continuation, ``count(pattern + t) / sum_t' count(pattern + t')``.

Every source that matched a suffix of the context votes for its continuations: its empirical
probabilities weighted by its match length (a longer match is better evidence; the session's and
the store's shorter matches, their suffix-link ancestors, vote too, as in PPM's blending of
orders). The draft takes the best-voted token, keeps the sources that continue with it, and goes
on while the product of the winners' shares stays above ``min_token_prob`` and its length below
``max_spec_factor * p`` for the longest match ``p`` (the paper's adaptive speculation length).
On the recorded sessions this blend beats picking the better of the session and shared drafts
(bench/bench_speculation.py).

Sources, all within the request's namespace (the prefix-cache salt, a tenant): the session's own
context; the store of finished outputs; the outputs so far of the namespace's other live
requests (the most recent ``live_peers``). The shared store keeps finished outputs per namespace
under one token budget; the oldest outputs go first, and the affected automata are rebuilt from
what is left, so memory is bounded by the budget.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loopwire.inference.drafter import Draft

# Suffix-link states whose occurrence count an append updates: exact unless the text is
# degenerate (a long run of one token), where the tail of the walk would make appends quadratic.
WALK_LIMIT = 256


class SuffixAutomaton:
    """Suffix automaton over a growing token list, with occurrence counts per state.

    A state's first transition lives in two flat lists (``first_token``, ``first_target``) and
    only the others in a dict (``more``): nine states in ten have exactly one, so the automaton
    holds about 190 bytes per token instead of 480 with a dict per state, and extending it, which
    every new token of a session's context does, touches less memory as the context grows."""

    def __init__(self) -> None:
        self.length = [0]
        self.link = [-1]
        self.count = [0]
        self.first_token: list[int | None] = [None]  # None: the state has no transition yet
        self.first_target = [0]
        self.more: list[dict[int, int] | None] = [None]  # the transitions after the first, in order
        self.last = 0
        self.num_tokens = 0

    @property
    def num_states(self) -> int:
        return len(self.length)

    def child(self, state: int, token: int) -> int:
        """The state ``token`` leads to from ``state``; -1 when it leads nowhere."""
        if self.first_token[state] == token:
            return self.first_target[state]
        more = self.more[state]
        return -1 if more is None else more.get(token, -1)

    def children(self, state: int) -> dict[int, int]:
        """Every transition of ``state`` (token: target), in the order they were added."""
        first = self.first_token[state]
        if first is None:
            return {}
        more = self.more[state]
        return {first: self.first_target[state], **(more or {})}

    def extend(self, tokens: Sequence[int]) -> None:
        # Every new token of a session's context passes here: the state lists are locals and the
        # transition lookups inline.
        length, link, count = self.length, self.link, self.count
        first_token, first_target, more = self.first_token, self.first_target, self.more
        last = self.last
        for t in tokens:
            cur = len(length)
            length.append(length[last] + 1)
            link.append(0)
            count.append(0)
            first_token.append(None)
            first_target.append(0)
            more.append(None)
            p, q = last, -1
            while p != -1:  # add t -> cur to the suffixes that lack it; q: where t led from the first that has it
                first = first_token[p]
                if first == t:
                    q = first_target[p]
                    break
                if first is None:
                    first_token[p], first_target[p] = t, cur
                else:
                    rest = more[p]
                    if rest is None:
                        more[p] = {t: cur}
                    elif t in rest:
                        q = rest[t]
                        break
                    else:
                        rest[t] = cur
                p = link[p]
            if p != -1:
                if length[p] + 1 == length[q]:
                    link[cur] = q
                else:
                    clone = len(length)
                    length.append(length[p] + 1)
                    link.append(link[q])
                    count.append(count[q])
                    first_token.append(first_token[q])
                    first_target.append(first_target[q])
                    rest = more[q]
                    more.append(None if rest is None else rest.copy())
                    while p != -1:  # the suffixes whose t led to q now lead to the clone
                        if first_token[p] == t:
                            if first_target[p] != q:
                                break
                            first_target[p] = clone
                        else:
                            rest = more[p]
                            if rest is None or rest.get(t) != q:
                                break
                            rest[t] = clone
                        p = link[p]
                    link[q] = clone
                    link[cur] = clone
            last = v = cur
            for _ in range(WALK_LIMIT):  # every suffix of the text now also ends here
                if v <= 0:
                    break
                count[v] += 1
                v = link[v]
        self.last = last
        self.num_tokens += len(tokens)

    def match(self, tokens: Sequence[int]) -> tuple[int, int]:
        """(state, length) of the longest suffix of ``tokens`` that occurs in the text."""
        link, length, child = self.link, self.length, self.child
        v = matched = 0
        for t in tokens:
            w = child(v, t)
            while v and w < 0:
                v = link[v]
                matched = length[v]
                w = child(v, t)
            if w >= 0:
                v = w
                matched += 1
        return v, matched

    def vote(self, state: int, weight: float, scores: dict[int, float]) -> None:
        """Add ``weight`` times the empirical distribution of what follows ``state`` to ``scores``."""
        children = self.children(state)
        total = sum(self.count[w] for w in children.values())
        if total:
            for t, w in children.items():
                scores[t] = scores.get(t, 0.0) + weight * self.count[w] / total


@dataclass(frozen=True)
class SuffixSettings:
    # Long drafts are nearly free to verify at small batch; the cost policy (draft_length.py)
    # truncates them where they do not pay. Both values: best on the recorded sessions.
    max_spec_factor: float = 32.0  # draft length <= factor * matched pattern length
    min_token_prob: float = 0.02  # stop when the draft's estimated probability falls below
    min_match: int = 1  # the probability cut-off, not the pattern length, filters weak drafts
    max_pattern: int = 48  # longest context suffix matched against the shared store and live requests
    backoff: int = 2  # suffix-link ancestors of the session's and the store's match that vote too
    max_weight: int = 64  # a match longer than this votes no louder
    live_peers: int = 8  # the namespace's most recent live requests whose outputs are searched
    # Memory: an automaton costs ~190 bytes per token in CPython (measured on an 80k-token session).
    shared_tokens: int = 131_072  # budget of the shared output store, all namespaces (~25 MB)
    session_tokens: int = 262_144  # session automata kept between turns, all sessions (~50 MB)


@dataclass
class _Doc:
    namespace: str
    tokens: list[int]


class SharedOutputs:
    """Recent outputs of all sessions, one automaton per namespace, under one token budget."""

    def __init__(self, max_tokens: int) -> None:
        if max_tokens <= 0:
            raise ValueError("the shared store needs a positive token budget")
        self.max_tokens = max_tokens
        self.docs: deque[_Doc] = deque()
        self.num_tokens = 0
        self.automata: dict[str, SuffixAutomaton] = {}
        self._separator = 0

    def add(self, namespace: str, tokens: Sequence[int]) -> None:
        tokens = list(tokens[-self.max_tokens :])
        if not tokens:
            return
        self.docs.append(_Doc(namespace, tokens))
        self.num_tokens += len(tokens)
        if self.num_tokens > self.max_tokens:
            # Evict the oldest until a quarter of the budget is free, so rebuilds are amortised.
            touched = set()
            while self.docs and self.num_tokens > self.max_tokens * 3 // 4:
                doc = self.docs.popleft()
                self.num_tokens -= len(doc.tokens)
                touched.add(doc.namespace)
            for ns in touched:
                self._rebuild(ns)
            if namespace in touched:
                return  # the rebuild included the new document if it survived
        self._append(namespace, tokens)

    def _append(self, namespace: str, tokens: list[int]) -> None:
        sam = self.automata.setdefault(namespace, SuffixAutomaton())
        self._separator -= 1
        sam.extend([*tokens, self._separator])

    def _rebuild(self, namespace: str) -> None:
        self.automata.pop(namespace, None)
        for doc in self.docs:
            if doc.namespace == namespace:
                self._append(namespace, doc.tokens)

    def num_states(self) -> int:
        return sum(a.num_states for a in self.automata.values())


class SuffixDrafter:
    """Drafts from the session's own context and its namespace's recent and live outputs."""

    name = "suffix"

    def __init__(self, settings: SuffixSettings | None = None) -> None:
        self.settings = settings or SuffixSettings()
        self.shared = SharedOutputs(self.settings.shared_tokens)
        # Finished contexts kept between turns, least recent first: a session's next prompt extends
        # its last context, whose automaton goes on from there.
        self._sessions: OrderedDict[str, SuffixContext] = OrderedDict()
        self.cached_session_tokens = 0
        # Live requests per namespace, oldest first: their outputs so far are drafted from.
        self.live: dict[str, dict[int, SuffixContext]] = {}

    def open(self, token_ids: Sequence[int], session_id: str = "", namespace: str = "",
             base: Callable[[], object] | None = None) -> SuffixContext:
        """``base``: a weak reference to the context of the request whose finished sequence
        ``token_ids`` starts with (a stream's append); when that context is the session's kept
        one, its automaton goes on without comparing the prefix it indexed."""
        sam, tokens = SuffixAutomaton(), []
        key = f"{namespace}\x00{session_id}" if session_id else ""
        kept = self._sessions.pop(key, None) if key else None
        if kept is not None:
            self.cached_session_tokens -= len(kept.tokens)
            n = len(kept.tokens)
            if n <= len(token_ids) and ((base is not None and base() is kept) or list(token_ids[:n]) == kept.tokens):
                sam, tokens = kept.sam, kept.tokens
        ctx = SuffixContext(self, sam, tokens, key, namespace)
        ctx.extend(token_ids[len(tokens) :])
        ctx.prompt_len = len(ctx.tokens)
        self.live.setdefault(namespace, {})[id(ctx)] = ctx
        return ctx

    def peers(self, ctx: SuffixContext) -> list[SuffixContext]:
        """The most recent live requests of ``ctx``'s namespace, ``ctx`` left out."""
        live = self.live.get(ctx.namespace, {})
        return [c for c in reversed(live.values()) if c is not ctx][: self.settings.live_peers]

    def _keep(self, ctx: SuffixContext) -> None:
        """Keep a finished request's automaton for its session's next turn, least recent out first."""
        if not ctx.key or len(ctx.tokens) > self.settings.session_tokens:
            return
        if ctx.key in self._sessions:  # a concurrent request of the same session finished first
            self.cached_session_tokens -= len(self._sessions.pop(ctx.key).tokens)
        self._sessions[ctx.key] = ctx
        self.cached_session_tokens += len(ctx.tokens)
        while self.cached_session_tokens > self.settings.session_tokens:
            _, old = self._sessions.popitem(last=False)
            self.cached_session_tokens -= len(old.tokens)


def _votes(sources: list[tuple[SuffixAutomaton, int, int]], max_weight: int) -> dict[int, float]:
    """Every source's continuations, weighted by its match length (capped at ``max_weight``)."""
    scores: dict[int, float] = {}
    for sam, state, p in sources:
        sam.vote(state, min(p, max_weight), scores)
    return scores


class SuffixContext:
    def __init__(self, drafter: SuffixDrafter, sam: SuffixAutomaton, tokens: list[int], key: str, namespace: str) -> None:
        self.drafter = drafter
        self.sam = sam
        self.tokens = tokens
        self.key = key
        self.namespace = namespace
        self.prompt_len = 0
        self.finished = False
        self.output = SuffixAutomaton()  # what this request generated: its live peers draft from it

    def extend(self, token_ids: Sequence[int]) -> None:
        ids = [int(t) for t in token_ids]
        self.tokens.extend(ids)
        self.sam.extend(ids)
        if self.prompt_len:
            self.output.extend(ids)

    def propose(self, k: int, branches: int = 1) -> Draft:
        """The best-voted chain; with ``branches`` > 1, also chains that start with the next-best
        first tokens (each at least ``min_token_prob`` of the vote), continued the same way: when
        the target's next token is not the favourite, it is often the runner-up."""
        s = self.drafter.settings
        if k <= 0:
            return Draft([])
        sources = self._sources()
        if not sources:
            return Draft([])
        limit = min(k, int(s.max_spec_factor * max(p for _, _, p in sources)))
        scores = _votes(sources, s.max_weight)
        total = sum(scores.values())
        firsts = sorted((t for t in scores if t >= 0 and scores[t] / total >= s.min_token_prob),
                        key=lambda t: (-scores[t], t))[:max(branches, 1)]
        chains = [self._chain(sources, t, scores[t] / total, limit) for t in firsts]
        if not chains:
            return Draft([])
        return Draft(chains[0], alternatives=chains[1:])

    def _chain(self, sources: list[tuple[SuffixAutomaton, int, int]], first: int, prob: float,
               limit: int) -> list[int]:
        """``first``, then the best-voted token of the sources that continue with it, while the
        product of the winners' shares stays above ``min_token_prob``."""
        s = self.drafter.settings
        out: list[int] = []
        t = first
        while True:
            out.append(t)
            sources = [(sam, w, p + 1) for sam, v, p in sources if (w := sam.child(v, t)) >= 0]
            if len(out) >= limit or not sources:
                return out
            scores = _votes(sources, s.max_weight)
            if not scores:
                return out
            t = max(scores, key=scores.__getitem__)
            prob *= scores[t] / sum(scores.values())
            if t < 0 or prob < s.min_token_prob:  # a separator: the text ended there
                return out

    def _sources(self) -> list[tuple[SuffixAutomaton, int, int]]:
        """(automaton, state, match length) of every suffix match that votes on the draft."""
        s = self.drafter.settings
        found: list[tuple[SuffixAutomaton, int, int]] = []

        def chain(sam: SuffixAutomaton, state: int, p: int) -> None:
            for _ in range(s.backoff + 1):
                if state <= 0 or p < s.min_match:
                    return
                found.append((sam, state, p))
                state = sam.link[state]
                p = sam.length[state]

        # The session: the longest suffix that occurred earlier in it is the suffix link of the whole text.
        state = self.sam.link[self.sam.last]
        chain(self.sam, state, self.sam.length[state])
        pattern = self.tokens[-s.max_pattern :]
        shared = self.drafter.shared.automata.get(self.namespace)
        if shared is not None:
            chain(shared, *shared.match(pattern))
        for peer in self.drafter.peers(self):
            state, p = peer.output.match(pattern)
            if p >= s.min_match:
                found.append((peer.output, state, p))
        return found

    def finish(self) -> None:
        """The request ended: its output joins the shared store, its automaton waits for the next turn."""
        if self.finished:
            return
        self.finished = True
        live = self.drafter.live[self.namespace]
        del live[id(self)]
        if not live:
            del self.drafter.live[self.namespace]
        self.drafter.shared.add(self.namespace, self.tokens[self.prompt_len :])
        self.output = SuffixAutomaton()  # no peer drafts from it any more; a kept context holds no more than it needs
        self.drafter._keep(self)
