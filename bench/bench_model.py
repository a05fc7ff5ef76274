"""The real model on the numpy reference engine, side by side with llama.cpp on the same GGUF.

SmolLM2-135M-Instruct (the bundled default). Prompts are agent-style: the bundled recorded
sessions rendered with the model's own chat template, cut to their last ``--prompt-tokens``
tokens at a message boundary; the model then writes its own (greedy) next turn. Measured:

* prefill tokens/s at batch 1, 4 and 16 (one scheduler, continuous batching);
* decode tokens/s at the same batch sizes (aggregate over the batch), with prompt-lookup
  speculation on and off, and the mean acceptance length (generated tokens / verification steps);
* llama.cpp (``llama_cpp``, when it imports) on the same GGUF and the same prompt ids: prefill
  and greedy decode at batch 1.

numpy and llama.cpp each get one thread (``--threads``), so the ratio compares the engines,
not how many cores each grabbed on a shared machine.

Run: .venv/bin/python bench/bench_model.py [--quick] [--out DIR]
Writes model.md and model.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
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
from threadpoolctl import threadpool_limits  # noqa: E402

from loopwire.common.model_def import load_definition  # noqa: E402
from loopwire.common.prompt import ChatPrompt  # noqa: E402
from loopwire.common.recorded import load_session, user_item  # noqa: E402
from loopwire.inference.engine_core import EngineCore  # noqa: E402
from loopwire.inference.model import MATMUL_MODES  # noqa: E402
from loopwire.inference.sequence import GenerationRequest  # noqa: E402
from loopwire.inference.server import EngineOptions, build_engine  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

SESSIONS = provenance.EXAMPLE_SESSIONS
console = Console() if sys.stdout.isatty() else Console(width=150)


@dataclass
class Run:
    engine: str  # "numpy (<matmul mode>)" or "llama.cpp"
    output: str  # "greedy" (the model's own) or "recorded" (the agent's turn, forced by the oracle)
    batch: int
    speculative: bool
    prefill_tps: float
    decode_tps: float
    acceptance: float
    # Tokens per second of this process's CPU time (one thread each): steadier than wall time
    # on a machine whose cores other work shares.
    decode_cpu_tps: float = 0.0


@dataclass
class AgentTurn:
    prompt: list[int]
    recorded: list[int]  # the recorded agent's turn in this model's tokens, stop token included
    source: Path  # the session file


def agent_turns(n: int, max_tokens: int) -> list[AgentTurn]:
    """``n`` assistant turns of the bundled sessions: the conversation before each, rendered with
    SmolLM2's template and cut to its last ``max_tokens`` tokens at an ``<|im_start|>`` (at least
    half of that), and the turn the recorded agent wrote."""
    model = load_definition("default")
    prompt = ChatPrompt(model)
    im_start = model.tokenizer.added_tokens["<|im_start|>"]
    out: list[AgentTurn] = []
    for path in provenance.session_files(SESSIONS):
        s = load_session(path)
        items = [user_item(s.task)]
        for turn in s.turns:
            ids = prompt.encode_conversation(s.instructions, s.tools, items, add_generation_prompt=True)
            starts = [i for i, t in enumerate(ids) if t == im_start and max_tokens // 2 <= len(ids) - i <= max_tokens]
            if starts:
                out.append(AgentTurn(ids[starts[0]:], prompt.output_ids(turn.text, turn.calls), path))
            items += [*prompt_items(turn), *turn.followups]
    if len(out) < n:
        raise SystemExit(f"only {len(out)} turns with prompts of {max_tokens // 2}..{max_tokens} tokens in {SESSIONS}")
    step = len(out) / n
    return [out[int(i * step)] for i in range(n)]


def prompt_items(turn) -> list:
    from loopwire.v1 import common_pb2

    items = [common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=turn.text)]))]
    return items + [common_pb2.Item(function_call=c) for c in turn.calls]


def numpy_core(kv_blocks: int, matmul: str) -> EngineCore:
    engine = build_engine(EngineOptions(engine="reference", model="default", kv_blocks=kv_blocks,
                                        max_batch_tokens=512, matmul=matmul))
    return engine.core  # type: ignore[attr-defined]


def prefill(core: EngineCore, turns: list[AgentTurn], tag: str) -> float:
    """Prefill the batch's prompts (one token generated each); returns prompt tokens per second."""
    t0 = time.perf_counter()
    for i, t in enumerate(turns):
        core.add(GenerationRequest(f"{tag}-p{i}", t.prompt, 1, speculative=False))
    while core.has_work():
        core.step()
    return sum(len(t.prompt) for t in turns) / (time.perf_counter() - t0)


def run_numpy(core: EngineCore, matmul: str, turns: list[AgentTurn], out_tokens: int, speculative: bool,
              recorded: bool, tag: str) -> Run:
    """Decode ``out_tokens`` per sequence from cached prompts, timed from when all have their first token."""
    t0 = time.perf_counter()
    for i, t in enumerate(turns):
        oracle = t.recorded[:out_tokens] if recorded else None
        core.add(GenerationRequest(f"{tag}-d{i}", t.prompt, out_tokens, stop_token_ids=(), speculative=speculative,
                                   oracle=oracle))
    produced = dict.fromkeys(range(len(turns)), 0)
    steps = {i: 0 for i in produced}
    started: float | None = None
    while core.has_work():
        for out in core.step():
            i = int(out.request_id.rsplit("d", 1)[1])
            produced[i] += len(out.token_ids)
            if out.finished is not None:
                steps[i] = out.finished.usage.verification_steps
        if started is None and all(produced.values()):
            started, cpu0, first = time.perf_counter(), time.process_time(), sum(produced.values())
    decode_s = time.perf_counter() - (started or t0)
    decode_cpu_s = time.process_time() - cpu0
    total = sum(produced.values())
    return Run(f"numpy ({matmul})", "recorded" if recorded else "greedy", len(turns), speculative, 0.0,
               (total - first) / decode_s, total / max(1, sum(steps.values())), (total - first) / decode_cpu_s)


def run_llama_cpp(gguf: str, turns: list[AgentTurn], out_tokens: int, threads: int) -> list[Run] | str:
    """Prefill and greedy decode at batch 1, one sequence after the other."""
    try:
        import llama_cpp
    except ImportError:
        return "llama.cpp: llama_cpp does not import here (pip install llama-cpp-python builds it, 10–30 min)"
    # No weight repacking ("extra buffer types"): on CPUs that report AMX, ggml repacks Q4_1 for
    # AMX tiles, which faults (SIGILL) in VMs that do not enable AMX. Standard ggml CPU kernels.
    default_params = llama_cpp.llama_cpp.llama_model_default_params

    def model_params():  # type: ignore[no-untyped-def]
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_cpp.llama_model_default_params = model_params
    llm = llama_cpp.Llama(model_path=gguf, n_ctx=4096, n_threads=threads, n_threads_batch=threads, n_batch=512,
                verbose=False)
    prefill_tokens = decode_tokens = 0
    prefill_s = decode_s = decode_cpu_s = 0.0
    for turn in turns:
        p = turn.prompt
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(p)
        prefill_s += time.perf_counter() - t0
        prefill_tokens += len(p)
        t0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(out_tokens):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
            llm.eval([int(np.argmax(logits))])
        decode_s += time.perf_counter() - t0
        decode_cpu_s += time.process_time() - cpu0
        decode_tokens += out_tokens
    return [Run("llama.cpp", "greedy", 1, False, prefill_tokens / prefill_s, decode_tokens / decode_s, 1.0,
                decode_tokens / decode_cpu_s)]


def _matmul_modes(value: str) -> list[str]:
    modes = [m for m in value.split(",") if m]
    choices = [m for m in MATMUL_MODES if m != "auto"]
    bad = [m for m in modes if m not in choices]
    if bad or not modes:
        raise argparse.ArgumentTypeError(f"{value!r}: a comma-separated list of {', '.join(choices)}")
    return modes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="batch 1 and 4 only, 16 output tokens")
    parser.add_argument("--prompt-tokens", type=int, default=512, help="longest prompt (default: %(default)s)")
    parser.add_argument("--out-tokens", type=int, default=48, help="tokens decoded per sequence (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS / llama.cpp threads (default: %(default)s)")
    parser.add_argument("--matmul", default="numba,blas", type=_matmul_modes,
                        help="the reference engine's matmul modes to run, comma-separated, side by side "
                             "(numba, numba-f32, blas; default: %(default)s)")
    provenance.add_out_argument(parser)
    args = parser.parse_args(argv[1:])
    batches = [1, 4] if args.quick else [1, 4, 16]
    out_tokens = 16 if args.quick else args.out_tokens
    turns = agent_turns(max(batches), args.prompt_tokens)
    runs: list[Run] = []
    with threadpool_limits(args.threads), Progress(console=console) as progress:
        task = progress.add_task("llama.cpp, then the numpy engine", total=5 * len(batches) * len(args.matmul) + 1)
        llama = run_llama_cpp(load_definition("default").source, turns[:1], out_tokens, args.threads)
        progress.advance(task)
        for b in batches:
            for matmul in args.matmul:
                # A fresh engine per batch size: its prefill is measured cold, every decode after it
                # starts from the cached prompts.
                core = numpy_core(b * (args.prompt_tokens + 2 * out_tokens + 64) // 16 * 2 + 64, matmul)
                prefill_tps = prefill(core, turns[:b], f"b{b}")
                progress.advance(task)
                for recorded in (False, True):
                    for spec in (False, True):
                        run = run_numpy(core, matmul, turns[:b], out_tokens, spec, recorded,
                                        f"b{b}{recorded:d}{spec:d}")
                        run.prefill_tps = prefill_tps if not (recorded or spec) else 0.0
                        runs.append(run)
                        progress.advance(task)
    note = llama if isinstance(llama, str) else ""
    if not isinstance(llama, str):
        runs += llama
    ref = next((r for r in runs if r.engine == "llama.cpp"), None)
    table = Table(title=f"SmolLM2-135M-Instruct Q4_1 on CPU, {args.threads} thread(s); agent prompts of "
                        f"{args.prompt_tokens // 2}..{args.prompt_tokens} tokens, {out_tokens} tokens decoded each")
    for col in ("engine", "output", "batch", "speculation", "prefill tok/s", "decode tok/s", "accept len",
                "decode × llama.cpp b1", "decode tok/CPU-s", "CPU-s × llama.cpp b1"):
        table.add_column(col, justify="right" if col not in ("engine", "output", "speculation") else "left")
    rows = []
    for r in runs:
        ratio = f"{r.decode_tps / ref.decode_tps:.2f}×" if ref else "-"
        cpu_ratio = f"{r.decode_cpu_tps / ref.decode_cpu_tps:.2f}×" if ref else "-"
        row = [r.engine, r.output, str(r.batch), "prompt lookup" if r.speculative else "off",
               f"{r.prefill_tps:.1f}" if r.prefill_tps else "(cached)",
               f"{r.decode_tps:.2f}", f"{r.acceptance:.2f}", ratio, f"{r.decode_cpu_tps:.2f}", cpu_ratio]
        rows.append(row)
        table.add_row(*row)
    console.print(table)
    if note:
        console.print(f"[yellow]{note}[/]")
    out = args.out
    per_file: dict[Path, int] = {}
    for t in turns[:max(batches)]:
        per_file[t.source] = per_file.get(t.source, 0) + 1
    used = [(p, n) for p, n in per_file.items()]
    header = provenance.provenance(
        provenance.describe_sessions(used, note=(
            f"the prompt before each of these turns, sampled evenly over the sessions' turns whose conversation "
            f"(SmolLM2 chat template) has a message boundary {args.prompt_tokens // 2}..{args.prompt_tokens} tokens "
            f"from its end, cut there; {out_tokens} tokens decoded each; batch b uses the first b")),
        engine=f"numpy reference engine (`--engine reference --model default --matmul "
               f"{'|'.join(args.matmul)}`) vs llama.cpp "
               f"(`llama_cpp` {getattr(sys.modules.get('llama_cpp'), '__version__', 'not installed')}), "
               f"{args.threads} thread(s) each; model SmolLM2-135M-Instruct Q4_1 GGUF "
               f"(`{provenance.rel(load_definition('default').source)}`); times are wall time on this machine",
        notes=["output `greedy` = the model's own, `recorded` = the recorded agent's turn forced by the replay "
               "oracle (same forward passes)",
               "numpy decode is timed from when every sequence has its first token; llama.cpp runs batch 1 only, on "
               "the first prompt"])
    md = ["| " + " | ".join(c.header for c in table.columns) + " |",
          "|" + "---|" * len(table.columns)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    if note:
        md += ["", note]
    md_path = provenance.write_markdown(out, "model", "Real model on the numpy engine vs llama.cpp", header,
                                        [f"**{table.title}**", "", *md, "", "![model](model.png)"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    styles = {(False, False): "tab:blue", (False, True): "tab:green", (True, False): "tab:purple",
              (True, True): "tab:olive"}
    for matmul, line in zip(args.matmul, ("-", "--", ":"), strict=False):
        for (recorded, spec), colour in styles.items():
            pts = [(r.batch, r.decode_tps) for r in runs
                   if r.engine == f"numpy ({matmul})" and r.speculative == spec and (r.output == "recorded") == recorded]
            ax.plot(*zip(*pts, strict=True), marker="o", color=colour, linestyle=line,
                    label=f"numpy {matmul}, {'recorded agent turns' if recorded else 'greedy'}, "
                          f"speculation {'on' if spec else 'off'}")
    if ref:
        ax.axhline(ref.decode_tps, color="tab:red", linestyle="-.", label="llama.cpp, batch 1")
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("sequences decoded together (batch, log₂ scale)")
    ax.set_ylabel("decode tokens/s (all sequences together)")
    short = (f"{sum(n for _, n in used)} agent turns of {len(used)} recorded session(s) in "
             f"{provenance.rel(SESSIONS)}")
    ax.set_title(f"SmolLM2-135M Q4_1 on CPU ({args.threads} thread): decode throughput\n"
                 f"prompts of {args.prompt_tokens // 2}..{args.prompt_tokens} tokens before {short}; "
                 f"{out_tokens} tokens decoded each", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    provenance.stamp(fig, short)
    png = provenance.save_figure(fig, out, "model")
    console.print(f"wrote {provenance.rel(md_path)} and {provenance.rel(png)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: main(sys.argv)))
