"""Where the routing benchmark's missing prefix-cache hits go.

Runs part 3 of ``bench_gateway.py`` (4 simulated replicas, N concurrent replayed sessions,
first T turns each) for sticky streams (cache-aware), a new stream per turn (cache-aware)
and a new stream per turn (round-robin), and classifies every prompt block at the moment the
replica's scheduler admits the request:

- hittable: its chained hash had been computed (committed to the prefix cache) before, on
  any replica. A block whose hash was never computed anywhere is "history changed / new"
  (the prompt differs from everything computed) and is not in the denominator.
- hit: the engine reused it (``usage.cached_input_tokens``).
- (a) evicted here: computed earlier on the replica it was routed to, evicted since.
- (b) routed away from the holder: never computed on that replica, held now by another one.
  Split by the router's decision for this request (recorded when ``Router.choose`` ran):
  stale view (the gateway's WatchCache mirror of the holder lacked it), balance filter (the
  holder was outside the load margin), score (the holder's predicted TTFT was worse: queued
  prefill, running generations), tie, arrived later (at decision time no replica held more
  than the chosen one), sticky (no decision this turn: the stream's replica was chosen on an
  earlier turn).
- (d) other: computed only on other replicas and evicted there too, or anything else.

Determinism: each configuration runs ``--repeats`` times on the same data; the table shows
each run's hit rate and the share of (session, turn) pairs routed to the same replica as
in the first run. With ``ordered`` arrivals each replay starts once the one before it has
finished its first turn (the router sees first turns in one order); ``concurrent`` starts
them all at once, so the order is the event loop's and the engines' timing.

Run: .venv/bin/python bench/bench_routing_misses.py [--quick] [--sessions 32] [--turns 8]
      [--repeats 2] [--variants before,after] [--arrivals ordered,concurrent] [--out DIR]
Writes routing_misses.md into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

import bench_gateway as bg
from loopwire.common.hashing import block_hashes
from loopwire.gateway import router as router_mod
from loopwire.inference import scheduler as scheduler_mod
from loopwire.inference.kv_cache import BlockManager

import interrupts
import provenance

console = bg.console

CAUSES = ("a: evicted here", "b: stale view", "b: balance filter", "b: score/policy", "b: tie", "b: arrived later",
          "b: sticky", "d: evicted on holder too", "d: other")


@dataclass
class Tracker:
    """What each replica's block manager computed and holds, and what the router decided."""

    names: dict[int, str] = field(default_factory=dict)  # id(BlockManager) -> replica id
    managers: dict[str, BlockManager] = field(default_factory=dict)
    ever: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    decisions: dict[int, tuple[dict, int]] = field(default_factory=dict)  # block hash -> (decision, its blocks)
    evicted_blocks: Counter = field(default_factory=Counter)
    # per (policy label): counters
    hittable: int = 0
    hit: int = 0
    new_tokens: int = 0
    prompt_tokens: int = 0
    causes: Counter = field(default_factory=Counter)
    turn2_hit: int = 0
    turn2_input: int = 0

    def reset(self) -> None:
        self.__init__()  # type: ignore[misc]


T = Tracker()
DEBUG = open(os.environ["ROUTING_MISSES_DEBUG"], "w") if os.environ.get("ROUTING_MISSES_DEBUG") else None  # noqa: SIM115


def _held_prefix(m: BlockManager, hashes: list[int]) -> int:
    n = 0
    for h in hashes:
        if h not in m._by_hash:  # noqa: SLF001 - benchmark instrumentation reads the engine's truth
            break
        n += 1
    return n


def _ever_prefix(s: set[int], hashes: list[int]) -> int:
    n = 0
    for h in hashes:
        if h not in s:
            break
        n += 1
    return n


def install() -> None:
    orig_build = bg.build_engine

    def build_engine(options):  # type: ignore[no-untyped-def]
        engine = orig_build(options)
        blocks = engine.core.blocks
        T.names[id(blocks)] = options.replica_id
        T.managers[options.replica_id] = blocks
        return engine

    bg.build_engine = build_engine

    orig_commit = BlockManager.commit

    def commit(self, block_id, parent, token_ids):  # type: ignore[no-untyped-def]
        h = orig_commit(self, block_id, parent, token_ids)
        name = T.names.get(id(self))
        if name is not None and h in self._by_hash:
            T.ever[name].add(h)
        return h

    BlockManager.commit = commit

    orig_uncache = BlockManager._uncache

    def _uncache(self, block_id, offload=False):  # type: ignore[no-untyped-def]
        if self.blocks[block_id].hash:
            T.evicted_blocks[T.names.get(id(self), "?")] += 1
        return orig_uncache(self, block_id, offload)

    BlockManager._uncache = _uncache

    orig_choose = router_mod.Router.choose

    def choose(self, prompt_length, block_hashes_fn, exclude=(), shared_tokens=0):  # type: ignore[no-untyped-def]
        chosen = orig_choose(self, prompt_length, block_hashes_fn, exclude, shared_tokens)
        hashes = list(block_hashes_fn(chosen.block_size))
        cands = [r for r in self.replicas if not r.draining and r.healthy and r not in exclude]
        balanced = self.balanced(cands, self.cached_tokens(cands, block_hashes_fn), shared_tokens)
        info = {}
        for r in cands:
            m = T.managers.get(r.name)
            info[r.name] = {
                "view": r.cached_prefix_blocks(hashes),
                "true": _held_prefix(m, hashes) if m is not None else 0,
                "balanced": r in balanced,
                "ttft": self.predicted_ttft_s(r, prompt_length, block_hashes_fn),
            }
        decision = {"chosen": chosen.name, "replicas": info, "policy": self.policy,
                    "detail": {r.name: (r.sessions, r.in_flight, r.status.waiting, r.pending_prefill_tokens,
                                        round(r.prefill_speed()), round(r.token_latency_s, 4)) for r in cands}}
        # Keyed by every block hash: the engine's prompt adds the generation prompt, so the request's
        # own decision is the one found nearest the end of its hashes (later decisions overwrite).
        for h in hashes:
            T.decisions[h] = (decision, len(hashes))
        return chosen

    router_mod.Router.choose = choose

    orig_admit = scheduler_mod.Scheduler._admit_one

    def _admit_one(self, seq, limit):  # type: ignore[no-untyped-def]
        fresh = not seq.block_ids and not seq.cached_recorded
        if fresh:
            bs = self.blocks.block_size
            usable = max(len(seq.tokens) - 1, 0)
            wanted = block_hashes(seq.tokens[:usable], bs, seq.cache_root)
            here = T.names.get(id(self.blocks), "?")
            ever_prefix = {name: _ever_prefix(s, wanted) for name, s in T.ever.items()}
            held_before = {name: _held_prefix(m, wanted) for name, m in T.managers.items()}
        out = orig_admit(self, seq, limit)
        if fresh and seq.cached_recorded:
            hit_blocks = min(seq.usage.cached_input_tokens // bs, len(wanted))
            hittable = max(ever_prefix.values(), default=0)
            hittable = max(hittable, hit_blocks)
            T.prompt_tokens += seq.prompt_len
            T.hittable += hittable * bs
            T.hit += hit_blocks * bs
            T.new_tokens += seq.prompt_len - hittable * bs
            decision = None
            for j in range(len(wanted) - 1, max(-1, len(wanted) - 9), -1):
                found = T.decisions.get(wanted[j])
                if found is not None:
                    if found[1] >= len(wanted) - 8:  # this request's own decision, not an earlier turn's
                        decision = found[0]
                    break
            for i in range(hit_blocks, hittable):
                cause = _cause(i, here, ever_prefix, held_before, decision)
                T.causes[cause] += bs
            if hit_blocks < hittable and DEBUG:
                DEBUG.write(json.dumps({"cause": cause, "missed": (hittable - hit_blocks) * bs, "here": here,
                                        "decision": decision}) + "\n")
        return out

    scheduler_mod.Scheduler._admit_one = _admit_one


def _cause(i: int, here: str, ever_prefix: dict[str, int], held: dict[str, int], decision: dict | None) -> str:
    if ever_prefix.get(here, 0) > i:
        return "a: evicted here"
    holders = [n for n, k in held.items() if n != here and k > i]
    if not holders:
        return "d: evicted on holder too" if any(k > i for n, k in ever_prefix.items() if n != here) else "d: other"
    if decision is None or decision["chosen"] != here:
        return "b: sticky"
    if decision["policy"] != "cache-aware":
        return "b: score/policy"
    reps = decision["replicas"]
    me = reps.get(here)
    best = max(reps, key=lambda n: reps[n]["true"])
    b = reps[best]
    if me is None or b["true"] <= me["true"]:
        return "b: arrived later"
    if b["view"] < b["true"]:
        return "b: stale view"
    if not b["balanced"]:
        return "b: balance filter"
    if abs(b["ttft"] - me["ttft"]) < 1e-12:
        return "b: tie"
    return "b: score/policy"


@dataclass
class Run:
    label: str
    hittable: int
    hit: int
    new_tokens: int
    prompt_tokens: int
    causes: Counter
    turn2_rate: float
    all_rate: float
    imbalance: float
    max_mean: tuple[float, float]
    assignment: list[tuple[int, int, str]]
    evicted: int
    ttft_ms: float


# The router's constants before the seeded tie-break (22acb7f): only an exact tie of scores was a
# tie, so the last poll's timing decided between replicas with the same cached prefix; and every
# replica had the slack that only a holder of the conversation's own history has now, and the
# margin grew by a quarter of the lightest load.
BEFORE = {"TIE_RATIO": 0.0, "BALANCE_SLACK": 6, "BALANCE_RATIO": 1.25}


def set_router(values: dict) -> dict:
    old = {k: getattr(router_mod, k, None) for k in values}
    for k, v in values.items():
        setattr(router_mod, k, v)
    return old


async def run_once(label: str, policy: str, sticky: bool, sessions, n_sessions: int, turns: int,
                   time_scale: float, ordered: bool) -> Run:
    T.reset()
    mesh = await bg.start_mesh(replicas=4, routing=policy, time_scale=time_scale)
    # Ordered arrivals: replay i starts once replay i-1 has finished its first turn, so the router
    # sees the sessions' first turns in the same order in every run.
    first_done = [asyncio.Event() for _ in range(n_sessions)]

    async def replay(i: int) -> list:
        if ordered and i:
            await first_done[i - 1].wait()
        try:
            return await bg.replay_session(mesh.stub, sessions[i % len(sessions)], max_turns=turns,
                                           task_prefix=f"session {i}: ", new_stream_per_turn=not sticky,
                                           progress=first_done[i].set)
        finally:
            first_done[i].set()

    try:
        runs = await asyncio.gather(*(replay(i) for i in range(n_sessions)))
    finally:
        await mesh.close()
    flat = [t for run in runs for t in run]
    loads = bg.replica_loads(flat, 4)
    later = [t for t in flat if t.turn >= 1]
    return Run(label, T.hittable, T.hit, T.new_tokens, T.prompt_tokens, Counter(T.causes),
               sum(t.cached_tokens for t in later) / max(1, sum(t.input_tokens for t in later)),
               sum(t.cached_tokens for t in flat) / max(1, sum(t.input_tokens for t in flat)),
               max(loads) / max(1e-9, statistics.mean(loads)), (max(loads), statistics.mean(loads)),
               [(i, t.turn, t.replica) for i, run in enumerate(runs) for t in run], sum(T.evicted_blocks.values()),
               statistics.mean(t.ttft_s for t in flat) * 1000)


CONFIGS = (("sticky, cache-aware", "cache-aware", True),
           ("new stream/turn, cache-aware", "cache-aware", False),
           ("new stream/turn, round-robin", "round-robin", False))


def file_notes() -> list[str]:
    """Which of the files this measurement depends on are not in the commit named above, with digests."""
    notes = []
    for rel in ("bench/bench_routing_misses.py", "services/loopwire/gateway/router.py"):
        path = provenance.ROOT / rel
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        tracked = subprocess.run(["git", "ls-files", "--error-unmatch", rel], cwd=provenance.ROOT,
                                 capture_output=True).returncode == 0
        changed = tracked and subprocess.run(["git", "diff", "--quiet", "HEAD", "--", rel],
                                             cwd=provenance.ROOT).returncode != 0
        state = "not yet committed (new file)" if not tracked else "changed, not yet committed" if changed else "as committed"
        notes.append(f"{rel}: {state}; sha256 {digest}")
    return notes


def table(runs: list[list[Run]], title: str) -> Table:
    t = Table(title=title)
    cols = ["configuration", "run", "hit rate (all turns)", "hit rate (turns >= 2)", "same replica as run 1",
            "hittable tokens", "hits (% hittable)", "not hittable (new/changed)", *[f"{c} %" for c in CAUSES],
            "blocks evicted", "prefill max/mean (tokens)", "TTFT mean ms (wall)"]
    for c in cols:
        t.add_column(c, justify="right")
    for group in runs:
        first = {(s, k): r for s, k, r in group[0].assignment}
        for j, r in enumerate(group):
            same = sum(first.get((s, k)) == rep for s, k, rep in r.assignment) / max(1, len(r.assignment))
            pct = [f"{r.causes.get(c, 0) / max(1, r.hittable):.1%}" for c in CAUSES]
            t.add_row(r.label, str(j + 1), f"{r.all_rate:.1%}", f"{r.turn2_rate:.1%}", f"{same:.0%}",
                      f"{r.hittable:,}", f"{r.hit:,} ({r.hit / max(1, r.hittable):.1%})", f"{r.new_tokens:,}",
                      *pct, f"{r.evicted:,}",
                      f"{r.max_mean[0]:,.0f} / {r.max_mean[1]:,.0f} = {r.imbalance:.2f}", f"{r.ttft_ms:.0f}")
    return t


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=provenance.DATA_SESSIONS)
    parser.add_argument("--quick", action="store_true", help="4 sessions, 8 concurrent, 4 turns")
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--time-scale", type=float, default=0.25)
    parser.add_argument("--variants", default="before,after",
                        help="router constants: before (TIE_RATIO 0: no tie unless the scores are equal; BALANCE_SLACK 6 "
                             "for every replica; BALANCE_RATIO 1.25: as committed before) and/or after (as "
                             "router.py has them)")
    parser.add_argument("--arrivals", default="ordered,concurrent",
                        help="ordered (each replay starts once the one before has finished its first turn) and/or "
                             "concurrent (all at once)")
    parser.add_argument("--label", default="", help="a note on the router under test, for the results file")
    parser.add_argument("--configs", default="0,1,2", help="which configurations (0 sticky, 1 cache-aware new "
                                                           "stream/turn, 2 round-robin new stream/turn)")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    loaded = bg.load_sessions(args.traces)
    n_sessions, turns = args.sessions, args.turns
    if args.quick:
        loaded, n_sessions, turns = loaded[:4], 8, 4
    sessions = [s for _, s in loaded]
    install()
    after = {k: getattr(router_mod, k, None) for k in BEFORE}
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    groups = []
    arrivals = [a.strip() for a in args.arrivals.split(",") if a.strip()]
    if not set(arrivals) <= {"ordered", "concurrent"}:
        parser.error("--arrivals: ordered and/or concurrent")
    for variant, arrival in itertools.product(variants, arrivals):
        old = set_router(BEFORE if variant == "before" else after)
        try:
            for k in (int(c) for c in args.configs.split(",")):
                label, policy, sticky = CONFIGS[k]
                label = f"{variant}, {arrival}: {label}"
                group = []
                for _ in range(args.repeats):
                    group.append(await run_once(label, policy, sticky, sessions, n_sessions, turns, args.time_scale,
                                                arrival == "ordered"))
                    console.print(f"{label}: hit {group[-1].all_rate:.1%}, hittable hit "
                                  f"{group[-1].hit / max(1, group[-1].hittable):.1%}")
                groups.append(group)
        finally:
            set_router(old)
    router_file = provenance.ROOT / "services" / "loopwire" / "gateway" / "router.py"
    router_sha = hashlib.sha256(router_file.read_bytes()).hexdigest()[:12]
    title = (f"Prompt tokens by fate, 4 simulated replicas, {n_sessions} concurrent replays, first {turns} turns"
             f" (router.py sha256 {router_sha}; after: TIE_RATIO {after['TIE_RATIO']}, BALANCE_SLACK "
             f"{after['BALANCE_SLACK']} (HISTORY_SLACK {router_mod.HISTORY_SLACK}), BALANCE_RATIO {after['BALANCE_RATIO']}, seed 0"
             f"{'; ' + args.label if args.label else ''})")
    t = table(groups, title)
    console.print(t)
    routed = loaded[:n_sessions]
    used = [(p, min(len(s.turns), turns)) for p, s in routed]
    path = provenance.write_markdown(
        args.out, "routing_misses", "Routing benchmark: where the missing prefix-cache hits go",
        provenance.provenance(
            f"{provenance.describe_sessions(used, note=f'first {turns} turns of each')}; {n_sessions} concurrent "
            "replays cycling over these (each replay's task prefixed with its number)",
            engine="simulated (the real scheduler and KV block manager); gateway, router and replicas in this process "
                   f"on real gRPC servers; 4 replicas at time scale {args.time_scale:g}",
            cost_model=provenance.cost_model("h200", "8b"),
            notes=[*file_notes(), "percentages of the cause columns are of the hittable tokens; hits and causes "
                   "add up to 100% of them", "same replica as run 1: share of (session, turn) pairs that run k sent "
                   "to the same replica as run 1 of that configuration"]),
        [*provenance.table_markdown(t)])
    console.print(f"wrote {provenance.rel(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: asyncio.run(main())))
