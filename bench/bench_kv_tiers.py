"""KV eviction policies on agent traffic with idle gaps: LRU vs retention priorities vs
priorities + a host-memory tier, at a device KV capacity that forces eviction.

Every session of ``--traces`` runs on one simulated replica (the real scheduler and block
manager, the roofline cost model on a virtual clock, host copies priced at the host-link
bandwidth). A session's next turn arrives when its previous turn finished plus an idle gap:
the tool's run time or a human approval wait. The recordings carry no timestamps, so the gaps
come from a documented, seeded model (``gap_seconds``): lognormal tool times, long for test
runs and installs seen in the recorded command, short otherwise, and an approval wait before
a fraction of the turns. Outputs are the recorded turns (replay oracle), no speculation, so
every policy does the same work and only caching differs.

Retention (``priority`` modes): the instructions + tool-schema prefix at 90 (alone in
``priority, prefix only``); a session that
waits for approval holds its context at 70 for ``HOLD_S``; the
rest at the default 35. Long tools are not held: the harness cannot tell a 2 s tool from a
2 min one, and holding every session's context starves the active ones at this capacity (TensorRT-LLM ``KvCacheRetentionConfig`` semantics).

``hints`` modes: instead of pinning, the harness's KV hints (``kv_cache.BlockManager.pause`` /
``resume``, as ``HoldKv`` with a hint reaches a replica): when a turn ends and its tool runs, the
session's blocks are demoted (they leave the device first, for the host tier, kept there at
priority 80); the replica brings them back ahead of the expected end (less the copy's modelled
time, doubled, and 0.25 s; kept there until the resume hint), and the harness's resume hint at the
tool's end (``ASSEMBLE_S`` before the next request reaches the replica) brings back whatever is
still in the host tier. A turn followed by an approval is paused with no expected end (nobody
knows when a human answers); the decision starts the tools, whose own pause hint replaces it (or,
when they are too short for one, a resume at once). ``hints`` gives the tool's run time as it
will be; ``hints, resume only`` gives no expected pause: only the resume hint (and the decision)
brings the blocks back. ``hints, estimated pause`` gives the pause the harness would expect
(``kv_hints.PauseEstimate``: an early quantile of what the same command took before in the
session; no hint under 1 s, unless the tools outrun it: then a late one that expects them back at
once, as the harness sends it; ``..., no late hint``: without it), not the one that follows.
``--draws N`` replays N draws of the gap model and pools their turns: one draw's tail is a handful
of tools, and its p90 moves several-fold from one seed to the next. A hint's copies (the blocks it brings back
and those it evicts for them) occupy the host link (``CostModelExecutor.prefetch``): a step that
starts before they are done waits for them.

The reference, ``device holds all``, replays the same turns with device KV for the whole working
set: each turn's TTFT with all it can reuse on the device. A mode's turn after a gap is compared
with that same turn there (``after a gap ÷ the same turn warm``); ``TTFT warm`` is the mode's own
turns after a short gap, other turns with other prompt lengths.

``--traces`` also takes the Claude Code request traces (a folder of ``.json.gz``): real sessions
with their recorded request times. Each 64-token block id becomes 64 token ids (a function of
the file and the id, so prefix reuse follows the recorded block structure; the engine's blocks
are 64 tokens too), each request's recorded output length is its output, its pause the recorded
time to the next request less the recorded API time. Sessions start ``TRACE_STAGGER_S`` apart
(the time compression: their recorded pauses are kept); a subagent is its own stream, started
when the parent request before it in the recording ends, sharing the file's blocks. The
reference for hits is an infinite per-session cache: the longest prefix of a request's blocks
that any earlier request of its file had.

Run: .venv/bin/python bench/bench_kv_tiers.py [--traces DIR] [--quick] [--sessions N] [--out DIR]
Writes kv_tiers.md, kv_tiers.png and kv_tiers.json (``{"modes": {MODE: {"hit_after_gap",
"ttft_after_gap_p50_ms", "ttft_warm_p50_ms", ...}}}``; warm: turns after a gap under
``LONG_GAP_S``) into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from bench_engine import Turn, session_turns  # noqa: E402
from loopwire.common.hashing import ROOT_BLOCK_HASH, block_hashes  # noqa: E402
from loopwire.common.model_def import dummy_definition  # noqa: E402
from loopwire.common.prompt import ChatPrompt  # noqa: E402
from loopwire.common.recorded import load_session  # noqa: E402
from loopwire.gateway.conversation import Conversation  # noqa: E402
from loopwire.harness.kv_hints import LATE_PAUSE_MS, MIN_PAUSE_MS, PauseEstimate  # noqa: E402
from loopwire.inference.config import EngineConfig, model_preset  # noqa: E402
from loopwire.inference.cost_model import CostModel  # noqa: E402
from loopwire.inference.kv_pause_hints import prefetch_at  # noqa: E402
from loopwire.inference.sequence import GenerationRequest, RetentionPolicy, TokenRangeRetention  # noqa: E402
from loopwire.inference.simulated_engine import simulated_core  # noqa: E402
from loopwire.v1 import common_pb2  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=150)
GPU, PARAMS = "h200", "8b"
BLOCK = 16
# Capacities as fractions of the working set (the sum of every session's longest context):
# the device holds a quarter of it, the host tier another half.
DEVICE_FRACTION, HOST_FRACTION = 0.25, 0.5
HOLD_S = 300.0
LONG_GAP_S = 30.0  # "after a gap": turns that waited at least this long
STAGGER_S = 4.0  # session i starts at i * STAGGER_S
QUICK_SESSIONS, QUICK_TURNS = 8, 20
ASSEMBLE_S = 0.005  # a tool's end to its next request at the replica (store the outputs, build, prepare)
HINT_S = 3600.0  # how long a pause hint counts at most (the tenant's retention ceiling)
TRACE_BLOCK = 64  # the Claude Code traces' block size
TRACE_STAGGER_S = 20.0
TRACE_VOCAB = 100_000
TRACE_CALL = common_pb2.FunctionCall(name="tool")
# Gap model (seconds): lognormal(median, sigma). Long tools: test runs, installs, builds.
LONG_TOOL = re.compile(r"pytest|python -m|python3? \S+\.py|pip install|tox|make\b|setup\.py|npm |cargo ")
SHORT_TOOL_GAP, LONG_TOOL_GAP, APPROVAL_GAP = (1.0, 0.7), (20.0, 1.0), (90.0, 1.0)
APPROVAL_FRACTION = 0.15


@dataclass(frozen=True)
class Mode:
    label: str
    policy: str
    priorities: str  # "": none; "prefix": the instructions only; "holds": also approval holds
    host: bool
    # "": none; "expected": pause hints with the pause as long as it will be; "estimated": with the
    # harness's estimate of it (``PauseEstimate``); "resume": without an expected pause
    hints: str = ""
    device_holds_all: bool = False  # the reference: device KV for the whole working set, nothing evicted
    late: bool = True  # "estimated": tools expected short that outrun MIN_PAUSE_MS get a late pause hint


MODES = [
    Mode("LRU", "lru", "", False),
    Mode("priority, prefix only", "priority", "prefix", False),
    Mode("priority", "priority", "holds", False),
    Mode("LRU + host tier", "lru", "", True),
    Mode("priority + host tier", "priority", "holds", True),
    Mode("hints, resume only", "priority", "prefix", True, "resume"),
    Mode("hints", "priority", "prefix", True, "expected"),
    Mode("hints, estimated pause", "priority", "prefix", True, "estimated"),
    Mode("hints, estimated pause, no late hint", "priority", "prefix", True, "estimated", late=False),
]
# Every run replays this one too: each turn's TTFT with its whole reusable prefix on the device (the
# same turn warm), against which a mode's turns after a gap are compared turn by turn.
REFERENCE = Mode("device holds all", "lru", "", False, device_holds_all=True)


@dataclass
class SessionPlan:
    name: str
    turns: list[Turn]
    system_len: int
    gaps: list[float]  # before turn j (gaps[0]: the start offset)
    holds: list[bool]  # turn j is followed by an approval wait (the harness knows it is asking)
    # Cached tokens an infinite per-session cache would give turn j (traces; None: not computed).
    ideal: list[int] | None = None
    after: tuple[int, int] | None = None  # a subagent: starts when this (plan, turn) ends
    file: str = ""  # the recording it comes from (traces: one file's streams share its blocks)
    # What the harness knows of the pause after turn j: the calls it runs, and how long they ran
    # (the gap less an approval wait, which the harness knows it is asking for but not its length).
    calls: list[list[common_pb2.FunctionCall]] = field(default_factory=list)
    tool_s: list[float] = field(default_factory=list)


@dataclass
class Result:
    queried: int = 0
    hit: int = 0
    host_hit: int = 0
    ttft: list[float] = field(default_factory=list)
    ttft_after_gap: list[float] = field(default_factory=list)
    ttft_warm: list[float] = field(default_factory=list)  # turns after a gap under LONG_GAP_S
    ttft_by_turn: dict[str, float] = field(default_factory=dict)  # "plan/turn" -> TTFT
    cached_by_turn: dict[str, int] = field(default_factory=dict)  # "plan/turn" -> cached prompt tokens
    after_gap_turns: list[str] = field(default_factory=list)
    hit_after_gap: list[float] = field(default_factory=list)
    hit_tokens_after_gap: int = 0
    ideal_tokens_after_gap: int = 0
    prefetched: int = 0
    onloaded: int = 0
    transfer_s: float = 0.0
    makespan: float = 0.0

    def add(self, other: Result, draw: int) -> None:
        """Pool another draw's replay into this one (its turns' keys prefixed by the draw)."""
        for name in ("queried", "hit", "host_hit", "hit_tokens_after_gap", "ideal_tokens_after_gap", "prefetched",
                     "onloaded", "transfer_s", "makespan"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("ttft", "ttft_after_gap", "ttft_warm", "hit_after_gap"):
            getattr(self, name).extend(getattr(other, name))
        self.after_gap_turns.extend(f"{draw}:{t}" for t in other.after_gap_turns)
        self.ttft_by_turn.update({f"{draw}:{t}": v for t, v in other.ttft_by_turn.items()})
        self.cached_by_turn.update({f"{draw}:{t}": v for t, v in other.cached_by_turn.items()})


def lognormal(rng: np.random.Generator, median: float, sigma: float) -> float:
    return float(median * math.exp(sigma * rng.standard_normal()))


def plan(path: Path, index: int, rng: np.random.Generator, max_turns: int) -> SessionPlan | None:
    try:
        turns = session_turns(path)[: max_turns or None]
    except ValueError:
        return None
    s = load_session(path)
    system = Conversation(ChatPrompt(dummy_definition()), "", s.instructions, s.tools).prompt_ids()
    first = turns[0].prompt
    system_len = next((i for i, (a, b) in enumerate(zip(system, first, strict=False)) if a != b), len(system))
    gaps, holds, calls, tool_s = [index * STAGGER_S], [], [], []
    for t in s.turns[: len(turns)]:
        command = t.text + " ".join(c.arguments for c in t.calls)
        long_tool = bool(LONG_TOOL.search(command))
        gap = lognormal(rng, *(LONG_TOOL_GAP if long_tool else SHORT_TOOL_GAP))
        tool_s.append(gap)
        approval = rng.random() < APPROVAL_FRACTION
        if approval:
            gap += lognormal(rng, *APPROVAL_GAP)
        gaps.append(gap)
        holds.append(approval)
        # As the harness runs them (a recorded ``bash`` call is its ``shell`` tool).
        calls.append([common_pb2.FunctionCall(name="shell" if c.name == "bash" else c.name, arguments=c.arguments)
                      for c in t.calls])
    return SessionPlan(path.name.split(".")[0], turns, system_len, gaps, holds, calls=calls, tool_s=tool_s)


def retention(p: SessionPlan, j: int, holds: bool) -> RetentionPolicy:
    ranges = [TokenRangeRetention(0, p.system_len, 90)]
    if not holds:
        return RetentionPolicy(tuple(ranges))
    # The latest request sets a block's priority: a session back from its wait drops its hold.
    ranges.append(TokenRangeRetention(p.system_len, None, 70, duration_s=HOLD_S) if p.holds[j]
                  else TokenRangeRetention(p.system_len, None, 35))
    return RetentionPolicy(tuple(ranges), decode_priority=70 if p.holds[j] else 35,
                           decode_duration_s=HOLD_S if p.holds[j] else None)


def trace_tokens(salt: int, ids: list[int], n: int, tail: int) -> list[int]:
    """The ``n`` token ids of a traced prompt: each block id becomes ``TRACE_BLOCK`` ids, a function
    of the file (``salt``) and the id, so equal ids within a file are equal blocks; the partial
    block after the last id (the traces name full blocks only) is fresh, from ``tail``."""
    base = (np.asarray(ids, dtype=np.int64) * 1_000_003 + salt * 7_919) % TRACE_VOCAB
    out = ((base[:, None] + np.arange(TRACE_BLOCK)[None, :] * 7) % TRACE_VOCAB).reshape(-1)[:n].tolist()
    return out + [(tail * 7_919 + k * 13) % TRACE_VOCAB for k in range(n - len(out))]


def trace_plans(path: Path, index: int, max_output: int) -> list[SessionPlan]:
    """The streams of one traced session (the parent, then each subagent), with their recorded
    pauses and what an infinite cache of the file's earlier requests would hit."""
    d = json.loads(gzip.decompress(path.read_bytes()))
    salt = index + 1
    system_len = int(d.get("tool_tokens", 0)) + int(d.get("system_tokens", 0))
    seen: set[tuple[int, int]] = set()  # (prefix hash, length) of every prefix requested so far

    def ideal(r: dict) -> int:
        ids, h, k = r["hash_ids"], ROOT_BLOCK_HASH, 0
        chain: list[tuple[int, int]] = []
        for block_id in ids:
            h = hash((h, block_id))
            chain.append((h, len(chain)))
        while k < len(chain) and chain[k] in seen:
            k += 1
        seen.update(chain)
        usable = (int(r["in"]) - 1) // TRACE_BLOCK
        return min(k, usable) * TRACE_BLOCK

    plans: list[SessionPlan] = []

    def stream(name: str, requests: list[dict], offset: float, after: tuple[int, int] | None) -> None:
        me = len(plans)
        plan = SessionPlan(name, [], system_len, [offset], [], ideal=[], after=after, file=path.name)
        plans.append(plan)
        asked = [r for r in requests if r.get("type") != "subagent"]
        pending: list[tuple[dict, int]] = []
        for r in requests:
            if r.get("type") == "subagent":
                pending.append((r, len(plan.turns) - 1))
                continue
            for sub, before in pending:  # the parent's next request waits for its subagents
                stream(f"{name}/sub{len(plans)}", sub.get("requests", []), 0.0 if before >= 0 else offset,
                       (me, before) if before >= 0 else None)
            pending = []
            j = len(plan.turns)
            prompt = trace_tokens(salt, r["hash_ids"], int(r["in"]), salt * 100_003 + len(plans) * 1_009 + j)
            out_n = max(1, min(int(r.get("out", 1)), max_output))
            oracle = [(salt * 131 + index * 17 + j * 7 + k) % TRACE_VOCAB for k in range(out_n)]
            plan.turns.append(Turn(prompt, oracle))
            assert plan.ideal is not None
            plan.ideal.append(ideal(r))
            if j + 1 < len(asked):
                nxt = asked[j + 1]
                plan.gaps.append(max(0.0, float(nxt["t"]) - float(r["t"]) - float(r.get("api_time", 0.0))))
                plan.tool_s.append(plan.gaps[-1])
            plan.holds.append(False)
            plan.calls.append([TRACE_CALL])  # the traces name no tools: the estimate is the stream's own pauses
        for sub, before in pending:
            stream(f"{name}/sub{len(plans)}", sub.get("requests", []), 0.0 if before >= 0 else offset,
                   (me, before) if before >= 0 else None)

    stream(path.name.split(".")[0], d["requests"], index * TRACE_STAGGER_S, None)
    return [p for p in plans if p.turns]


def capacities(plans: list[SessionPlan], block: int = BLOCK, holds_all: bool = False) -> tuple[int, int]:
    """(device KV blocks, host tier bytes) for these sessions: fractions of the working set, the
    device at least twice the longest context (a replay of a few long sessions must fit one);
    ``holds_all``: the whole working set and a batch's room besides (nothing is ever evicted)."""
    contexts = [max(len(t.prompt) + len(t.oracle) for t in p.turns) for p in plans]
    working_set = sum(contexts)
    per_token = CostModel.named(GPU, PARAMS).kv_bytes_per_token
    if holds_all:
        return (working_set + sum(math.ceil(c / block) + 1 for c in contexts) * block) // block + 1, 0
    device = max(int(working_set * DEVICE_FRACTION), 2 * max(contexts))
    return device // block, int(working_set * HOST_FRACTION) * per_token


def run(mode: Mode, plans: list[SessionPlan], progress: Progress, task: object, block: int = BLOCK) -> Result:
    cost = CostModel.named(GPU, PARAMS)
    device_blocks, host_bytes = capacities(plans, block, mode.device_holds_all)
    config = EngineConfig(model=model_preset(PARAMS), block_size=block, num_kv_blocks=device_blocks,
                          max_batch_tokens=8192, max_running=256, eviction_policy=mode.policy,
                          host_kv_bytes=host_bytes if mode.host else 0)
    core, executor = simulated_core(config, cost, dummy_definition())
    clock, blocks = core.clock, core.blocks
    stop = tuple(dummy_definition().stop_token_ids)
    arrivals: list[tuple[float, int, int]] = [(p.gaps[0], i, 0) for i, p in enumerate(plans) if p.after is None]
    heapq.heapify(arrivals)
    followers: dict[tuple[int, int], list[int]] = {}  # subagents waiting for a turn to end
    for i, p in enumerate(plans):
        if p.after is not None:
            followers.setdefault(p.after, []).append(i)
    # The harness's hints still to come: (when, plan, kind, hashes, turn); kind "tool": the approval was
    # decided, the turn's tools start (a pause hint for them, or a resume when they are short); "late":
    # tools expected short outran ``MIN_PAUSE_MS`` (a pause hint then, expecting them back at once).
    hints: list[tuple[float, int, str, list[int], int]] = []
    estimates = [PauseEstimate() for _ in plans]  # mode "estimated": the harness's, per session
    waited: dict[str, float] = {}
    out = Result()

    def price_prefetch() -> None:
        n = blocks.take_prefetched()
        if n:
            executor.prefetch(n)
            out.prefetched += n

    def tool_pause(i: int, j: int, hashes: list[int]) -> None:
        """The tools of turn j of plan i start: the pause hint for them (when the harness would send
        one), and the resume hint due at their end."""
        p, now = plans[i], clock.now()
        expected_s = p.tool_s[j]
        if mode.hints == "estimated":
            expected_ms = max((estimates[i].expected_ms(c) for c in p.calls[j]), default=0)
            for c in p.calls[j]:
                estimates[i].observe(c, p.tool_s[j])  # known once the tool ends (used from the next pause on)
            expected_s = expected_ms / 1000
        if mode.hints == "estimated" and expected_s * 1000 < MIN_PAUSE_MS:  # the harness sends no pause hint
            if p.holds[j]:
                blocks.resume(str(i), hashes, ROOT_BLOCK_HASH, now)  # decided, and the tools are short: back now
            if mode.late and p.tool_s[j] * 1000 > MIN_PAUSE_MS:  # unless they outrun it: a late one, expecting them back at once
                heapq.heappush(hints, (now + MIN_PAUSE_MS / 1000, i, "late", hashes, j))
            return
        start = math.inf
        if mode.hints in ("expected", "estimated"):
            start = prefetch_at(now, expected_s, HINT_S, len(hashes), executor.seconds_per_host_block)
        blocks.pause(str(i), hashes, ROOT_BLOCK_HASH, now + HINT_S, start)
        heapq.heappush(hints, (now + max(0.0, p.tool_s[j] - ASSEMBLE_S), i, "resume", hashes, j))

    def pause(i: int, j: int) -> None:
        """Turn j of plan i ended: its tools run, or an approval is asked first (a pause hint of
        unknown length, then the tools' own once it is decided)."""
        p, turn = plans[i], plans[i].turns[j]
        hashes = block_hashes(turn.prompt + turn.oracle, block, ROOT_BLOCK_HASH)
        if not p.holds[j]:
            tool_pause(i, j, hashes)
            return
        blocks.pause(str(i), hashes, ROOT_BLOCK_HASH, clock.now() + HINT_S)
        heapq.heappush(hints, (clock.now() + p.gaps[j + 1] - p.tool_s[j], i, "tool", hashes, j))

    while arrivals or hints or core.has_work():
        if not core.has_work():
            due = min(arrivals[0][0] if arrivals else math.inf, hints[0][0] if hints else math.inf,
                      blocks.next_pause_event())
            if due > clock.now():
                clock.advance(due - clock.now())  # type: ignore[attr-defined]
            blocks.expire_retentions(clock.now())  # a pause's prefetch or end, while idle
        while hints and hints[0][0] <= clock.now():
            _, i, kind, hashes, j = heapq.heappop(hints)
            if kind == "tool":
                tool_pause(i, j, hashes)
            elif kind == "late":
                start = prefetch_at(clock.now(), LATE_PAUSE_MS / 1000, HINT_S, len(hashes), executor.seconds_per_host_block)
                blocks.pause(str(i), hashes, ROOT_BLOCK_HASH, clock.now() + HINT_S, start)
                resume_at = clock.now() - MIN_PAUSE_MS / 1000 + max(0.0, plans[i].tool_s[j] - ASSEMBLE_S)
                heapq.heappush(hints, (resume_at, i, "resume", hashes, j))
            else:
                blocks.resume(str(i), hashes, ROOT_BLOCK_HASH, clock.now())
        price_prefetch()
        while arrivals and arrivals[0][0] <= clock.now():
            _, i, j = heapq.heappop(arrivals)
            p = plans[i]
            turn = p.turns[j]
            rid = f"{i}/{j}"
            waited[rid] = p.gaps[j] if j else -1.0
            core.add(GenerationRequest(rid, turn.prompt, len(turn.oracle), stop_token_ids=stop, oracle=turn.oracle,
                                       speculative=False, session_id=p.name,
                                       retention=retention(p, j, mode.priorities == "holds") if mode.priorities
                                       else None))
        outputs = core.step()
        price_prefetch()
        for o in outputs:
            if o.finished is None:
                continue
            i, j = map(int, o.request_id.split("/"))
            p = plans[i]
            u, ttft = o.finished.usage, o.finished.timings.ttft_us / 1e6
            out.ttft.append(ttft)
            out.ttft_by_turn[o.request_id] = ttft
            out.cached_by_turn[o.request_id] = u.cached_input_tokens
            gap = waited.pop(o.request_id)
            if gap >= LONG_GAP_S:
                out.ttft_after_gap.append(ttft)
                out.after_gap_turns.append(o.request_id)
                out.hit_after_gap.append(u.cached_input_tokens / max(u.input_tokens, 1))
                if p.ideal is not None:
                    out.hit_tokens_after_gap += u.cached_input_tokens
                    out.ideal_tokens_after_gap += p.ideal[j]
            elif gap >= 0:
                out.ttft_warm.append(ttft)
            for follower in followers.pop((i, j), []):
                heapq.heappush(arrivals, (clock.now(), follower, 0))
            if j + 1 < len(p.turns):
                heapq.heappush(arrivals, (clock.now() + p.gaps[j + 1], i, j + 1))
                if mode.hints:
                    pause(i, j)
            progress.advance(task)  # type: ignore[arg-type]
    out.queried, out.hit, out.host_hit, out.onloaded = (blocks.queried_tokens, blocks.hit_tokens,
                                                        blocks.host_hit_tokens, blocks.onloaded_blocks)
    out.transfer_s = executor.transfer_seconds
    out.makespan = clock.now()
    return out


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=provenance.DATA_SESSIONS)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_SESSIONS} sessions, their first {QUICK_TURNS} turns")
    parser.add_argument("--seed", type=int, default=0, help="seed of the gap model")
    parser.add_argument("--draws", type=int, default=1,
                        help="agent sessions: replay N draws of the gap model (seeds SEED..SEED+N-1), turns pooled; "
                             "one draw's tail turns are a handful of tools, so its p90 moves several-fold between seeds")
    parser.add_argument("--sessions", type=int, default=0, help="replay only the first N sessions (0: all)")
    parser.add_argument("--modes", default="", help="mode labels to run, separated by semicolons (default: all): "
                        + "; ".join(m.label for m in MODES))
    parser.add_argument("--max-output", type=int, default=128,
                        help="traces: output tokens per request at most (the traces' outputs are never reused)")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    modes = [m for m in MODES if not args.modes or m.label in args.modes.split(";")]
    traced = sorted(args.traces.glob("*.json.gz")) if args.traces.is_dir() else []
    limit = QUICK_SESSIONS if args.quick else args.sessions or None
    block = TRACE_BLOCK if traced else BLOCK
    draws = 1 if traced else args.draws
    if draws < 1:
        raise SystemExit("--draws must be at least 1")
    results: dict[str, Result] = {}
    p90_by_draw: dict[str, list[float]] = {}
    for draw in range(draws):
        if traced:
            paths = traced[:limit]
            plans = [p for i, path in enumerate(paths) for p in trace_plans(path, i, args.max_output)]
            used = [(path, sum(len(p.turns) for p in plans if p.file == path.name)) for path in paths]
        else:
            paths = provenance.session_files(args.traces)[:limit]
            rng = np.random.default_rng(args.seed + draw)
            plans = [p for i, path in enumerate(paths) if (p := plan(path, i, rng, QUICK_TURNS if args.quick else 0))]
            used = [(path, len(p.turns)) for path, p in zip(paths, plans, strict=False)]
        if not plans:
            raise SystemExit(f"no recorded sessions under {args.traces}")
        n_turns = sum(len(p.turns) for p in plans)
        replays: dict[str, Result] = {}
        with Progress(console=console, transient=True) as progress:
            for mode in [REFERENCE, *modes]:
                task = progress.add_task(f"{mode.label} (draw {draw + 1}/{draws})", total=n_turns)
                replays[mode.label] = run(mode, plans, progress, task, block)
        for label, r in replays.items():
            results.setdefault(label, Result()).add(r, draw)
            p90_by_draw.setdefault(label, []).append(pct([r.ttft_by_turn[t] / replays[REFERENCE.label].ttft_by_turn[t]
                                                          for t in r.after_gap_turns], 90))
    reference = results[REFERENCE.label]
    device_blocks, host_bytes = capacities(plans, block)
    reference_blocks, _ = capacities(plans, block, holds_all=True)
    gaps = [g for p in plans for g in p.gaps[1:]]
    long_gaps = sum(g >= LONG_GAP_S for g in gaps)

    table = Table(title=f"Eviction policies, {len(plans)} sessions, {n_turns:,} turns"
                        f"{f' × {draws} draws of the gap model' if draws > 1 else ''} (replay; simulated "
                        f"{GPU.upper()} Llama {PARAMS.upper()}, {device_blocks * block:,} tokens of device KV)")
    for col in ("policy", "prefix hit rate", "from host", f"hit rate after a gap ≥ {LONG_GAP_S:.0f} s",
                *(("of an infinite per-session cache",) if traced else ()),
                "TTFT after a gap p50 / p90", "TTFT warm p50", "after a gap ÷ warm (p50)",
                "the same turns, device holds all: p50", "after a gap ÷ the same turn warm: p50 / p90",
                *(("p90 of each draw",) if draws > 1 else ()), "TTFT p50 / p99",
                "copies: onloads + by hints, both ways", "makespan"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    summary: dict[str, dict[str, float]] = {}
    for mode in modes:
        r = results[mode.label]
        same_turns = [reference.ttft_by_turn[t] for t in r.after_gap_turns]
        ratios = [r.ttft_by_turn[t] / reference.ttft_by_turn[t] for t in r.after_gap_turns]
        summary[mode.label] = {
            "hit_after_gap": statistics.fmean(r.hit_after_gap) if r.hit_after_gap else float("nan"),
            "ttft_after_gap_p50_ms": pct(r.ttft_after_gap, 50) * 1e3,
            "ttft_warm_p50_ms": pct(r.ttft_warm, 50) * 1e3,
            "ttft_after_gap_p90_ms": pct(r.ttft_after_gap, 90) * 1e3,
            "ttft_after_gap_same_turns_warm_p50_ms": pct(same_turns, 50) * 1e3,
            "after_gap_over_same_turn_warm_p50": pct(ratios, 50),
            "after_gap_over_same_turn_warm_p90": pct(ratios, 90),
            "hit_rate": r.hit / max(r.queried, 1),
            **({"hit_after_gap_of_infinite_cache": r.hit_tokens_after_gap / max(r.ideal_tokens_after_gap, 1)}
               if traced else {}),
        }
        row = summary[mode.label]
        table.add_row(mode.label, f"{r.hit / max(r.queried, 1):.1%}", f"{r.host_hit / max(r.queried, 1):.1%}",
                      f"{row['hit_after_gap']:.1%}",
                      *((f"{row['hit_after_gap_of_infinite_cache']:.1%}",) if traced else ()),
                      f"{row['ttft_after_gap_p50_ms']:,.0f} / {row['ttft_after_gap_p90_ms']:,.0f} ms",
                      f"{row['ttft_warm_p50_ms']:,.0f} ms",
                      f"{row['ttft_after_gap_p50_ms'] / row['ttft_warm_p50_ms']:.2f}x",
                      f"{row['ttft_after_gap_same_turns_warm_p50_ms']:,.0f} ms",
                      f"{row['after_gap_over_same_turn_warm_p50']:.2f}x / "
                      f"{row['after_gap_over_same_turn_warm_p90']:.2f}x",
                      *((" / ".join(f"{x:.2f}x" for x in p90_by_draw[mode.label]),) if draws > 1 else ()),
                      f"{pct(r.ttft, 50) * 1e3:,.0f} / {pct(r.ttft, 99) * 1e3:,.0f} ms",
                      f"{r.onloaded + r.prefetched:,} blocks ({r.prefetched:,}; {r.transfer_s:.2f} s)",
                      f"{r.makespan / 60:,.1f} min")
    console.print(table)
    if traced:
        ideal = sum(i for p in plans if p.ideal for i, g in zip(p.ideal, p.gaps, strict=False) if g >= LONG_GAP_S)
        after = sum(len(t.prompt) for p in plans for t, g in zip(p.turns, p.gaps, strict=False) if g >= LONG_GAP_S)
        console.print(f"an infinite per-session cache hits {ideal / max(after, 1):.1%} of the prompt tokens "
                      f"after a gap ≥ {LONG_GAP_S:.0f} s")

    short = provenance.short_data(used)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    labels = [m.label for m in modes]
    ax = axes[0]
    ax.bar(labels, [results[m].hit / max(results[m].queried, 1) * 100 for m in labels], label="all turns")
    ax.bar(labels, [results[m].host_hit / max(results[m].queried, 1) * 100 for m in labels],
           label="of which from the host tier", color="tab:orange")
    ax.set(title="Prefix-cache hit rate (cached prompt tokens / prompt tokens)", ylabel="%")
    ax.tick_params(axis="x", labelrotation=15)
    ax.legend()
    ax = axes[1]
    for m in labels:
        xs = sorted(results[m].ttft_after_gap)
        if xs:
            ax.plot([x * 1e3 for x in xs], np.linspace(0, 1, len(xs)), label=m)
    ax.set_xscale("log")
    ax.set(title=f"TTFT of turns after an idle gap ≥ {LONG_GAP_S:.0f} s (CDF)", xlabel="ms (virtual time)",
           ylabel="fraction of turns")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.suptitle(f"KV eviction policies, simulated {GPU.upper()} Llama {PARAMS.upper()}, device KV "
                 f"{device_blocks * block:,} tokens, host tier {host_bytes / 2**30:.1f} GiB")
    fig.tight_layout()
    provenance.stamp(fig, short)
    png = provenance.save_figure(fig, args.out, "kv_tiers")
    if traced:
        timing = (f"Claude Code request traces: each 64-token block id as 64 token ids, recorded pauses (next "
                  f"request's time less this one's end), outputs at most {args.max_output} tokens; sessions start "
                  f"{TRACE_STAGGER_S:g} s apart; subagents start when the parent request before them ends")
    else:
        seeds = f"seed {args.seed}" if draws == 1 else f"seeds {args.seed}..{args.seed + draws - 1}, turns pooled"
        timing = (f"gap model ({seeds}): tool time lognormal, median {LONG_TOOL_GAP[0]:g} s (σ "
                  f"{LONG_TOOL_GAP[1]:g}) when the recorded command runs tests/installs/builds, else "
                  f"{SHORT_TOOL_GAP[0]:g} s (σ {SHORT_TOOL_GAP[1]:g}); before {APPROVAL_FRACTION:.0%} of the turns an "
                  f"approval wait, median {APPROVAL_GAP[0]:g} s (σ {APPROVAL_GAP[1]:g}); sessions start "
                  f"{STAGGER_S:g} s apart (the recordings carry no timestamps)")
    header = provenance.provenance(
        provenance.describe_sessions(used, note=f"turns replayed with idle gaps, {long_gaps} of {len(gaps)} gaps "
                                                f"≥ {LONG_GAP_S:.0f} s"),
        engine=f"simulated engine, dummy:0 cl100k tokenizer; recorded turns forced by the replay oracle, no "
               f"speculation; device KV {device_blocks:,} blocks of {block} "
               f"({DEVICE_FRACTION:.0%} of the working set); host tier {host_bytes / 2**30:.1f} GiB "
               f"({HOST_FRACTION:.0%})",
        cost_model=provenance.cost_model(GPU, PARAMS) + f"; host link {CostModel.named(GPU, PARAMS).gpu.host_link_gb_per_s:g} GB/s",
        notes=[timing,
               f"retention: instructions + tool schemas 90; a turn followed by an approval wait holds "
               f"its context at 70 for {HOLD_S:g} s (modes `priority`); otherwise 35",
               f"hints: a pause hint when each turn's tools start (demoted, host priority 80, counts until the "
               f"resume hint, at most {HINT_S:g} s), the blocks brought back from (pause − 2 × modelled copy − 0.25 s) "
               f"on and kept until the resume (`hints`: the tool time that follows; `hints, estimated pause`: the "
               f"harness's estimate, an early quantile of what the same command took before in the session, no hint "
               f"under {MIN_PAUSE_MS} ms unless the tools outrun it: then a late one, expecting them back at once) and at the resume hint {ASSEMBLE_S * 1e3:g} ms before the next request; an "
               f"approval wait is a pause of unknown length, its decision starts the tools' own pause (or resumes "
               f"at once when they are short); a hint's copies (brought back, and evicted for their room) occupy "
               f"the host link from when they are made",
               f"warm: turns after a gap under {LONG_GAP_S:g} s; the same turn warm: that turn replayed with device "
               f"KV for the whole working set (`{REFERENCE.label}`, {reference_blocks:,} blocks), per-turn ratios"])
    body = ["Replays of recorded sessions (oracle tokens).", "", *provenance.table_markdown(table), "",
            "![kv tiers](kv_tiers.png)"]
    md = provenance.write_markdown(args.out, "kv_tiers", "KV eviction policies and the host tier", header, body)
    out_json = Path(args.out) / "kv_tiers.json"
    by_draw = {"after_gap_over_same_turn_warm_p90_by_draw": {m.label: p90_by_draw[m.label] for m in modes}}
    out_json.write_text(json.dumps({"modes": summary, **(by_draw if draws > 1 else {})}, indent=2) + "\n")
    console.print(f"wrote {provenance.rel(png)}, {provenance.rel(md)} and {provenance.rel(out_json)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
