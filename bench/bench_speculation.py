"""Speculative decoding on recorded agent sessions: no speculation vs prompt lookup vs suffix
decoding (fixed draft length, or as long as the roofline says pays off; turns replayed one by
one, or turn j of every session live together, as one tenant or a tenant per session), mean
acceptance length and decode tokens/s, and the modelled speed-up at batch 1, 16 and 64, every
session of every ``--traces`` set in one run.

Each set is replayed through a fresh simulated replica (the real scheduler, KV manager and
drafter; the forward pass priced by the roofline cost model on a virtual clock). Every
assistant turn is one request whose prompt is the conversation so far and whose output is
forced to the recorded turn by the replay oracle, so acceptance depends only on the drafter,
not on a model: acceptance length = output tokens / verification steps (DESIGN §4). Turns of
all sessions are interleaved (turn 1 of every session, then turn 2, ...), as a replica
serving them concurrently sees them: suffix decoding's shared store holds the others'
earlier outputs. In the concurrent modes turn j of every session is submitted at once, so the
tenant's live requests draft from each other (a tenant per session: they may not). Decode
tokens/s is modelled (the decode phase of each turn; batch 1 except in the concurrent modes).
The speed-up table prices a step of B decodes at the replay's mean decode context with the
draft cap the cost policy picks from the acceptance measured per draft position
(``loopwire.inference.draft_length``).

Run: .venv/bin/python bench/bench_speculation.py [--traces DIR ...] [--quick] [--out DIR]
Writes speculation.md and speculation.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from bench_engine import Turn, session_turns  # noqa: E402
from loopwire.common.model_def import dummy_definition  # noqa: E402
from loopwire.inference.config import EngineConfig, model_preset  # noqa: E402
from loopwire.inference.cost_model import CostModel  # noqa: E402
from loopwire.inference.draft_length import AcceptanceStats, DraftLengthPolicy  # noqa: E402
from loopwire.inference.engine_core import EngineCore  # noqa: E402
from loopwire.inference.sequence import GenerationRequest  # noqa: E402
from loopwire.inference.simulated_engine import simulated_core  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=150)
GPU, PARAMS = "h200", "8b"
QUICK_SESSIONS = 4


@dataclass(frozen=True)
class Mode:
    label: str
    drafter: str  # "" = no speculation
    k: int  # the most draft tokens
    draft_length: str = "fixed"  # or "cost": as many as the roofline says pay off
    concurrent: bool = False  # turn j of every session live at once
    tenant_per_session: bool = False  # each session its own tenant (no pool across sessions)
    branches: int = 1  # draft branches per step (alternatives verified as forks)


COST_K = 32
MODES = [
    Mode("none", "", 0),
    Mode("prompt lookup k=8", "prompt_lookup", 8),
    Mode("prompt lookup k=16", "prompt_lookup", 16),
    Mode("suffix k=8", "suffix", 8),
    Mode("suffix k=16", "suffix", 16),
    Mode(f"suffix, cost-model length <= {COST_K}", "suffix", COST_K, "cost"),
    Mode(f"suffix, cost-model length <= {COST_K}, concurrent, one tenant", "suffix", COST_K, "cost", True),
    Mode(f"suffix, cost-model length <= {COST_K}, concurrent, tenant per session", "suffix", COST_K, "cost", True,
         True),
    Mode("suffix k=16, 4 branches", "suffix", 16, branches=4),
    Mode(f"suffix, cost-model rows <= {COST_K}, 4 branches", "suffix", COST_K, "cost", branches=4),
    Mode(f"suffix, cost-model rows <= {COST_K}, 4 branches, concurrent, one tenant", "suffix", COST_K, "cost", True,
         branches=4),
]
BATCHES = (1, 16, 64)


@dataclass
class Tally:
    tokens: int = 0
    steps: int = 0
    decode_tokens: int = 0
    decode_us: int = 0
    proposed: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.tokens / max(self.steps, 1)

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / max(self.decode_us, 1) * 1e6


def replica(mode: Mode) -> EngineCore:
    cost = CostModel.named(GPU, PARAMS)
    config = EngineConfig(model=model_preset(PARAMS), num_kv_blocks=cost.kv_blocks_that_fit(16),
                          max_batch_tokens=8192, max_running=256, drafter=mode.drafter or "prompt_lookup",
                          num_draft_tokens=max(mode.k, 1), draft_length=mode.draft_length,
                          draft_branches=mode.branches)
    core, _ = simulated_core(config, cost, dummy_definition())
    return core


def replay(mode: Mode, sessions: dict[str, list[Turn]], progress: Progress,
           task: object) -> tuple[dict[str, Tally], AcceptanceStats]:
    """Every turn of every session through one replica, interleaved by turn index; the tallies and
    the acceptance per draft position, undecayed."""
    core = replica(mode)
    stop = tuple(dummy_definition().stop_token_ids)
    tallies = {name: Tally() for name in sessions}
    measured = AcceptanceStats(max(mode.k, 1), decay=1.0, prior_weight=0.0)
    if core.draft_policy is not None:
        stats = core.draft_policy.stats

        def observe(cap: int, proposed: int, accepted: int) -> None:
            measured.observe(cap, proposed, accepted)
            AcceptanceStats.observe(stats, cap, proposed, accepted)

        stats.observe = observe  # type: ignore[method-assign]

    def drain() -> None:
        while core.has_work():
            for out in core.step():
                if out.finished is None:
                    continue
                u, t = out.finished.usage, tallies[out.request_id.split("/")[0]]
                t.tokens += u.output_tokens
                t.steps += u.verification_steps
                t.decode_tokens += max(u.output_tokens - 1, 0)
                t.decode_us += out.finished.timings.decode_us
                t.proposed += u.draft_tokens_proposed
                t.accepted += u.draft_tokens_accepted
                progress.advance(task)  # type: ignore[arg-type]

    for j in range(max(len(t) for t in sessions.values())):
        for name, turns in sessions.items():
            if j >= len(turns):
                continue
            turn = turns[j]
            core.add(GenerationRequest(f"{name}/{j}", turn.prompt, len(turn.oracle), stop_token_ids=stop,
                                       oracle=turn.oracle, speculative=bool(mode.drafter), session_id=name,
                                       cache_salt=name if mode.tenant_per_session else "tenant"))
            if not mode.concurrent:
                drain()
        drain()
    return tallies, measured


def mean_decode_context(sessions: dict[str, list[Turn]]) -> int:
    """The context a decode step of the replay sees on average (prompt plus half the output)."""
    turns = [t for ts in sessions.values() for t in ts]
    weight = sum(len(t.oracle) for t in turns)
    return round(sum(len(t.oracle) * (len(t.prompt) + len(t.oracle) / 2) for t in turns) / max(weight, 1))


def total(tallies: dict[str, Tally]) -> Tally:
    out = Tally()
    for t in tallies.values():
        for f in ("tokens", "steps", "decode_tokens", "decode_us", "proposed", "accepted"):
            setattr(out, f, getattr(out, f) + getattr(t, f))
    return out


def load_set(paths: list[Path], cache: dict[str, list[Turn]]) -> tuple[dict[str, list[Turn]], list[tuple[Path, int]], str]:
    """The set's sessions, the files used, and a digest of their contents (identical sets replay identically)."""
    sessions: dict[str, list[Turn]] = {}
    used = []
    whole = hashlib.sha256()
    for path in paths:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        whole.update(digest.encode())
        if digest not in cache:
            try:
                cache[digest] = session_turns(path)
            except ValueError:
                cache[digest] = []
        if cache[digest]:
            sessions[path.name.split(".")[0]] = cache[digest]
            used.append((path, len(cache[digest])))
    return sessions, used, whole.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, nargs="+", default=[provenance.DATA_SESSIONS],
                        help="session sets (directories), each replayed on its own replica (default: data/sessions)")
    parser.add_argument("--quick", action="store_true", help=f"the first {QUICK_SESSIONS} sessions of each set")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    cache: dict[str, list[Turn]] = {}
    sets = []
    for root in args.traces:
        paths = provenance.session_files(root)[: QUICK_SESSIONS if args.quick else None]
        sessions, used, digest = load_set(paths, cache)
        if not sessions:
            raise SystemExit(f"no recorded sessions under {root}")
        sets.append((root, sessions, used, digest))
    results: list[tuple[Path, dict[str, list[Turn]], list[tuple[Path, int]], dict[str, dict[str, Tally]]]] = []
    done: dict[str, tuple[Path, dict[str, dict[str, Tally]]]] = {}
    same_as: dict[Path, Path] = {}
    acceptance: dict[tuple[Path, str], AcceptanceStats] = {}
    with Progress(console=console, transient=True) as progress:
        for root, sessions, used, digest in sets:
            if digest in done:  # the same files: the replay is deterministic, its result is the same
                same_as[root] = done[digest][0]
                results.append((root, sessions, used, done[digest][1]))
                continue
            n = sum(len(t) for t in sessions.values())
            per_mode = {}
            for mode in MODES:
                task = progress.add_task(f"{provenance.rel(root)}: {mode.label}", total=n)
                per_mode[mode.label], acceptance[(root, mode.label)] = replay(mode, sessions, progress, task)
            done[digest] = (root, per_mode)
            results.append((root, sessions, used, per_mode))

    table = Table(title=f"Acceptance length and decode speed (replay; simulated {GPU.upper()} Llama {PARAMS.upper()}, "
                        "batch 1 except the concurrent modes)")
    for col in ("session set", "drafter", "tokens / verification step", "draft tokens accepted",
                "decode tok/s", "vs none"):
        table.add_column(col, justify="left" if col in ("session set", "drafter") else "right")
    for root, sessions, used, per_mode in results:
        base = total(per_mode["none"]).decode_tps
        for mode in MODES:
            t = total(per_mode[mode.label])
            rate = f"{t.accepted / t.proposed:.0%}" if t.proposed else "-"
            same = f", same files as {provenance.rel(same_as[root])}" if root in same_as else ""
            table.add_row(f"{provenance.rel(root)} ({len(sessions)} sessions, {sum(n for _, n in used):,} turns{same})",
                          mode.label, f"{t.acceptance:.2f}", rate, f"{t.decode_tps:,.0f}",
                          f"{t.decode_tps / max(base, 1e-9):.2f}×")
    console.print(table)
    cost = CostModel.named(GPU, PARAMS)
    speedup = Table(title=f"Modelled decode speed-up over no speculation at batch {', '.join(map(str, BATCHES))} "
                          f"(simulated {GPU.upper()} Llama {PARAMS.upper()}; draft cap the cost policy picks)")
    speedup.add_column("session set")
    speedup.add_column("drafter")
    speedup.add_column("mean decode context", justify="right")
    for b in BATCHES:
        speedup.add_column(f"batch {b}: cap / speed-up", justify="right")
    for root, sessions, _, _ in results:
        if root in same_as:
            continue
        context = mean_decode_context(sessions)
        for mode in MODES:
            if mode.draft_length != "cost" or mode.branches > 1:  # the fixed modes measure only the positions
                continue  # they drafted; the policy models one chain (branch modes: their own decode tok/s)
            policy = DraftLengthPolicy(cost, mode.k, stats=acceptance[(root, mode.label)])
            cells = []
            for b in BATCHES:
                k, gain = policy.best([context] * b)
                cells.append(f"{k} / {gain:.2f}×")
            speedup.add_row(provenance.rel(root), mode.label, f"{context:,}", *cells)
    console.print(speedup)
    root0, sessions0, used0, per_mode0 = results[0]
    shown = ["none", "prompt lookup k=8", "suffix k=8", "suffix k=16", MODES[5].label, MODES[9].label]
    per_session = Table(title=f"Tokens per verification step per session ({provenance.rel(root0)})")
    per_session.add_column("session")
    per_session.add_column("turns", justify="right")
    for label in shown:
        per_session.add_column(label, justify="right")
    for name, turns in sessions0.items():
        per_session.add_row(name[:34], str(len(turns)), *(f"{per_mode0[m][name].acceptance:.2f}" for m in shown))
    console.print(per_session)

    short = provenance.short_data(used0)
    fig, ax = plt.subplots(figsize=(12, max(5, 0.32 * len(sessions0) + 2)))
    names = list(sessions0)
    height = 0.8 / len(shown)
    for i, label in enumerate(shown):
        ax.barh([y + i * height for y in range(len(names))], [per_mode0[label][n].acceptance for n in names],
                height=height, label=label)
    ax.set_yticks([y + 0.4 - height / 2 for y in range(len(names))], [n[:34] for n in names], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(2.5, color="gray", linestyle="--", linewidth=1)
    ax.set(title=f"Mean acceptance length per session, replayed turns interleaved on one replica\n{short}",
           xlabel="tokens per verification step (output tokens / verification steps; dashed: the 2.5 goal)",
           ylabel="session")
    ax.legend(loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    provenance.stamp(fig, short)
    png = provenance.save_figure(fig, args.out, "speculation")
    header = provenance.provenance(
        [provenance.describe_sessions(used, note="every assistant turn, turns of all sessions interleaved")
         for _, _, used, _ in results],
        engine="simulated engine (real scheduler, KV manager and drafters), dummy:0 cl100k tokenizer; recorded turns "
               "forced by the replay oracle; decode tokens/s is virtual time at batch 1",
        cost_model=provenance.cost_model(GPU, PARAMS),
        notes=["acceptance length = output tokens / verification steps over all turns (1.00 = no speculation); "
               "prompt lookup: n-grams 3..2 over the session; suffix: suffix automata over the session and the "
               "replica's recent outputs (`loopwire.inference.suffix_tree`); 4 branches: the favourite draft and up to 3 "
               "alternatives starting with the next-likeliest tokens, each verified as a fork of the sequence in the "
               "same step (its rows priced as a sequence of its own, attention over the whole context included); "
               "under the cost policy all branches share the rows it allows",
               "the modelled speed-up table models one chain; a branch mode's speed-up is its decode tok/s against "
               "none (batch 1) and its concurrent row (turn j of every session in one batch)"])
    body = ["Replays of recorded sessions (oracle tokens).", "", *provenance.table_markdown(table), "",
            *provenance.table_markdown(speedup), "",
            *provenance.table_markdown(per_session), "", "![speculation](speculation.png)"]
    md = provenance.write_markdown(args.out, "speculation", "Speculative decoding: none vs prompt lookup vs suffix",
                                   header, body)
    console.print(f"wrote {provenance.rel(png)} and {provenance.rel(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
