"""The disaggregation decision is exactly Dynamo's rule, over any inputs (hypothesis).

The reference below restates the rule with exact fractions:
``prompt_len x (1 - prefix_hit_rate) > max_local_prefill_length`` and some prefill queue below the bound.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.gateway.disagg import DisaggPolicy, prefill_remotely
from loopwire.gateway.replica import Replica
from loopwire.v1 import inference_pb2

ROLES = {"both": inference_pb2.ENGINE_ROLE_BOTH, "prefill": inference_pb2.ENGINE_ROLE_PREFILL,
         "decode": inference_pb2.ENGINE_ROLE_DECODE}


def dynamo_rule(prompt_len: int, cached: int, threshold: int, queues: list[int], bound: int) -> bool:
    hit_rate = Fraction(min(cached, prompt_len), prompt_len) if prompt_len else Fraction(0)
    return prompt_len * (1 - hit_rate) > threshold and any(q < bound for q in queues)


def replica(name: str, role: str, waiting: int = 0, in_flight: int = 0) -> Replica:
    none: Any = None  # the decision never touches the channel
    r = Replica(name, none, none)
    r.status = inference_pb2.GetStatusResponse(role=ROLES[role], waiting=waiting)
    r.prefills_in_flight = in_flight
    return r


prompts = st.integers(0, 200_000)
queues = st.lists(st.integers(0, 20), max_size=4)


@settings(max_examples=500)
@given(prompt_len=prompts, cached_frac=st.floats(0, 1.2), threshold=st.integers(0, 20_000), queues=queues,
       bound=st.integers(0, 20))
def test_decision_is_the_rule(prompt_len: int, cached_frac: float, threshold: int, queues: list[int],
                              bound: int) -> None:
    cached = int(prompt_len * cached_frac)
    assert prefill_remotely(prompt_len, cached, threshold, queues, bound) == dynamo_rule(
        prompt_len, cached, threshold, queues, bound)


@given(threshold=st.integers(0, 5000), bound=st.integers(1, 10))
def test_boundary_is_strict(threshold: int, bound: int) -> None:
    """Exactly ``threshold`` uncached tokens stay local, one more goes remote; a queue at the bound is full."""
    assert not prefill_remotely(threshold + 100, 100, threshold, [0], bound)
    assert prefill_remotely(threshold + 101, 100, threshold, [0], bound)
    assert not prefill_remotely(threshold + 101, 100, threshold, [bound], bound)


@settings(max_examples=300)
@given(target_role=st.sampled_from(["both", "decode"]), prompt_len=prompts, cached_frac=st.floats(0, 1),
       threshold=st.integers(0, 20_000), bound=st.integers(0, 12),
       prefill=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), max_size=3))
def test_pick_follows_the_rule_and_takes_the_shortest_queue(
        target_role: str, prompt_len: int, cached_frac: float, threshold: int, bound: int,
        prefill: list[tuple[int, int]]) -> None:
    cached = int(prompt_len * cached_frac)
    target = replica("t", target_role)
    pool = [replica(f"p{i}", "prefill", waiting, in_flight) for i, (waiting, in_flight) in enumerate(prefill)]
    queue = [max(w, f) for w, f in prefill]  # what a prefill replica has queued: every gateway's or ours
    chosen = DisaggPolicy(threshold, bound).pick(target, pool, prompt_len, cached)
    if target_role == "both":
        assert chosen is None  # colocated replicas work as without disaggregation
        return
    assert (chosen is not None) == dynamo_rule(prompt_len, cached, threshold, queue, bound)
    if chosen is not None:
        assert queue[pool.index(chosen)] == min(queue) < bound
