"""Harness benchmark: what the harness's choices save, each measured against the naive way
through the same mesh (real harness → real gateway → simulated inference replica).

1. Recorded sessions replayed through the harness: stateful deltas on one Converse stream
   vs the naive stateless loop (whole transcript, fresh stream every turn): bytes the
   harness sends, tokens the gateway tokenizes, wall time.
2. Tool-heavy turns with the inference replica in modelled real time: tools started as
   each call completes in the stream and run in parallel, vs the naive loop that waits
   for the whole response and runs the calls one after another.
3. Cost of one tool call: in-process file tools vs a sandboxed `cat` vs an unsandboxed one.

Run: .venv/bin/python bench/bench_harness.py [--traces DIR] [--quick] [--out DIR]
Model outputs are replays of recorded sessions (labelled as such); the engine is simulated.
Part 1 replays the three sessions of ``examples/sessions`` (plus ``--traces``; ``--quick``: the
first two). Writes harness.md and harness.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # no transport chatter between the tables
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common import grpc_server  # noqa: E402
from loopwire.common.auth import Authenticator  # noqa: E402
from loopwire.common.recorded import load_session  # noqa: E402
from loopwire.gateway.factory import start_gateway  # noqa: E402
from loopwire.gateway.service import GatewayConfig  # noqa: E402
from loopwire.harness import tools  # noqa: E402
from loopwire.harness.background import BackgroundTasks  # noqa: E402
from loopwire.harness.config import HarnessConfig  # noqa: E402
from loopwire.harness.conversation import Conversation  # noqa: E402
from loopwire.harness.sandbox import Sandbox  # noqa: E402
from loopwire.harness.server import build  # noqa: E402
from loopwire.inference.server import EngineOptions, add_servicer, build_engine  # noqa: E402
from loopwire.v1 import common_pb2, gateway_pb2, harness_pb2, harness_pb2_grpc  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=150)
STATEFUL, STATELESS = harness_pb2.CONVERSATION_MODE_STATEFUL, harness_pb2.CONVERSATION_MODE_STATELESS


class Mesh:
    """Simulated replica + gateway + harness, in this process, on real gRPC servers."""

    def __init__(self, time_scale: float, state: Path) -> None:
        self.time_scale, self.state = time_scale, state
        self.closers: list[Callable] = []

    async def __aenter__(self) -> Mesh:
        engine = build_engine(EngineOptions(engine="simulated", replica_id="sim-0", time_scale=self.time_scale,
                                            max_output_tokens=8192))
        replica = await self._serve(lambda s: add_servicer(s, engine))
        await engine.start()
        gateway = await start_gateway([replica], poll_interval_s=0.1, authenticator=Authenticator.open(),
                                      config=GatewayConfig(allow_replay=True))
        self.closers.append(gateway.close)
        self.gateway = gateway.address
        self.config = HarnessConfig(gateway=self.gateway, workspace_root=self.state / "workspaces",
                                    shell_timeout=30, background_after=30)
        service, store = build(self.config, self.state / "harness.db", Authenticator.open())
        harness = await self._serve(lambda s: harness_pb2_grpc.add_HarnessServiceServicer_to_server(service, s))
        self.channel = grpc_server.service_channel(harness)
        self.stub = harness_pb2_grpc.HarnessServiceStub(self.channel)
        self.closers += [engine.close, self.channel.close]
        self.closers.append(lambda: asyncio.to_thread(store.close))
        return self

    async def _serve(self, add: Callable) -> str:
        server = grpc_server.make_server()
        add(server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self.closers.append(lambda: server.stop(0))
        return f"127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        for close in reversed(self.closers):
            await close()

    async def run(self, start: harness_pb2.StartTask) -> tuple[list[harness_pb2.TurnProfile], float]:
        profiles, t0 = [], time.perf_counter()
        async for event in self.stub.Run(iter([harness_pb2.RunRequest(start=start)])):
            kind = event.WhichOneof("event")
            if kind == "turn_completed":
                profiles.append(event.turn_completed.profile)
            elif kind == "failed":
                raise RuntimeError(f"run failed: {event.failed.error.message}")
        return profiles, time.perf_counter() - t0


# -- 1. stateful vs stateless over recorded sessions ---------------------------------------


@dataclass
class SessionResult:
    name: str
    mode: str
    turns: int
    bytes_sent: int
    tokens_tokenized: int
    wall_s: float
    per_turn_bytes: list[int]


async def bench_sessions(paths: list[Path], tmp: Path, progress: Progress) -> list[SessionResult]:
    results = []
    task = progress.add_task("recorded sessions", total=2 * len(paths))
    for path in paths:
        recorded = load_session(path)
        for mode, label in ((STATEFUL, "stateful (ours)"), (STATELESS, "stateless (naive)")):
            async with Mesh(0.0, tmp / f"{path.name}-{mode}") as mesh:  # a fresh mesh: no cache from the other run
                start = harness_pb2.StartTask(task=recorded.task, instructions=recorded.instructions,
                                              replay=recorded.replay_script(),
                                              model=harness_pb2.ModelOptions(conversation_mode=mode))
                profiles, wall = await mesh.run(start)
            results.append(SessionResult(
                path.name, label, len(profiles), sum(p.bytes_sent for p in profiles),
                sum(p.timings.tokens_tokenized for p in profiles), wall, [p.bytes_sent for p in profiles]))
            progress.advance(task)
    return results


# -- 2. tools as calls stream in, in parallel, vs sequential after the response ------------


def tool_turns(n_turns: int, calls: int, tool_s: float) -> list[common_pb2.ReplayOutput]:
    return [common_pb2.ReplayOutput(
        text="Let me check these in parallel." if t < n_turns else "All checks are done.",
        function_calls=[common_pb2.FunctionCall(
            call_id=f"call_{t}_{c}", name="shell",
            arguments=json.dumps({"command": f"sleep {tool_s}; echo check {c} of turn {t} passed"}))
            for c in range(calls if t < n_turns else 0)])
        for t in range(n_turns + 1)]


async def naive_loop(mesh: Mesh, outputs: list[common_pb2.ReplayOutput], workspace: Path) -> list[float]:
    """The naive agent loop: wait for the whole response, then run the calls one by one."""
    conversation = Conversation(mesh.gateway, "", stateful=True)
    context = tools.ToolContext(workspace, Sandbox(), BackgroundTasks(), 30, 30)
    transcript = [common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text="run the checks")]))]
    tool_list = [t for t in tools.tool_list() if t.name == "shell"]
    walls = []
    for out in outputs[:-1]:
        t0 = time.perf_counter()
        model = await conversation.respond(
            gateway_pb2.CreateResponse(instructions="bench", tools=tool_list, replay=out), transcript,
            lambda event: None)
        transcript += model.output
        for call in model.calls:
            result = await tools.execute(call, context)
            transcript.append(common_pb2.Item(function_call_output=common_pb2.FunctionCallOutput(
                call_id=call.call_id, output=result.output)))
        walls.append(time.perf_counter() - t0)
    await conversation.close()
    return walls


async def bench_tool_overlap(tmp: Path, turns: int, calls: int, tool_s: float,
                             progress: Progress) -> dict[str, list[float]]:
    task = progress.add_task("tool-heavy turns", total=2)
    outputs = tool_turns(turns, calls, tool_s)
    async with Mesh(1.0, tmp / "overlap") as mesh:
        sandbox_ok = not Sandbox().probe(tmp / "probe")
        if not sandbox_ok:
            raise RuntimeError("bubblewrap cannot create a sandbox here; part 2 needs it")
        start = harness_pb2.StartTask(
            task="run the checks", instructions="bench",
            replay=harness_pb2.ReplayScript(source="synthetic tool-heavy turns", run_tools=True,
                                            tools=[t for t in tools.tool_list() if t.name == "shell"],
                                            turns=[harness_pb2.ReplayTurn(output=o) for o in outputs]))
        profiles, _ = await mesh.run(start)
        ours = [p.wall_us / 1e6 for p in profiles[:-1]]
        progress.advance(task)
        workspace = tmp / "naive-ws"
        workspace.mkdir()
        naive = await naive_loop(mesh, outputs, workspace)
        progress.advance(task)
    return {"streamed + parallel (ours)": ours, "after response, sequential (naive)": naive}


# -- 3. one tool call -----------------------------------------------------------------------


async def bench_call_cost(tmp: Path, reps: int, progress: Progress) -> dict[str, float]:
    workspace = tmp / "calls"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("".join(f"line {n}\n" for n in range(200)))
    context = tools.ToolContext(workspace, Sandbox(), BackgroundTasks(), 30, 30)
    read = common_pb2.FunctionCall(name="read_file", arguments=json.dumps({"path": "notes.txt"}))
    cat = common_pb2.FunctionCall(name="shell", arguments=json.dumps({"command": "cat notes.txt"}))
    task = progress.add_task("tool call cost", total=3 * reps)
    timings: dict[str, list[float]] = {"read_file, in-process (ours)": [], "cat in bubblewrap (shell tool)": [],
                                       "cat, unsandboxed (naive, unsafe)": []}
    for _ in range(reps):
        for label, run in (
            ("read_file, in-process (ours)", lambda: tools.execute(read, context)),
            ("cat in bubblewrap (shell tool)", lambda: tools.execute(cat, context)),
            ("cat, unsandboxed (naive, unsafe)", lambda: _plain(workspace)),
        ):
            t0 = time.perf_counter()
            await run()
            timings[label].append(time.perf_counter() - t0)
            progress.advance(task)
    return {k: statistics.median(v) * 1e3 for k, v in timings.items()}


async def _plain(workspace: Path) -> None:
    proc = await asyncio.create_subprocess_exec("bash", "-c", "cat notes.txt", cwd=workspace,
                                                stdout=asyncio.subprocess.PIPE)
    await proc.communicate()


# -- report ---------------------------------------------------------------------------------


def report(sessions: list[SessionResult], overlap: dict[str, list[float]], costs: dict[str, float],
           short: str, tool_setup: str) -> tuple[list[Table], object]:
    tables = []
    table = Table(title="1. Recorded sessions (replayed): harness → gateway per mode")
    for col in ("session", "mode", "turns", "bytes sent", "tokens tokenized", "wall s", "naive / ours"):
        table.add_column(col, justify="right" if col not in ("session", "mode") else "left")
    by_session: dict[str, dict[str, SessionResult]] = {}
    for r in sessions:
        by_session.setdefault(r.name, {})[r.mode] = r
    for name, modes in by_session.items():
        ours, naive = modes["stateful (ours)"], modes["stateless (naive)"]
        for r in (ours, naive):
            ratio = f"{naive.bytes_sent / ours.bytes_sent:.1f}× bytes, " \
                    f"{naive.tokens_tokenized / max(ours.tokens_tokenized, 1):.1f}× tokens" if r is naive else ""
            table.add_row(name, r.mode, str(r.turns), f"{r.bytes_sent:,}", f"{r.tokens_tokenized:,}",
                          f"{r.wall_s:.2f}", ratio)
    if len(by_session) > 1:
        totals = {mode: [m[mode] for m in by_session.values()] for mode in ("stateful (ours)", "stateless (naive)")}
        sums = {mode: (sum(r.turns for r in rs), sum(r.bytes_sent for r in rs), sum(r.tokens_tokenized for r in rs),
                       sum(r.wall_s for r in rs)) for mode, rs in totals.items()}
        ours_t, naive_t = sums["stateful (ours)"], sums["stateless (naive)"]
        for mode, (turns, sent, tokens, wall) in sums.items():
            ratio = f"{naive_t[1] / ours_t[1]:.1f}× bytes, {naive_t[2] / ours_t[2]:.1f}× tokens" \
                if mode == "stateless (naive)" else ""
            table.add_row(f"[bold]all {len(by_session)} sessions[/]", mode, str(turns), f"{sent:,}", f"{tokens:,}",
                          f"{wall:.2f}", ratio)
    console.print(table)
    tables.append(table)

    table = Table(title=f"2. Tool-heavy turns ({tool_setup}; modelled real-time replica, real sandboxed tools)")
    for col in ("loop", "turns", "mean turn s", "median turn s", "naive / ours"):
        table.add_column(col, justify="right" if col != "loop" else "left")
    (ours_label, ours), (naive_label, naive) = overlap.items()
    for label, walls in overlap.items():
        ratio = f"{statistics.mean(naive) / statistics.mean(ours):.2f}×" if label == naive_label else ""
        table.add_row(label, str(len(walls)), f"{statistics.mean(walls):.3f}", f"{statistics.median(walls):.3f}",
                      ratio)
    console.print(table)
    tables.append(table)

    table = Table(title="3. One tool call (median)")
    table.add_column("call")
    table.add_column("ms", justify="right")
    for label, ms in costs.items():
        table.add_row(label, f"{ms:.2f}")
    console.print(table)
    tables.append(table)

    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    for modes in by_session.values():
        for mode, color in (("stateful (ours)", "tab:green"), ("stateless (naive)", "tab:red")):
            r = modes[mode]
            cumulative = [sum(r.per_turn_bytes[: n + 1]) / 1024 for n in range(r.turns)]
            axes[0].plot(range(1, r.turns + 1), cumulative, color=color, alpha=0.5, linewidth=1)
    for mode, color in (("stateful (ours)", "tab:green"), ("stateless (naive)", "tab:red")):
        axes[0].plot([], [], color=color, label=mode)
    axes[0].set(title=f"1. bytes sent harness → gateway so far\n({short}; one line per session)",
                xlabel="turn (1-based)", ylabel="KiB sent so far (log scale)", yscale="log")
    axes[0].set_xlim(left=1)
    axes[0].grid(alpha=0.3)
    axes[0].legend()
    axes[1].boxplot([ours, naive], tick_labels=["streamed +\nparallel (ours)", "sequential after\nresponse (naive)"])
    axes[1].set_ylim(bottom=0)
    axes[1].set(title=f"2. tool-heavy turn wall time\n({tool_setup})", ylabel="seconds per turn (wall)")
    bars = axes[2].barh(list(costs), list(costs.values()), color=["tab:green", "tab:blue", "tab:gray"])
    axes[2].bar_label(bars, labels=[f"{v:.2f} ms" for v in costs.values()], fontsize=8, padding=2)
    axes[2].set_xlim(0, max(costs.values()) * 1.25)
    axes[2].invert_yaxis()
    axes[2].set(title="3. one tool call (median wall time)", xlabel="milliseconds per call")
    axes[2].tick_params(axis="y", labelsize=8)
    fig.suptitle("Harness: stateful deltas, streamed parallel tools and in-process file tools vs the naive way "
                 "(simulated engine)", fontsize=11)
    fig.tight_layout()
    return tables, fig


async def main_async(args: argparse.Namespace) -> int:
    paths = provenance.session_files(provenance.EXAMPLE_SESSIONS)
    if args.traces:
        paths += provenance.session_files(args.traces)
    if args.quick:
        paths = paths[:2]
    tool_turns_n, calls, tool_s = (3 if args.quick else 6), 4, 0.5
    reps = 10 if args.quick else 40
    tool_setup = f"{tool_turns_n} synthetic turns × {calls} shell calls of `sleep {tool_s}`"
    tmp = Path(tempfile.mkdtemp(prefix="bench-harness-"))
    try:
        with Progress(console=console, transient=True) as progress:
            sessions = await bench_sessions(paths, tmp, progress)
            overlap = await bench_tool_overlap(tmp, tool_turns_n, calls, tool_s, progress)
            costs = await bench_call_cost(tmp, reps, progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    turns = {r.name: r.turns for r in sessions if r.mode == "stateful (ours)"}
    used = [(p, turns.get(p.name, 0)) for p in paths]
    short = provenance.short_data(used)
    tables, fig = report(sessions, overlap, costs, short, tool_setup)
    provenance.stamp(fig, short)
    png = provenance.save_figure(fig, args.out, "harness")
    header = provenance.provenance(
        [f"part 1: {provenance.describe_sessions(used, note='every turn, stateful and stateless on fresh meshes')}",
         f"part 2: {tool_setup} (synthetic), run by the harness vs a naive loop",
         f"part 3: a 200-line file read {reps} times each way"],
        engine="simulated (one replica, in this process with the gateway and harness on real gRPC servers; part 1 at "
               "time scale 0, part 2 in modelled real time); tools run in bubblewrap",
        cost_model=provenance.cost_model("h200", "8b"))
    body = []
    for t in tables:
        body += [*provenance.table_markdown(t), ""]
    md = provenance.write_markdown(args.out, "harness", "Harness benchmark", header, [*body, "![harness](harness.png)"])
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", help="a directory of more recorded sessions (.traj / .traj.json) to replay")
    parser.add_argument("--quick", action="store_true", help="fewer sessions and repetitions")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
