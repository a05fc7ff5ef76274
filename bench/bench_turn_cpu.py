"""Per-turn CPU of the gateway and inference processes by context length: does a stateful turn
cost the same at 64k tokens of context as at 2k?

Each context bucket is one session on one Converse stream: a full first request holding a history
of about N tokens (this project's own source as tool-output text), one unmeasured turn so the
replica holds the prefix, then ``--turns`` measured stateful turns. Each measured turn sends two
new lines as a user message (``previous_response_id``) and asks for exactly one output token
(``max_output_tokens=1``): what is measured is the per-turn path (validate, tokenize the new part,
forward an append, match the held prefix, schedule, finish, store), with no output to relay.

The gateway and the inference replica (the simulated engine at time scale 0: the real service,
scheduler and KV block manager, no model compute) each run in a process of their own; around each
turn the benchmark asks both for their process CPU time (every thread). Nothing is subtracted:
each figure is the process's CPU between the two probes, one probe's own cost included.

``--traces [PATH ...]`` replays recorded agent sessions instead (``data/sessions/`` when no path
is given), where the growth the synthetic buckets miss shows: each session on one Converse stream,
its first turn a full request, every later turn a delta holding the previous turn's tool outputs,
each delta turn measured and bucketed by its context (< 2k ... 32k+ tokens) and by its number. With
``--output one`` (the default) the recorded output travels in the next delta as input and the
replica answers one token, so every turn relays the same output; with ``--output recorded`` the
replica streams each turn's recorded output, whose length (longer later in a session) the gateway
pays per token. The growth table divides the largest bucket by the smallest, median and mean.

``--before REF`` runs the same measurement on the services of another commit (its ``services/``
tree exported with ``git archive``) beside the working tree's, so the table compares the two; with
``--traces`` both trees' processes run at once and each session is replayed on both in turn.

Run: .venv/bin/python bench/bench_turn_cpu.py [--before REF] [--turns N] [--quick] [--out DIR]
     .venv/bin/python bench/bench_turn_cpu.py --traces [PATH ...] [--output one|recorded] [--before REF]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

BUCKETS = (2_000, 8_000, 16_000, 32_000, 64_000)
QUICK_BUCKETS = (2_000, 16_000, 64_000)
MODEL = "dummy:0"  # cl100k + ChatML, a 131k window: the default SmolLM2 window (8k) stops short of 64k
WARM_TURNS = 3
SPECULATION = {False: "off", True: "on (the replica's default drafter, suffix decoding)"}


# -- the child: one server answering CPU probes ----------------------------------------------------


def serve(role: str, replica: str) -> None:
    """``--serve ROLE``: run the inference replica or the gateway; print its port, then answer each
    ``cpu`` line on stdin with this process's CPU time in ns (until stdin closes)."""
    import logging

    logging.basicConfig(level=logging.ERROR)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        if role == "inference":
            from loopwire.common import grpc_server
            from loopwire.inference.server import EngineOptions, add_servicer, build_engine

            engine = build_engine(EngineOptions(engine="simulated", replica_id="sim-0", time_scale=0.0,
                                                max_output_tokens=8192, model=MODEL))
            server = grpc_server.make_server()
            add_servicer(server, engine)
            port = server.add_insecure_port("127.0.0.1:0")
            await engine.start()
            await server.start()

            async def close() -> None:
                await server.stop(0)
                await engine.close()
        else:
            from loopwire.common.auth import Authenticator
            from loopwire.gateway.factory import start_gateway
            from loopwire.gateway.service import GatewayConfig
            from loopwire.v1 import gateway_pb2

            gateway = await start_gateway([replica], authenticator=Authenticator.open(), config=GatewayConfig(
                allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
            port, close = gateway.port, gateway.close
        from loopwire.common import gc_tuning

        gc_tuning.tune_for_serving()  # as grpc_server.serve does for the services themselves
        print(port, flush=True)
        profiler = None
        kept: dict[str, Any] = {}  # --traces --profile: each bucket's turns, merged
        while (line := await loop.run_in_executor(None, sys.stdin.readline)).startswith(("cpu", "profile")):
            if line.startswith("profile on"):
                import cProfile

                # The event loop's thread, where both servers do a turn's work, timed by its CPU (not
                # the wall clock: waits in epoll and for the GIL are not work).
                profiler = cProfile.Profile(time.thread_time)
                profiler.enable()
            elif line.startswith("profile dump ") and profiler is not None:
                profiler.disable()
                profiler.dump_stats(line.removeprefix("profile dump ").strip())
                profiler = None
            elif line.startswith("profile keep ") and profiler is not None:  # --traces: a turn into its bucket's file
                import pstats

                profiler.disable()
                path = line.removeprefix("profile keep ").strip()
                if path in kept:
                    kept[path].add(profiler)
                else:
                    kept[path] = pstats.Stats(profiler)
                profiler = None
            elif line.startswith("profile save"):
                for path, stats in kept.items():
                    stats.dump_stats(path)
            print(time.process_time_ns(), flush=True)
        await close()

    asyncio.run(main())


class Server:
    """A child server process (``--serve``) on a given services tree, and its CPU on request."""

    def __init__(self, role: str, services: Path, replica: str = "") -> None:
        env = {**os.environ, "PYTHONPATH": str(services)}
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", role, "--replica", replica],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the {role} process did not start (exit {self.proc.poll()})")
        self.address = f"127.0.0.1:{line.strip()}"

    def cpu_ns(self, command: str = "cpu") -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the client ------------------------------------------------------------------------------------


@dataclass
class Turn:
    context: int  # prompt tokens of the turn
    new_tokens: int  # prompt tokens the gateway tokenized for it
    gateway_us: int
    inference_us: int


@dataclass
class Run:
    label: str  # which services tree
    turns: dict[int, list[Turn]] = field(default_factory=dict)


class Session:
    """One session on one Converse stream; every request asks for one replayed output token."""

    def __init__(self, stub, lines: list[str], offset: int, speculative: bool = False) -> None:
        self.call = stub.Converse()
        self.lines = lines
        self.line = offset
        self.previous = ""
        self.speculative = speculative

    def text(self, n: int) -> str:
        out = "".join(self.lines[(self.line + i) % len(self.lines)] for i in range(n))
        self.line += n
        return out

    async def send(self, request):
        from loopwire.v1 import common_pb2, gateway_pb2

        request.safety_mode = gateway_pb2.SAFETY_MODE_OFF
        request.replay.CopyFrom(common_pb2.ReplayOutput(text="ok"))
        request.sampling.CopyFrom(common_pb2.SamplingParams(max_output_tokens=1,
                                                                   speculative_decoding=self.speculative))
        await self.call.write(gateway_pb2.ConverseRequest(create_response=request))
        while True:
            event = await self.call.read()
            if not hasattr(event, "WhichOneof") or event.WhichOneof("event") == "failed":
                raise RuntimeError(f"the turn failed: {event}")
            if event.WhichOneof("event") == "completed":
                self.previous = event.response_id
                return event.completed


async def measure(label: str, services: Path, buckets: tuple[int, ...], turns: int, progress, task,
                  speculative: bool = False, profile: Path | None = None) -> Run:
    """``profile``: a directory for one cProfile dump per process and bucket of the measured turns
    (``{tree}-{role}-{bucket}.prof``); profiling inflates the CPU figures, so read them only as shares."""
    import grpc

    from loopwire.common.model_def import load_definition
    from loopwire.common.recorded import user_item
    from loopwire.v1 import gateway_pb2, gateway_pb2_grpc

    tokenizer = load_definition(MODEL).tokenizer
    from bench_gateway import source_lines

    lines = source_lines()
    inference = Server("inference", services)
    gateway = Server("gateway", services, inference.address)
    run = Run(label)
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            for k, bucket in enumerate(buckets):
                session = Session(stub, lines, 991 * (k + 1), speculative)
                items, tokens = [user_item("Fix the failing test in this repository.")], 0
                while tokens < bucket - 200:
                    chunk = session.text(40)
                    tokens += len(tokenizer.encode(chunk))
                    items.append(user_item(chunk))
                await session.send(gateway_pb2.CreateResponse(instructions="You are a careful engineer.", input=items))
                got: list[Turn] = []
                for n in range(WARM_TURNS + turns):
                    if profile is not None and n == WARM_TURNS:
                        gateway.cpu_ns("profile on"), inference.cpu_ns("profile on")
                    request = gateway_pb2.CreateResponse(previous_response_id=session.previous,
                                                         input=[user_item(session.text(2))])
                    g0, i0 = gateway.cpu_ns(), inference.cpu_ns()
                    done = await session.send(request)
                    g1, i1 = gateway.cpu_ns(), inference.cpu_ns()
                    if n >= WARM_TURNS:
                        got.append(Turn(done.usage.input_tokens, done.timings.tokens_tokenized,
                                        (g1 - g0) // 1000, (i1 - i0) // 1000))
                run.turns[bucket] = got
                if profile is not None:
                    profile.mkdir(parents=True, exist_ok=True)
                    tree = label.split(" ")[0]
                    for role, server in (("gateway", gateway), ("inference", inference)):
                        server.cpu_ns(f"profile dump {(profile / f'{tree}-{role}-{bucket}.prof').resolve()}")
                await session.call.done_writing()
                progress.advance(task)
    finally:
        gateway.close()
        inference.close()
    return run


def export(ref: str, root: Path) -> tuple[Path, str]:
    """The ``services/`` tree of commit ``ref``, exported under .state/ (once per commit)."""
    import provenance

    commit = provenance._git("rev-parse", "--short=12", ref)
    if not commit:
        raise SystemExit(f"--before {ref}: not a commit of this repository")
    target = root / ".state" / "bench" / "trees" / commit
    if not (target / "services").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", commit, "services"], cwd=root, capture_output=True, check=True)
        tar = target / "services.tar"
        tar.write_bytes(archive.stdout)
        with tarfile.open(tar) as t:
            t.extractall(target, filter="data")
        tar.unlink()
    return target / "services", commit


def profile_growth(directory: Path, trees: list[str], keys: tuple[str, str], labels: tuple[str, str],
                   turns: dict[tuple[str, str], int], top: int = 12) -> list:
    """Per process: the functions whose own time per turn grows most from the smallest bucket to the
    largest (ms per turn in each, and calls per turn), from the dumps ``{tree}-{role}-{key}.prof``
    of ``turns[tree, key]`` turns each (written by ``measure`` or ``replay_session``)."""
    import pstats

    from rich.table import Table

    def per_function(path: Path, n: int) -> dict[tuple, tuple[float, float, float]]:
        stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
        return {f: (nc / n, tt * 1000 / n, ct * 1000 / n) for f, (_, nc, tt, ct, _) in stats.items()}

    tables = []
    for tree in trees:
        for role in ("gateway", "inference"):
            small = per_function(directory / f"{tree}-{role}-{keys[0]}.prof", turns[tree, keys[0]])
            large = per_function(directory / f"{tree}-{role}-{keys[1]}.prof", turns[tree, keys[1]])
            grown = sorted(large, key=lambda f: large[f][1] - small.get(f, (0, 0, 0))[1], reverse=True)[:top]
            table = Table(title=f"{tree}: {role} functions by growth of own time per turn, {labels[0]} → "
                                f"{labels[1]} (profiled)")
            for col in ("function", "calls/turn small", "calls/turn large", "own ms small", "own ms large",
                        "cum ms small", "cum ms large"):
                table.add_column(col, justify="right")
            for f in grown:
                s, g = small.get(f, (0.0, 0.0, 0.0)), large[f]
                name = f"{Path(f[0]).name}:{f[1]} {f[2]}"
                table.add_row(name, f"{s[0]:.1f}", f"{g[0]:.1f}", f"{s[1]:.3f}", f"{g[1]:.3f}", f"{s[2]:.3f}",
                              f"{g[2]:.3f}")
            total_s = sum(v[1] for v in small.values())
            total_l = sum(v[1] for v in large.values())
            table.caption = f"all profiled own time per turn: {total_s:.2f} ms → {total_l:.2f} ms"
            tables.append(table)
    return tables


def med(turns: list[Turn], attr: str) -> float:
    return statistics.median(getattr(t, attr) for t in turns) / 1000


def report(runs: list[Run], buckets: tuple[int, ...], turns: int, args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rich.console import Console
    from rich.table import Table

    import provenance

    console = Console(width=150)
    table = Table(title=f"Process CPU per stateful turn by context length (median of {turns} turns, 1 output "
                        "token each; simulated engine at time scale 0)")
    for col in ("services", "context tokens", "new tokens", "gateway ms", "inference ms", "gateway + inference ms"):
        table.add_column(col, justify="right")
    growth = Table(title="Growth from the smallest to the largest context (goal: within 1.2×)")
    for col in ("services", "gateway", "inference", "gateway + inference"):
        growth.add_column(col, justify="right")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for run, color in zip(runs, ("tab:red", "tab:green"), strict=False):
        xs, gw, inf = [], [], []
        for bucket in buckets:
            t = run.turns[bucket]
            context = int(statistics.median(x.context for x in t))
            g, i = med(t, "gateway_us"), med(t, "inference_us")
            table.add_row(run.label, f"{context:,}", f"{statistics.median(x.new_tokens for x in t):.0f}",
                          f"{g:.2f}", f"{i:.2f}", f"{g + i:.2f}")
            xs.append(context)
            gw.append(g)
            inf.append(i)
        growth.add_row(run.label, f"{gw[-1] / gw[0]:.2f}×", f"{inf[-1] / inf[0]:.2f}×",
                       f"{(gw[-1] + inf[-1]) / (gw[0] + inf[0]):.2f}×")
        for ax, ys, what in ((axes[0], gw, "gateway"), (axes[1], inf, "inference")):
            ax.plot(xs, ys, "o-", color=color, label=run.label)
            ax.set(title=f"{what} process CPU per turn", xlabel="context at the turn (prompt tokens, log scale)",
                   ylabel="ms per turn (median)", xscale="log")
    if len(runs) == 2:
        ratio = Table(title="Before ÷ after, same bucket")
        for col in ("context tokens", "gateway", "inference", "gateway + inference"):
            ratio.add_column(col, justify="right")
        b, a = runs
        for bucket in buckets:
            tb, ta = b.turns[bucket], a.turns[bucket]
            gb, ib, ga, ia = med(tb, "gateway_us"), med(tb, "inference_us"), med(ta, "gateway_us"), med(ta, "inference_us")
            ratio.add_row(f"{int(statistics.median(x.context for x in ta)):,}", f"{gb / ga:.2f}×", f"{ib / ia:.2f}×",
                          f"{(gb + ib) / (ga + ia):.2f}×")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    data = f"synthetic sessions over this project's source text, context buckets {', '.join(f'{b:,}' for b in buckets)}"
    fig.tight_layout()
    provenance.stamp(fig, data)
    args.out.mkdir(parents=True, exist_ok=True)
    png = provenance.save_figure(fig, args.out, "turn_cpu")
    tables = [table, growth] + ([ratio] if len(runs) == 2 else [])
    for shown in tables:
        console.print(shown)
    header = provenance.provenance(
        f"{data}: per bucket one session (a full first request of about that many tokens, 1 unmeasured turn, "
        f"{WARM_TURNS} warm-up turns, then {turns} measured stateful turns of two new lines each)",
        engine=f"simulated, time scale 0 (the real inference service, scheduler and KV block manager; no model "
               f"compute), model {MODEL}, speculation {SPECULATION[args.speculation]}, "
               "safety off" + (" (cProfile on in both processes during the measured turns: CPU inflated)"
                               if args.profile else ""),
        notes=[f"services: {', '.join(r.label for r in runs)}; gateway and inference each in a process of its own "
               "(`--serve`), the client in this one; CPU = the process's time.process_time_ns between a probe "
               "before the turn and one after its completed event (nothing subtracted)"])
    body: list[str] = []
    for shown in tables:
        body += provenance.table_markdown(shown) + [""]
    body.append("![turn cpu](turn_cpu.png)")
    md = provenance.write_markdown(args.out, "turn_cpu", "Per-turn CPU by context length", header, body)
    console.print(f"wrote {provenance.rel(png)} and {provenance.rel(md)}")
    return 0


# -- --traces: recorded sessions replayed through the real gateway ----------------------------------

TRACE_EDGES = (2_000, 4_000, 8_000, 16_000, 32_000)  # context buckets: < 2k, 2k-4k, ..., 32k+
TURN_GROUPS = ((1, 10), (11, 40), (41, 80), (81, 10**9))
MIN_BUCKET_TURNS = 20  # a bucket with fewer measured turns is shown but not used for the ratios
OUTPUTS = {"one": "one token a turn, the recorded output sent back in the next delta as input items",
           "recorded": "each turn's recorded output replayed as the model's tokens"}


@dataclass
class TraceTurn:
    session: int
    turn: int  # the recorded turn's index (1: the first delta)
    context: int  # prompt tokens of the turn
    new_tokens: int  # prompt tokens the gateway tokenized for it
    output_tokens: int
    gateway_us: int
    inference_us: int


def bucket_of(context: int) -> int:
    """Index of ``context``'s bucket in ``TRACE_EDGES`` (len(TRACE_EDGES): the largest)."""
    return next((i for i, edge in enumerate(TRACE_EDGES) if context < edge), len(TRACE_EDGES))


def bucket_label(i: int) -> str:
    lo = TRACE_EDGES[i - 1] if i else 0
    if i == len(TRACE_EDGES):
        return f"{lo // 1000}k+"
    return f"< {TRACE_EDGES[0] // 1000}k" if i == 0 else f"{lo // 1000}k-{TRACE_EDGES[i] // 1000}k"


def turn_requests(session, output: str):
    """The requests that replay ``session`` on one stream: its first turn a full request, then each
    turn a delta (``previous_response_id``) holding the previous turn's tool outputs.

    ``output="recorded"``: each turn's recorded output is the replica's output (replayed as the
    model's tokens), so the turn relays as many tokens as the model wrote. ``output="one"``: the
    recorded output travels in the next delta as input items, before the tool outputs, and the
    replica answers one token: the transcript grows as recorded (plus one short answer a turn), and
    every turn relays the same output whatever the model wrote then."""
    from loopwire.common.recorded import user_item
    from loopwire.v1 import common_pb2, gateway_pb2

    for k, turn in enumerate(session.turns):
        request = gateway_pb2.CreateResponse(safety_mode=gateway_pb2.SAFETY_MODE_OFF)
        if k == 0:
            request.instructions = session.instructions
            request.tools.extend(session.tools)
            request.input.append(user_item(session.task))
        else:
            before = session.turns[k - 1]
            if output == "one":
                if before.text or not before.calls:
                    request.input.append(common_pb2.Item(message=common_pb2.Message(
                        role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=before.text)])))
                request.input.extend(common_pb2.Item(function_call=c) for c in before.calls)
            request.input.extend(before.followups)
        if output == "one":
            request.replay.CopyFrom(common_pb2.ReplayOutput(text="ok"))
            request.sampling.max_output_tokens = 1
        else:
            request.replay.CopyFrom(common_pb2.ReplayOutput(text=turn.text, function_calls=turn.calls))
        yield request


async def replay_session(stub, session, index: int, gateway: Server, inference: Server,
                         output: str, profile: tuple[Path, str] | None = None) -> tuple[list[TraceTurn], str]:
    """One recorded session on one Converse stream (``turn_requests``); every delta turn is
    measured. Returns them and why the replay stopped early ('' when it did not).

    ``profile`` (directory, tree): both processes profile each delta turn into their
    ``{tree}-{role}-{context bucket}.prof`` (written at ``profile save``)."""
    from loopwire.v1 import gateway_pb2

    call = stub.Converse()
    previous, got = "", []
    try:
        for k, request in enumerate(turn_requests(session, output)):
            if k:
                request.previous_response_id = previous
                if profile is not None:
                    gateway.cpu_ns("profile on"), inference.cpu_ns("profile on")
            g0, i0 = gateway.cpu_ns(), inference.cpu_ns()
            await call.write(gateway_pb2.ConverseRequest(create_response=request))
            while True:
                event = await call.read()
                kind = event.WhichOneof("event") if hasattr(event, "WhichOneof") else None
                if kind in (None, "failed", "completed"):
                    break
            g1, i1 = gateway.cpu_ns(), inference.cpu_ns()
            if kind != "completed":
                return got, f"turn {k} of {len(session.turns)}: {event.failed.error.message if kind else 'stream ended'}"
            previous, done = event.response_id, event.completed
            if k and profile is not None:
                directory, tree = profile
                for role, server in (("gateway", gateway), ("inference", inference)):
                    server.cpu_ns(f"profile keep {(directory / f'{tree}-{role}-{bucket_of(done.usage.input_tokens)}.prof').resolve()}")
            if k:
                got.append(TraceTurn(index, k, done.usage.input_tokens, done.timings.tokens_tokenized,
                                     done.usage.output_tokens, (g1 - g0) // 1000, (i1 - i0) // 1000))
        return got, ""
    finally:
        await call.done_writing()


async def measure_traces(trees: list[tuple[str, Path]], sessions: list, output: str, repeat: int, progress, task,
                         profile: Path | None = None) -> tuple[dict[str, list[TraceTurn]], list[str]]:
    """Every session replayed on every tree's gateway and replica (all started at once, each in a
    process of its own); a session's replays alternate which tree goes first, so a slower stretch of
    a shared machine falls on both alike."""
    import grpc

    from loopwire.v1 import gateway_pb2_grpc

    servers = []
    try:
        for _, services in trees:
            inference = Server("inference", services)
            servers.append((inference, Server("gateway", services, inference.address)))
        turns: dict[str, list[TraceTurn]] = {label: [] for label, _ in trees}
        stopped: list[str] = []
        channels = [grpc.aio.insecure_channel(g.address) for _, g in servers]
        stubs = [gateway_pb2_grpc.GatewayServiceStub(c) for c in channels]
        try:
            for n, (s, (path, session)) in enumerate((s, p) for _ in range(repeat) for s, p in enumerate(sessions)):
                order = list(range(len(trees)))
                if n % 2:
                    order.reverse()
                for t in order:
                    label = trees[t][0]
                    inference, gateway = servers[t]
                    got, why = await replay_session(stubs[t], session, s, gateway, inference, output,
                                                    None if profile is None else (profile, label.split(" ")[0]))
                    turns[label] += got
                    if why:
                        stopped.append(f"{label}: {path.name} stopped at {why}")
                    progress.advance(task)
        finally:
            for c in channels:
                await c.close()
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            for inference, gateway in servers:
                gateway.cpu_ns("profile save"), inference.cpu_ns("profile save")
    finally:
        for inference, gateway in servers:
            gateway.close()
            inference.close()
    return turns, stopped


def _ms(values: list[int], how) -> float:
    return how(values) / 1000 if values else float("nan")


def raw_turns(turns: dict[str, list[TraceTurn]], output: str, summary: dict) -> bytes:
    """Every measured turn, compressed (a row per turn, its fields named once), with the growth."""
    fields = list(TraceTurn.__dataclass_fields__)
    data = {"output": output, "buckets": TRACE_EDGES, "growth": summary, "fields": fields,
            "turns": {lb: [[getattr(t, f) for f in fields] for t in ts] for lb, ts in turns.items()}}
    return gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0)


def trace_report(turns: dict[str, list[TraceTurn]], stopped: list[str], used: list[tuple[Path, int]],
                 args: argparse.Namespace) -> int:
    """Tables (median and mean per context bucket and per turn group, each tree's growth from the
    smallest bucket to the largest, before ÷ after), a figure, markdown and the raw turns (gzip JSON)."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rich.console import Console
    from rich.table import Table

    import provenance

    console = Console(width=170)
    labels = list(turns)
    buckets = sorted({bucket_of(t.context) for ts in turns.values() for t in ts})
    usable = [b for b in buckets if all(sum(bucket_of(t.context) == b for t in turns[lb]) >= MIN_BUCKET_TURNS
                                        for lb in labels)]
    by_bucket = {lb: {b: [t for t in turns[lb] if bucket_of(t.context) == b] for b in buckets} for lb in labels}

    table = Table(title="Process CPU per stateful turn of recorded sessions, by context at the turn (ms)")
    for col in ("services", "context", "turns", "median context", "median new tokens", "mean output tokens",
                "gateway median",
                "gateway mean", "gateway p90", "inference median", "inference mean"):
        table.add_column(col, justify="right")
    for lb in labels:
        for b in buckets:
            ts = by_bucket[lb][b]
            g = [t.gateway_us for t in ts]
            i = [t.inference_us for t in ts]
            table.add_row(lb, bucket_label(b), f"{len(ts)}", f"{statistics.median(t.context for t in ts):,.0f}",
                          f"{statistics.median(t.new_tokens for t in ts):,.0f}",
                          f"{statistics.fmean(t.output_tokens for t in ts):,.0f}", f"{_ms(g, statistics.median):.2f}",
                          f"{_ms(g, statistics.fmean):.2f}", f"{sorted(g)[int(0.9 * (len(g) - 1))] / 1000:.2f}",
                          f"{_ms(i, statistics.median):.2f}", f"{_ms(i, statistics.fmean):.2f}")
    growth = Table(title=f"Growth, largest context bucket ÷ smallest (buckets with ≥ {MIN_BUCKET_TURNS} turns: "
                         f"{bucket_label(usable[0])} → {bucket_label(usable[-1])}; goal ≤ 1.2×)" if usable else "Growth")
    for col in ("services", "turns compared", "n small", "n large", "gateway median", "gateway mean",
                "inference median", "inference mean"):
        growth.add_column(col, justify="right")
    summary: dict[str, dict[str, dict[str, float]]] = {}
    if usable:
        # Later turns also bring more new tokens (longer tool outputs) and longer outputs, which cost per
        # token whatever the context: the second comparison keeps, in both buckets, the turns whose new and
        # output tokens lie within the smallest bucket's 10th-90th percentiles.
        def band(attr: str) -> tuple[int, int]:
            values = sorted(getattr(t, attr) for lb in labels for t in by_bucket[lb][usable[0]])
            return values[int(0.1 * (len(values) - 1))], values[int(0.9 * (len(values) - 1))]

        new, out = band("new_tokens"), band("output_tokens")
        selections = (("all", lambda t: True),
                      (f"new tokens {new[0]}-{new[1]}, output {out[0]}-{out[1]}",
                       lambda t: new[0] <= t.new_tokens <= new[1] and out[0] <= t.output_tokens <= out[1]))
        for lb in labels:
            summary[lb] = {}
            for name, keep in selections:
                lo = [t for t in by_bucket[lb][usable[0]] if keep(t)]
                hi = [t for t in by_bucket[lb][usable[-1]] if keep(t)]
                row = {}
                for what in ("gateway", "inference"):
                    for stat, how in (("median", statistics.median), ("mean", statistics.fmean)):
                        row[f"{what}_{stat}"] = (_ms([getattr(t, f"{what}_us") for t in hi], how)
                                                 / _ms([getattr(t, f"{what}_us") for t in lo], how))
                summary[lb][name] = row
                growth.add_row(lb, name, f"{len(lo)}", f"{len(hi)}",
                               *(f"{row[k]:.2f}×" for k in ("gateway_median", "gateway_mean", "inference_median",
                                                            "inference_mean")))
    groups = Table(title="Gateway CPU per stateful turn by turn number (ms)")
    for col in ("services", "turns", "n", "median new tokens", "gateway median", "gateway mean"):
        groups.add_column(col, justify="right")
    for lb in labels:
        for lo_t, hi_t in TURN_GROUPS:
            ts = [t for t in turns[lb] if lo_t <= t.turn <= hi_t]
            if ts:
                g = [t.gateway_us for t in ts]
                groups.add_row(lb, f"{lo_t}-{hi_t}" if hi_t < 10**9 else f"{lo_t}+", f"{len(ts)}",
                               f"{statistics.median(t.new_tokens for t in ts):,.0f}",
                               f"{_ms(g, statistics.median):.2f}", f"{_ms(g, statistics.fmean):.2f}")
    tables = [table, growth, groups]
    if len(labels) == 2:
        ratio = Table(title="Before ÷ after, same context bucket")
        for col in ("context", "gateway median", "gateway mean", "inference median", "inference mean"):
            ratio.add_column(col, justify="right")
        b, a = labels
        for k in buckets:
            cells = []
            for what in ("gateway_us", "inference_us"):
                xb = [getattr(t, what) for t in by_bucket[b][k]]
                xa = [getattr(t, what) for t in by_bucket[a][k]]
                cells += [f"{_ms(xb, statistics.median) / _ms(xa, statistics.median):.2f}×",
                          f"{_ms(xb, statistics.fmean) / _ms(xa, statistics.fmean):.2f}×"]
            ratio.add_row(bucket_label(k), *cells)
        tables.append(ratio)
    if args.profile and usable:
        names = [lb.split(" ")[0] for lb in labels]
        ends = (str(usable[0]), str(usable[-1]))
        counts = {(name, str(k)): len(by_bucket[lb][k]) for name, lb in zip(names, labels, strict=True) for k in usable}
        tables += profile_growth(args.profile, names, ends, (bucket_label(usable[0]), bucket_label(usable[-1])),
                                 counts)
    for shown in tables:
        console.print(shown)
    for line in stopped:
        console.print(f"[yellow]{line}[/]")

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for lb, color in zip(labels, ("tab:red", "tab:green"), strict=False):
        xs = [statistics.median(t.context for t in by_bucket[lb][k]) for k in buckets]
        for ax, how, what in ((axes[0], statistics.median, "median"), (axes[1], statistics.fmean, "mean")):
            ax.plot(xs, [_ms([t.gateway_us for t in by_bucket[lb][k]], how) for k in buckets], "o-", color=color,
                    label=lb)
            ax.set(title=f"gateway process CPU per stateful turn ({what})", xscale="log", ylabel="ms per turn",
                   xlabel="context at the turn (median of its bucket, prompt tokens, log scale)")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    data = provenance.short_data(used)
    fig.tight_layout()
    provenance.stamp(fig, data)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"turn_cpu_traces_{args.output}"
    png = provenance.save_figure(fig, args.out, stem)
    header = provenance.provenance(
        provenance.describe_sessions(used),
        engine=f"simulated, time scale 0 (the real inference service, scheduler and KV block manager; no model "
               f"compute), model {MODEL}, safety off; output {OUTPUTS[args.output]}"
               + (f"; cProfile on in both processes during every measured turn (CPU inflated), the dumps in "
                  f"{provenance.rel(args.profile)}/" if args.profile else ""),
        notes=[f"services: {', '.join(labels)}; every tree's gateway and replica each in a process of its own "
               "(`--serve`), all started at once, the client in this one; a session's replays alternate which "
               "tree goes first",
               "per turn: the gateway's and the replica's time.process_time_ns between a probe before the request "
               "and one after its completed event (every thread; nothing subtracted, nothing clamped: one probe's "
               "own cost is in each figure); measured: every delta turn (previous_response_id, the previous "
               "turn's tool outputs as input), never the first full request",
               f"each session replayed {args.repeat} time(s) on each tree; context buckets by the turn's prompt "
               f"tokens; the growth uses the smallest and largest bucket with ≥ {MIN_BUCKET_TURNS} turns in every "
               "tree, over all their turns and over the turns whose new and output tokens lie within the smallest "
               "bucket's 10th-90th percentiles",
               *(f"replay stopped early: {line}" for line in stopped)])
    body: list[str] = []
    for shown in tables:
        body += provenance.table_markdown(shown) + [""]
    body.append(f"![turn cpu traces]({stem}.png)")
    md = provenance.write_markdown(args.out, stem, f"Per-turn CPU on recorded sessions, by context (output: "
                                   f"{args.output})", header, body)
    raw = args.out / f"{stem}.json.gz"
    raw.write_bytes(raw_turns(turns, args.output, summary))
    console.print(f"wrote {provenance.rel(png)}, {provenance.rel(md)} and {provenance.rel(raw)}")
    return 0


def run_traces(args: argparse.Namespace, trees: list[tuple[str, Path]]) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from loopwire.common.recorded import load_sessions

    import provenance

    console = Console()
    loaded = load_sessions([str(p) for p in args.traces or [provenance.DATA_SESSIONS]],
                           lambda line: console.print(f"[yellow]{line}[/]", soft_wrap=True))
    loaded = [(p, s) for p, s in loaded if len(s.turns) > 1][: args.max_sessions or None]
    if not loaded:
        raise SystemExit("--traces: no recorded session with more than one turn")

    async def run() -> tuple[dict[str, list[TraceTurn]], list[str]]:
        with Progress(transient=True) as progress:
            task = progress.add_task("sessions replayed", total=len(trees) * len(loaded) * args.repeat)
            return await measure_traces(trees, loaded, args.output, args.repeat, progress, task, args.profile)

    turns, stopped = asyncio.run(run())
    return trace_report(turns, stopped, [(p, len(s.turns)) for p, s in loaded], args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--serve", choices=("inference", "gateway"), help=argparse.SUPPRESS)
    parser.add_argument("--replica", default="", help=argparse.SUPPRESS)
    parser.add_argument("--before", metavar="REF",
                        help="also measure the services of this commit (e.g. HEAD~3) and compare")
    parser.add_argument("--turns", type=int, default=20, help="measured turns per context bucket (default 20)")
    parser.add_argument("--quick", action="store_true",
                        help=f"buckets {', '.join(map(str, QUICK_BUCKETS))} and 8 turns each")
    known, _ = parser.parse_known_args()
    if known.serve:
        serve(known.serve, known.replica)
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from rich.progress import Progress

    import provenance

    parser.add_argument("--speculation", action="store_true",
                        help="ask for speculative decoding (the replica's default drafter) on every turn")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="cProfile both processes over each bucket's measured turns (with --traces: each "
                             "context bucket's); dumps in DIR and a table of the functions whose time per turn grows "
                             "most from the smallest to the largest bucket (CPU figures inflated)")
    parser.add_argument("--traces", nargs="*", type=Path, metavar="PATH",
                        help="replay recorded agent sessions (files or directories; none given: "
                             f"{provenance.rel(provenance.DATA_SESSIONS)}/) turn by turn through the real gateway, "
                             "measuring every stateful turn, bucketed by context; instead of the synthetic buckets")
    parser.add_argument("--output", choices=("one", "recorded"), default="one",
                        help="with --traces: 'one' (default): the recorded output goes in the next delta as input and "
                             "the replica answers one token, so every turn relays the same output; 'recorded': the "
                             "replica streams the recorded output as the model's tokens")
    parser.add_argument("--repeat", type=int, default=1,
                        help="with --traces: replay every session this many times on each tree (default 1)")
    parser.add_argument("--after", metavar="REF",
                        help="measure the services of this commit as 'after' instead of the working tree's")
    parser.add_argument("--max-sessions", type=int, default=0, help="with --traces: replay at most this many sessions")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    if args.turns < 1 or args.repeat < 1:
        parser.error("--turns and --repeat must be at least 1")
    buckets = QUICK_BUCKETS if args.quick else BUCKETS
    turns = 8 if args.quick else args.turns
    root = provenance.ROOT
    trees = []
    if args.before:
        services, commit = export(args.before, root)
        trees.append((f"before ({commit})", services))
    if args.after:
        services, commit = export(args.after, root)
        trees.append((f"after ({commit})", services))
    else:
        trees.append((f"after ({provenance.git_commit()})", root / "services"))

    if args.traces is not None:
        return run_traces(args, trees)

    async def all_runs() -> list[Run]:
        with Progress(transient=True) as progress:
            task = progress.add_task("turns by context length", total=len(trees) * len(buckets))
            return [await measure(label, services, buckets, turns, progress, task, args.speculation, args.profile)
                    for label, services in trees]

    runs = asyncio.run(all_runs())
    if args.profile:
        names = [label.split(" ")[0] for label, _ in trees]
        ends = (str(buckets[0]), str(buckets[-1]))
        from rich.console import Console

        for shown in profile_growth(args.profile, names, ends, (f"bucket {buckets[0]:,}", f"bucket {buckets[-1]:,}"),
                                    {(tree, end): turns for tree in names for end in ends}):
            Console(width=170).print(shown)
    return report(runs, buckets, turns, args)


if __name__ == "__main__":
    sys.exit(main())
