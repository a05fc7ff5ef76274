"""``bench_kv_tiers.py --traces`` on the bundled Claude Code traces: streams, pauses and the
infinite-cache reference are read as recorded, and the harness's hints keep a paused session's
prefix (in the host tier, then back on the device) at least as well as the best mode without
hints under the same pressure."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))  # the benchmarks' modules run as scripts

import bench_kv_tiers as kv  # noqa: E402

TRACES = Path(__file__).parents[2] / "data" / "traces" / "claude-code-kv"


def test_a_trace_becomes_its_streams_with_recorded_pauses_and_the_infinite_cache_reference() -> None:
    path = TRACES / "trace_0291.json.gz"
    recorded = json.loads(gzip.decompress(path.read_bytes()))
    plans = kv.trace_plans(path, 0, max_output=16)
    parent, *subagents = plans
    asked = [r for r in recorded["requests"] if r.get("type") != "subagent"]
    assert len(parent.turns) == len(asked) and len(subagents) == 2
    assert all(s.after is not None and s.after[0] == 0 for s in subagents)
    assert [len(t.prompt) for t in parent.turns] == [r["in"] for r in asked]
    first, second = asked[0], asked[1]
    assert parent.gaps[1] == max(0.0, second["t"] - first["t"] - first["api_time"])
    # Equal block ids are equal tokens; the reference hits the longest prefix seen before.
    pairs = list(zip(first["hash_ids"], second["hash_ids"], strict=False))
    shared = next((i for i, (a, b) in enumerate(pairs) if a != b), len(pairs))
    assert parent.turns[0].prompt[: shared * 64] == parent.turns[1].prompt[: shared * 64]
    assert parent.turns[1].prompt[shared * 64:] != parent.turns[0].prompt[shared * 64: len(parent.turns[1].prompt)]
    assert parent.ideal is not None and parent.ideal[0] == 0
    assert parent.ideal[1] == min(shared, (second["in"] - 1) // 64) * 64 > 0


def test_the_harnesss_hints_keep_paused_sessions_at_least_as_well_as_the_best_mode_without_them() -> None:
    """The hints the harness sends (its own estimate of each pause) lose no prefix the best mode without
    hints keeps, and bring blocks back ahead of the requests. (Hints that know each pause exactly reach
    98.7% of an infinite cache here, against 100% without hints: one turn after a 27-minute pause lost
    its tail, dropped from a host tier full of other paused sessions' blocks, the longest paused first.)"""
    plans = [p for i, path in enumerate(sorted(TRACES.glob("*.json.gz"))) for p in kv.trace_plans(path, i, 16)]
    modes = {m.label: m for m in kv.MODES}
    results = {}
    with Progress(disable=True) as progress:
        for label in ("priority + host tier", "hints, estimated pause", "hints"):
            results[label] = kv.run(modes[label], plans, progress, progress.add_task(label), kv.TRACE_BLOCK)
    best = results["priority + host tier"]
    for label in ("hints, estimated pause", "hints"):
        hints = results[label]
        assert hints.hit_after_gap and len(hints.hit_after_gap) == len(best.hit_after_gap)
        assert hints.prefetched > 0, "the hints brought blocks back ahead of the requests"
        assert hints.hit_tokens_after_gap / hints.ideal_tokens_after_gap >= 0.97, label
    estimated = results["hints, estimated pause"]
    assert (estimated.hit_tokens_after_gap / estimated.ideal_tokens_after_gap
            >= best.hit_tokens_after_gap / best.ideal_tokens_after_gap)
