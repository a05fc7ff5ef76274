"""How many draft tokens a step verifies: as many as pay off at the step's batch size.

Verifying a draft adds its tokens to the step's forward pass and gains the ones accepted. With
``A(k)`` the expected accepted tokens of a draft capped at ``k`` and ``L(k)`` its expected
length, ``B`` decoding sequences emit ``B * (1 + A(k))`` tokens in a step priced at ``T(k)`` with
``1 + L(k)`` inputs each: by the roofline (``cost_model.py``), or on the CPU reference engine by a
fit of its own measured steps (``step_cost.py``), where each verified row costs a sizeable share
of a step even at batch 1. The policy picks the cap that maximises ``(1 + A(k)) / T(k)``: on a
GPU at batch 1 a decode step is bound by reading the weights,
extra inputs are nearly free and the whole draft is verified; as the batch grows the step turns
compute-bound, each verified token costs about as much as a decoded one, and the cap falls to 0
(no speculation) once no draft token is accepted often enough to pay for itself.

``A`` and ``L`` are measured, per draft position, from what verification accepted (counts with
exponential decay, so they follow the workload), which makes them exact for truncation: capping
a draft at ``k`` keeps exactly the positions ``<= k``. Positions above the current cap get no
news, so every ``explore_every``-th step verifies the full draft to keep them measured. Steps
that also carry prefill chunks are priced on their decodes alone (the chunks are planned after
the decodes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class StepPricer(Protocol):
    """Prices a step: the roofline (``cost_model.CostModel``) or measured steps (``step_cost``)."""

    def step_seconds(self, chunks: Sequence[tuple[float, float]]) -> float: ...


class AcceptanceStats:
    """Per draft position i (1-based): decayed counts of attempts that allowed position i, of
    drafts that had a token there, and of those where it was accepted."""

    def __init__(self, max_len: int, decay: float = 0.999, prior_weight: float = 4.0,
                 prior_accept: float = 0.5) -> None:
        if max_len < 0 or not 0.0 < decay <= 1.0:
            raise ValueError("need max_len >= 0 and 0 < decay <= 1")
        self.max_len = max_len
        self.decay = decay
        # Prior: drafts of full length, each position accepted with prior_accept (cumulative).
        self.attempts = [prior_weight] * max_len
        self.proposed = [prior_weight] * max_len
        self.accepted = [prior_weight * prior_accept ** (i + 1) for i in range(max_len)]

    def observe(self, cap: int, proposed: int, accepted: int) -> None:
        """A verified draft: at most ``cap`` tokens were allowed, ``proposed`` drafted, ``accepted`` kept."""
        d = self.decay
        for i in range(min(cap, self.max_len)):
            self.attempts[i] = self.attempts[i] * d + 1.0
            self.proposed[i] = self.proposed[i] * d + (i < proposed)
            self.accepted[i] = self.accepted[i] * d + (i < accepted)

    def expected(self, k: int) -> tuple[float, float]:
        """(accepted tokens, draft length) expected of a draft capped at ``k``."""
        acc = length = 0.0
        for i in range(min(k, self.max_len)):
            if self.attempts[i]:
                acc += self.accepted[i] / self.attempts[i]
                length += self.proposed[i] / self.attempts[i]
        return acc, length


class DraftLengthPolicy:
    """Picks each step's draft cap from the step's price and the measured acceptance."""

    def __init__(self, cost: StepPricer, max_len: int, explore_every: int = 64,
                 stats: AcceptanceStats | None = None) -> None:
        self.cost = cost
        self.max_len = max_len
        self.explore_every = explore_every
        self.stats = stats or AcceptanceStats(max_len)
        self.steps = 0

    def throughput(self, contexts: Sequence[int], k: int) -> float:
        """Modelled tokens per second of a decode step over ``contexts`` with drafts capped at ``k``."""
        if not contexts:
            return 0.0
        acc, length = self.stats.expected(k)
        seconds = self.cost.step_seconds([(c, 1 + length) for c in contexts])
        return len(contexts) * (1 + acc) / seconds

    def best(self, contexts: Sequence[int]) -> tuple[int, float]:
        """The cap that maximises throughput, and its modelled speed-up over no speculation."""
        base = self.throughput(contexts, 0)
        best_k, best_rate = 0, base
        for k in range(1, self.max_len + 1):
            rate = self.throughput(contexts, k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k, best_rate / base if base else 1.0

    def cap(self, contexts: Sequence[int]) -> int:
        """This step's cap (the full length on exploration steps)."""
        self.steps += 1
        if not contexts:
            return 0
        if self.explore_every and self.steps % self.explore_every == 0:
            return self.max_len
        return self.best(contexts)[0]
