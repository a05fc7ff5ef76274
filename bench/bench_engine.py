"""Reference-engine benchmark: what the prefix cache, continuous batching and speculative
decoding buy, each measured against the naive way on the same numpy model.

1. Per-turn latency of a replayed real session (every assistant turn of
   ``sqlfluff__sqlfluff-2419``: prompt = the conversation up to the turn, output = the
   recorded turn via the oracle) with the prefix cache on vs off. Without the cache each
   turn's cost is independent of the others, so the naive run measures evenly spaced turns.
2. Decode tokens/s at batch 1, 8 and 32 (continuous batching: one forward pass per step).
3. Speculative decoding (prompt lookup, k=8) over the assistant turns of every session in
   ``--traces`` (default: the bundled ``data/sessions``; ``--quick``: its first 4): mean acceptance length over *all* turns (drafter + oracle: the acceptance
   does not depend on the model), and decode tokens/s on vs off on the engine for the last
   turns of each session whose prompt is at most ``MAX_ENGINE_PROMPT`` tokens.

Run: .venv/bin/python bench/bench_engine.py [--traces DIR] [--quick] [--out DIR]
Outputs are replays of recorded sessions (labelled as such) on a tiny dummy-weight model.
Writes engine.md and engine.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common.model_def import dummy_definition  # noqa: E402
from loopwire.common.prompt import ChatPrompt, assistant_text  # noqa: E402
from loopwire.common.recorded import load_session, user_item  # noqa: E402
from loopwire.gateway.conversation import Conversation  # noqa: E402
from loopwire.inference.config import EngineConfig
from loopwire.inference.drafter import PromptLookupDrafter  # noqa: E402
from loopwire.inference.engine_core import EngineCore  # noqa: E402
from loopwire.inference.sampling import verify_oracle  # noqa: E402
from loopwire.inference.sequence import Finished, GenerationRequest  # noqa: E402
from loopwire.inference.server import EngineOptions, build_engine  # noqa: E402
from loopwire.v1 import common_pb2  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

SESSION = provenance.DATA_SESSIONS / "mini-swe-agent" / "sqlfluff__sqlfluff-2419.traj.json"
QUICK_SESSIONS = 4  # --quick: speculative decoding over the first sessions only
console = Console() if sys.stdout.isatty() else Console(width=150)
# Longest prompt the speculative-decoding speed test prefills (tokens).
MAX_ENGINE_PROMPT = 4000


@dataclass
class Turn:
    prompt: list[int]
    oracle: list[int]


def session_turns(path: Path) -> list[Turn]:
    """Each assistant turn of a recorded session: the prompt before it and its tokens, as the gateway
    builds them for the dummy model (ChatML template; each output kept as the ids emitted)."""
    prompt = ChatPrompt(dummy_definition())
    s = load_session(path)
    conv = Conversation(prompt, "", s.instructions, s.tools)
    conv.append([user_item(s.task)])
    turns = []
    for t in s.turns:
        out = prompt.output_ids(t.text, t.calls)
        turns.append(Turn(conv.prompt_ids(), out))
        output = [common_pb2.Item(message=common_pb2.Message(
            role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=t.text)]))]
        output += [common_pb2.Item(function_call=c) for c in t.calls]
        conv.complete(output, out, assistant_text(t.text, t.calls))
        conv.append(list(t.followups))
    return turns


def core(**options: object) -> EngineCore:
    # Prompt lookup, as labelled (suffix decoding is the engine default: bench_speculation.py compares them).
    engine = build_engine(EngineOptions(**{"model": "dummy:0", "kv_blocks": 2048, "drafter": "prompt_lookup",
                                           **options}))  # type: ignore[arg-type]
    return engine.core  # type: ignore[attr-defined]


def run(c: EngineCore, requests: list[GenerationRequest]) -> dict[str, Finished]:
    for r in requests:
        c.add(r)
    done: dict[str, Finished] = {}
    while c.has_work():
        for out in c.step():
            if out.finished is not None:
                done[out.request_id] = out.finished
    return done


def replay(c: EngineCore, turn: Turn, rid: str, speculative: bool = True, max_out: int = 4096) -> tuple[Finished, float]:
    oracle = turn.oracle[:max_out]
    t0 = time.perf_counter()
    fin = run(c, [GenerationRequest(rid, turn.prompt, max_out, stop_token_ids=tuple(dummy_definition().stop_token_ids),
                                    oracle=oracle, speculative=speculative)])[rid]
    return fin, time.perf_counter() - t0


# -- 1. prefix cache ---------------------------------------------------------------------


def bench_prefix_cache(quick: bool, progress: Progress) -> dict:
    turns = session_turns(SESSION)
    naive_every = 16 if quick else 8
    sampled = list(range(0, len(turns), naive_every))
    if len(turns) - 1 not in sampled:
        sampled.append(len(turns) - 1)
    task = progress.add_task("prefix cache: replay", total=len(turns) + len(sampled))
    cached_core = core()
    cached = []
    for i, turn in enumerate(turns):
        fin, secs = replay(cached_core, turn, f"c{i}")
        cached.append((secs, fin.usage.cached_input_tokens, fin.usage.input_tokens))
        progress.advance(task)
    naive = {}
    for i in sampled:
        fin, secs = replay(core(prefix_cache=False), turns[i], f"n{i}")
        naive[i] = (secs, fin.usage.cached_input_tokens)
        progress.advance(task)
    return {"turns": turns, "cached": cached, "naive": naive}


# -- 2. batching ---------------------------------------------------------------------------


def bench_batching(quick: bool, progress: Progress) -> dict[int, float]:
    sizes = [1, 8, 32]
    out_tokens = 32 if quick else 64
    task = progress.add_task("decode throughput by batch size", total=len(sizes))
    rng = np.random.default_rng(0)
    result = {}
    for b in sizes:
        c = core(max_batch_tokens=4096)
        reqs = [GenerationRequest(f"b{i}", [int(t) for t in rng.integers(0, 50_000, 256)], out_tokens,
                                  speculative=False) for i in range(b)]
        # Prefill everything first so the timed steps are pure decode steps.
        run(c, [GenerationRequest(f"w{i}", r.prompt, 1) for i, r in enumerate(reqs)])
        for r in reqs:
            c.add(r)
        c.step()  # the (cached) prefill step of the batch
        t0 = time.perf_counter()
        produced = 0
        while c.has_work():
            produced += sum(len(o.token_ids) for o in c.step())
        result[b] = produced / (time.perf_counter() - t0)
        progress.advance(task)
    return result


# -- 3. speculative decoding --------------------------------------------------------------


def acceptance_over_all_turns(turns: list[Turn], k: int) -> tuple[int, int]:
    """Output tokens and verification steps of prompt lookup against the oracle."""
    drafter = PromptLookupDrafter(EngineConfig().max_ngram, EngineConfig().min_ngram)
    tokens = steps = 0
    for turn in turns:
        ctx = drafter.open(turn.prompt)
        produced = 0
        while produced < len(turn.oracle):
            left = len(turn.oracle) - produced
            draft = ctx.propose(min(k, left - 1)).token_ids
            new = verify_oracle(draft, turn.oracle[produced : produced + len(draft) + 1])
            ctx.extend(new)
            produced += len(new)
            steps += 1
        tokens += produced
    return tokens, steps


def bench_speculative(paths: list[Path], quick: bool, progress: Progress) -> list[dict]:
    engine_turns = 1 if quick else 2
    max_out = 48 if quick else 64
    task = progress.add_task("speculative decoding per session", total=len(paths))
    rows = []
    for path in paths:
        try:
            turns = session_turns(path)
        except ValueError:
            progress.advance(task)
            continue
        tokens, steps = acceptance_over_all_turns(turns, k=8)
        c = core(max_batch_tokens=2048, kv_blocks=4096)
        on_tokens = on_us = off_tokens = off_us = 0
        # The latest turns whose prompt stays short enough to prefill quickly on a CPU.
        eligible = [t for t in turns if len(t.prompt) <= MAX_ENGINE_PROMPT][-engine_turns:]
        for i, turn in enumerate(eligible):
            off, _ = replay(c, turn, f"off{i}", speculative=False, max_out=max_out)  # also warms the cache
            on, _ = replay(c, turn, f"on{i}", speculative=True, max_out=max_out)
            off_tokens += off.usage.output_tokens - 1
            off_us += off.timings.decode_us
            on_tokens += on.usage.output_tokens - 1
            on_us += on.timings.decode_us
        rows.append({
            "path": path, "session": path.name.split(".")[0][:34], "turns": len(turns), "tokens": tokens,
            "steps": steps, "speed_turns": len(eligible),
            "off_tps": off_tokens / max(off_us, 1) * 1e6, "on_tps": on_tokens / max(on_us, 1) * 1e6,
        })
        progress.advance(task)
    return rows


# -- report --------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, default=provenance.DATA_SESSIONS,
                        help="sessions for the speculative-decoding part (default: data/sessions)")
    parser.add_argument("--quick", action="store_true",
                        help=f"fewer naive turns, shorter decodes, the first {QUICK_SESSIONS} sessions only")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    paths = provenance.session_files(args.traces)
    if args.quick:
        paths = paths[:QUICK_SESSIONS]
    if not paths:
        raise SystemExit(f"no recorded sessions under {args.traces}")
    with Progress(console=console, transient=True) as progress:
        prefix = bench_prefix_cache(args.quick, progress)
        batching = bench_batching(args.quick, progress)
        spec = bench_speculative(paths, args.quick, progress)

    turns, cached, naive = prefix["turns"], prefix["cached"], prefix["naive"]
    sampled = sorted(naive)
    cached_total = sum(s for s, _, _ in cached)
    cached_sampled = sum(cached[i][0] for i in sampled)
    naive_sampled = sum(naive[i][0] for i in sampled)
    hit = sum(c for _, c, _ in cached) / sum(n for _, _, n in cached)
    all_tokens = sum(r["tokens"] for r in spec)
    all_steps = sum(r["steps"] for r in spec)
    all_turns = sum(r["turns"] for r in spec)
    speed_turns = sum(r["speed_turns"] for r in spec)
    on_tps = statistics.fmean(r["on_tps"] for r in spec)
    off_tps = statistics.fmean(r["off_tps"] for r in spec)
    session_name = SESSION.name.split(".")[0]

    lines: list[tuple[str, str, str, str]] = [
        (f"Replay {session_name} (all turns)", f"{len(turns)} turns, final context {len(turns[-1].prompt):,} tokens",
         f"{cached_total:.1f} s total, hit rate {hit:.0%}", "-"),
        (f"Per-turn latency, {len(sampled)} sampled turns", "prefix cache on vs off",
         f"{cached_sampled / len(sampled):.2f} s/turn", f"{naive_sampled / len(sampled):.2f} s/turn "
         f"({naive_sampled / max(cached_sampled, 1e-9):.1f}× slower)"),
        *[(f"Decode, batch {b}", "continuous batching vs batch 1", f"{tps:.0f} tok/s",
           f"{batching[1]:.0f} tok/s ({tps / batching[1]:.1f}×)") for b, tps in batching.items()],
        (f"Speculative decoding, {len(spec)} sessions, {all_turns:,} turns (replay)",
         "mean acceptance length, all turns", f"{all_tokens / max(all_steps, 1):.2f} tok/step", "1.00 tok/step"),
        (f"Speculative decoding, decode speed ({speed_turns} turns)", "prompt lookup k=8 vs off",
         f"{on_tps:.0f} tok/s", f"{off_tps:.0f} tok/s ({on_tps / max(off_tps, 1e-9):.2f}×)"),
    ]
    table = Table(title="Reference engine (numpy Llama tiny, dummy weights; recorded sessions replayed)")
    for col in ("measure", "comparison", "loopwire", "naive"):
        table.add_column(col)
    for row in lines:
        table.add_row(*row)
    console.print(table)
    per_session = Table(title="Speculative decoding per session (replay; tok/s over the last turns with a prompt "
                              f"≤ {MAX_ENGINE_PROMPT:,} tokens)")
    for col in ("session", "turns", "acceptance length", "speed turns", "tok/s on", "tok/s off"):
        per_session.add_column(col, justify="left" if col == "session" else "right")
    for r in spec:
        per_session.add_row(r["session"], str(r["turns"]), f"{r['tokens'] / max(r['steps'], 1):.2f}",
                            str(r["speed_turns"]), f"{r['on_tps']:.0f}", f"{r['off_tps']:.0f}")
    console.print(per_session)

    spec_data = [(r["path"], r["turns"]) for r in spec]
    short = provenance.short_data(spec_data)
    fig, axes = plt.subplots(1, 3, figsize=(18, 6.5), gridspec_kw={"width_ratios": [1.2, 0.8, 1.2]})
    ax = axes[0]
    ax.plot(range(1, len(cached) + 1), [s for s, _, _ in cached], label="prefix cache on (every turn)")
    ax.plot([i + 1 for i in sampled], [naive[i][0] for i in sampled], "o-",
            label="prefix cache off (sampled turns)")
    ax.set(title=f"1. Per-turn latency, {session_name}\n(replay of {len(turns)} turns; wall time, numpy on CPU)",
           xlabel="assistant turn (1-based)", ylabel="seconds per turn (prefill + decode)")
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.grid(alpha=0.3)
    ax = axes[1]
    bars = ax.bar([str(b) for b in batching], list(batching.values()), color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:.0f}" for v in batching.values()], fontsize=8)
    ax.set(title="2. Decode throughput by batch size\n(random 256-token prompts)",
           xlabel="concurrent sequences (batch)", ylabel="decode tokens/s, all sequences")
    ax = axes[2]
    acceptance = [r["tokens"] / max(r["steps"], 1) for r in spec]
    ax.barh(range(len(spec)), acceptance, color="tab:green")
    ax.set_yticks(range(len(spec)), [f"{r['session']} ({r['turns']})" for r in spec])
    ax.invert_yaxis()
    ax.axvline(1.0, color="gray", linestyle="--")
    ax.set_xlim(left=0)
    ax.set(title=f"3. Prompt-lookup acceptance length (k=8), all turns\n{short}",
           xlabel="tokens per verification step, the session's turns pooled (dashed: 1 = no speculation)",
           ylabel="session (assistant turns)")
    ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("Reference engine: numpy Llama `tiny` with dummy weights, recorded turns forced by the replay "
                 "oracle")
    fig.tight_layout()
    provenance.stamp(fig, f"part 1: {session_name}, {len(turns)} turns; part 3: {short}")
    png = provenance.save_figure(fig, args.out, "engine")

    header = provenance.provenance(
        ["part 1: " + provenance.describe_sessions([(SESSION, len(turns))], note=(
            f"prefix cache on for every turn, off for {len(sampled)} sampled turns")),
         f"part 2: random 256-token prompts, {32 if args.quick else 64} tokens decoded per sequence",
         "part 3: " + provenance.describe_sessions(spec_data, note=(
            f"acceptance over every turn; speed over the last {1 if args.quick else 2} turn(s) of each with a "
            f"prompt ≤ {MAX_ENGINE_PROMPT:,} tokens, {48 if args.quick else 64} tokens decoded"))],
        engine="reference (numpy) engine, model `dummy:0`: Llama `tiny` shape (2 layers, hidden 64, 4 heads) with "
               "random weights and the cl100k tokenizer; the recorded turns are forced by the replay oracle; "
               "times are wall time on this machine")
    body = ["Replays of recorded sessions (oracle tokens).", "", *provenance.table_markdown(table), "",
            *provenance.table_markdown(per_session), "", "![engine](engine.png)"]
    md = provenance.write_markdown(args.out, "engine", "Reference engine benchmark", header, body)
    console.print(f"wrote {provenance.rel(png)} and {provenance.rel(md)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
