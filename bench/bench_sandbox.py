"""Sandbox benchmark: a sandbox per session (each command in namespaces of its own inside it,
two inits made ahead while the session is idle, each with its bash started and waiting for its
script) vs the same with bash started when its command comes, with one init made ahead, or each
init made when its command comes, vs a bubblewrap sandbox per command vs no sandbox (``--paths``
picks).

1. Spawn: `true` run N times through each path, wall time per command (start to exit, output
   collected), as the shell tool sees it.
2. The process storm of the seed: `seq 1000 | xargs -I{} true` (1,000 tiny processes) as one
   command, through each sandboxed path and bare.
3. The recorded sessions' real shell commands (``data/sessions``), each session's commands in
   order in a workspace of its own, through the shell tool (``tools.execute``: spawn,
   namespaces, shell start, output capture and formatting, quota check) on each path. The
   command's own runtime is measured inside its shell (``$EPOCHREALTIME`` as it starts and at its
   EXIT trap, no extra process); the harness's overhead is the rest of the tool call's wall time,
   reported ÷ the commands' own runtime (summed) and as a per-command median. Twice: in an empty
   workspace (most commands fail in milliseconds, so spawn dominates) and in a realistic one: a
   git repository holding a Python package's source (copied from this interpreter's
   site-packages under the session's package name), with `/testbed` read as the workspace and
   `python` as `python3`, so `ls`, `grep -r`, `cat`, `find`, `git status`, `python3 -c` do real work.
   Back to back by default; ``--session-gap MS`` idles that long before each command (the model's
   think time, in which a session's sandbox makes its next inits ahead).
4. Profile: ~200 commands of the realistic workspace through the loop's real tool path
   (``TurnTools``: journal write, events, ``tools.execute``, output item stored in SQLite), with a
   timestamp at every stage (``sandbox_process.TRACE``, and the command's shell's start and EXIT trap): the
   median time from the previous stage to each.

Run: .venv/bin/python bench/bench_sandbox.py [--quick] [--sessions N] [--paths command,late-bash,session,bare]
     [--session-gap MS] [--out DIR]
Writes sandbox.md and sandbox.png into ``--out`` (default .state/bench/); never overwrite the committed
results in bench/results while working: give a directory of your own (``--out /tmp/sb``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common.recorded import load_sessions  # noqa: E402
from loopwire.harness import sandbox_process, tools  # noqa: E402
from loopwire.harness.background import BackgroundTasks  # noqa: E402
from loopwire.harness.config import HarnessConfig  # noqa: E402
from loopwire.harness.loop import SessionRun  # noqa: E402
from loopwire.harness.replay import swe_agent_action  # noqa: E402
from loopwire.harness.sandbox import Sandbox  # noqa: E402
from loopwire.harness.sandbox_mounts import command_env  # noqa: E402
from loopwire.harness.session_sandbox import SessionSandbox  # noqa: E402
from loopwire.harness.store.sqlite import SqliteSessionStore  # noqa: E402
from loopwire.harness.turn_tools import TurnTools  # noqa: E402
from loopwire.v1 import common_pb2, harness_pb2  # noqa: E402

import interrupts  # noqa: E402
import provenance  # noqa: E402

console = Console() if sys.stdout.isatty() else Console(width=150)
STORM = "seq 1000 | xargs -I{} true"
PER_COMMAND, ON_DEMAND = "sandbox per command (before)", "per session, init made per command"
PER_SESSION, BARE = "per session, two inits made ahead, bash waiting in each (spares_ahead=2)", "bare (no sandbox)"
SHELL = "per session, a shell that stays (each command a subshell of it; shell_stays)"
ONE_AHEAD = "per session, one init made ahead (spares_ahead=1)"
LATE_BASH = "per session, two inits made ahead, bash started per command (bash_ahead off)"
SANDBOXED = (PER_COMMAND, ON_DEMAND, ONE_AHEAD, LATE_BASH, PER_SESSION, SHELL)
# --paths names: "session" is the per-session sandbox as it runs (inits made ahead, each with its bash waiting),
# "late-bash" the same with each bash started when its command comes, "on-demand" with each init made then.
PATHS = {"command": PER_COMMAND, "on-demand": ON_DEMAND, "one-ahead": ONE_AHEAD, "late-bash": LATE_BASH,
         "session": PER_SESSION, "shell": SHELL, "bare": BARE}
PACKAGE = "rich"  # the package whose source the realistic workspace holds
_MARK = re.compile(r"@@loopwire-bench (\d+\.\d+) (\d+\.\d+)\s*$")


async def bare(workspace: Path, command: str) -> float:
    """Seconds for ``bash -c command`` without a sandbox, output collected the same way."""
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec("bash", "-c", command, cwd=workspace, env=command_env(str(workspace)),
                                                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    await proc.communicate()
    return time.perf_counter() - started


async def sandboxed(start: object, command: str) -> float:
    started = time.perf_counter()
    process = await start(command)  # type: ignore[operator]
    await process.result(60)
    return time.perf_counter() - started


def runners(boxes: dict[str, Sandbox], workspace: Path,
            paths: tuple[str, ...]) -> tuple[dict[str, object], list[SessionSandbox]]:
    """The chosen paths' ways to run a command in ``workspace`` (and the session sandboxes they hold)."""
    out: dict[str, object] = {}
    sessions = []
    for mode in paths:
        if mode == PER_COMMAND:
            out[mode] = lambda c, box=boxes[mode]: box.start(workspace, c)
        elif mode == BARE:
            out[mode] = lambda c: bare(workspace, c)
        else:
            session = SessionSandbox(boxes[mode], workspace)
            sessions.append(session)
            out[mode] = session.start
    return out, sessions


async def timed(mode: str, run: object, command: str) -> float:
    return await run(command) if mode == BARE else await sandboxed(run, command)  # type: ignore[operator]


async def repeat(boxes: dict[str, Sandbox], ws: Path, command: str, reps: int, gap: float,
                 progress: Progress, paths: tuple[str, ...]) -> dict[str, list[float]]:
    """``command`` ``reps`` times on each path, interleaved so load on the machine hits every path
    alike, ``gap`` seconds apart (the model's turn between two commands, when the init is made)."""
    ws.mkdir()
    run, sessions = runners(boxes, ws, paths)
    for session in sessions:
        await sandboxed(session.start, "true")  # the session's sandbox starts once, before the clock
    out: dict[str, list[float]] = {m: [] for m in run}
    task = progress.add_task(f"`{command}`", total=reps * len(run))
    for _ in range(reps):
        for mode, r in run.items():
            await asyncio.sleep(gap)
            out[mode].append(await timed(mode, r, command))
            progress.advance(task)
    for session in sessions:
        session.close()
    return out


@dataclass
class Overhead:
    commands: int = 0
    measured: int = 0  # commands whose shell reported its own runtime (an `exec` replaces the shell)
    wall: float = 0.0  # seconds of the tool calls, measured ones only
    own: float = 0.0  # seconds the commands' shells ran
    first_wall: float = 0.0  # the session's first command (it starts the session's sandbox)
    per_call: list[float] = field(default_factory=list)  # seconds beyond the command's own runtime
    ratios: list[float] = field(default_factory=list)  # per command: overhead ÷ own runtime

    @property
    def share(self) -> float:
        """Overhead ÷ the commands' own runtime, summed over the commands."""
        return (self.wall - self.own) / self.own if self.own else 0.0


def wrapped(command: str) -> str:
    """The command, with its shell reporting when it started and ended (no extra process)."""
    return ("trap 'printf \"\\n@@loopwire-bench %s %s\\n\" \"$__lw_s\" \"$EPOCHREALTIME\"' EXIT; "
            f"__lw_s=$EPOCHREALTIME; eval {shlex.quote(command)}")


def package_name(path: Path) -> str:
    """The package a recorded session worked on (``pvlib__pvlib-python-1072`` -> ``pvlib``)."""
    stem = path.name.split(".")[0]
    repo = stem.split("__")[-1] if "__" in stem else stem
    return re.sub(r"-\d+$", "", repo).replace("-python", "").split("-")[0] or "pkg"


def realistic_template(tmp: Path) -> Path:
    """A git repository holding PACKAGE's source (from site-packages), committed once."""
    src = Path(str(__import__(PACKAGE).__file__)).parent
    repo = tmp / "template"
    shutil.copytree(src, repo / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "README.md").write_text(f"# {PACKAGE}\n")
    env = {**command_env(str(repo)), "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "source"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    return repo


def realistic(command: str, ws: Path) -> str:
    """A recorded command as it would run in its repository here: /testbed is the workspace."""
    command = command.replace("/testbed", str(ws))
    return re.sub(r"(^|[;&|(]\s*|&&\s*)python(\s)", r"\1python3\2", command)


def make_workspace(tmp: Path, name: str, template: Path | None, package: str) -> Path:
    ws = tmp / name
    if template is None:
        ws.mkdir()
    else:
        shutil.copytree(template, ws, symlinks=True)
        if package != PACKAGE:
            (ws / PACKAGE).rename(ws / package)
    return ws


def recorded_commands(paths: list[Path], limit: int) -> list[tuple[Path, int, list[str]]]:
    """Each session's shell commands (not SWE-agent's own tools, which its recorded `bash` calls may hold); a file
    that is no session (no assistant turn, unknown format) is skipped with a word why, as replay skips it."""
    sessions = []
    for path, recorded in load_sessions(paths, lambda why: console.print(f"[yellow]{why}")):
        commands = []
        for call in (c for t in recorded.turns for c in t.calls if c.name == "bash"):
            try:
                command = json.loads(call.arguments).get("command", "")
            except (ValueError, AttributeError):
                continue
            if isinstance(command, str) and command and not swe_agent_action(command):
                commands.append(command)
        sessions.append((path, len(recorded.turns), commands[:limit or None]))
    return sessions


async def bench_sessions(boxes: dict[str, Sandbox], tmp: Path, sessions: list[tuple[Path, int, list[str]]],
                         template: Path | None, progress: Progress, paths: tuple[str, ...],
                         session_gap: float) -> dict[str, Overhead]:
    """Each session's commands in order on each sandboxed path, ``session_gap`` seconds of idle time
    before each (the model's think time, in which a session's sandbox makes its next inits)."""
    out = {m: Overhead() for m in SANDBOXED if m in paths}
    kind = "realistic" if template else "empty"
    task = progress.add_task(f"recorded commands, {kind} workspace",
                             total=len(out) * sum(len(c) for _, _, c in sessions))
    for n, (path, _, commands) in enumerate(sessions):
        for k, (mode, overhead) in enumerate(out.items()):
            ws = make_workspace(tmp, f"{kind}-{n}-{k}", template, package_name(path))
            box = boxes[mode]
            ctx = tools.ToolContext(ws, box, BackgroundTasks(), shell_timeout=10, background_after=60)
            for i, recorded_command in enumerate(commands):
                command = realistic(recorded_command, ws) if template else recorded_command
                call = common_pb2.FunctionCall(call_id="c", name="shell",
                                               arguments=json.dumps({"command": wrapped(command), "timeout_seconds": 10}))
                if session_gap > 0:
                    await asyncio.sleep(session_gap)
                started = time.time()
                outcome = await tools.execute(call, ctx)
                wall = time.time() - started
                overhead.commands += 1
                if i == 0:
                    overhead.first_wall += wall
                elif m := _MARK.search(outcome.output.rsplit("\n[exit code", 1)[0]):
                    own = float(m.group(2)) - float(m.group(1))
                    overhead.measured += 1
                    overhead.wall += wall
                    overhead.own += own
                    overhead.per_call.append(wall - own)
                    overhead.ratios.append((wall - own) / own if own > 0 else float("inf"))
                progress.advance(task)
            ctx.background.kill_all()
            shutil.rmtree(ws, ignore_errors=True)
    return out


async def bench_profile(box: Sandbox, tmp: Path, commands: list[str], template: Path,
                        gap: float) -> tuple[dict[str, list[float]], list[float]]:
    """Each command through the loop's tool path (TurnTools, the store, events), ``gap`` seconds
    after the one before (the model's turn), with a timestamp at every stage: per stage, the
    seconds since the stage before it; and each call's total."""
    ws = make_workspace(tmp, "profile", template, PACKAGE)
    store = SqliteSessionStore(tmp / "profile.db")
    store.create("s", harness_pb2.StartTask(task="profile"), "", [], str(ws), "")
    events: list[harness_pb2.RunResponse] = []

    def emit(event: harness_pb2.RunResponse) -> None:
        sandbox_process.mark(f"event {event.WhichOneof('event')} emitted")
        events.append(event)

    stored = store.load("s")
    assert stored is not None
    run = SessionRun(HarnessConfig(workspace_root=tmp), store, box, stored, emit)
    for name in ("try_record_call_started", "record_call_started", "append"):
        def traced(*args: object, _f: object = getattr(store, name), _n: str = name, **kwargs: object) -> object:
            sandbox_process.mark(f"store {_n} begins")
            result = _f(*args, **kwargs)  # type: ignore[operator]
            sandbox_process.mark(f"store {_n} committed")
            return result
        setattr(store, name, traced)
    stages: dict[str, list[float]] = {}
    places: dict[str, list[int]] = {}
    totals = []
    try:
        for n, command in enumerate(["true", *commands]):  # the first starts the session's sandbox
            call = common_pb2.FunctionCall(call_id=f"c{n}", name="shell",
                                           arguments=json.dumps({"command": wrapped(realistic(command, ws))}))
            await asyncio.sleep(gap)
            trace: list[tuple[str, int]] = []
            token = sandbox_process.TRACE.set(trace)
            try:
                sandbox_process.mark("tool call complete in the stream")
                turn = TurnTools(run, n + 1)
                turn.start(call)
                await turn.finish([call])
            finally:
                sandbox_process.TRACE.reset(token)
            text = run.items[-1].function_call_output.output
            if m := _MARK.search(text.rsplit("\n[exit code", 1)[0]):
                trace += [("bash runs the command (EPOCHREALTIME)", int(float(m.group(1)) * 1e9)),
                          ("command's own runtime (to its EXIT trap)", int(float(m.group(2)) * 1e9))]
            if n == 0:
                continue
            trace.sort(key=lambda x: x[1])
            totals.append((trace[-1][1] - trace[0][1]) / 1e9)
            for k, ((_, before), (stage, at)) in enumerate(zip(trace, trace[1:], strict=False)):
                stages.setdefault(stage, []).append((at - before) / 1e9)
                places.setdefault(stage, []).append(k)
    finally:
        run.background.kill_all()
        store.close()
    order = sorted(stages, key=lambda st: statistics.median(places[st]))
    return {st: stages[st] for st in order}, totals


def realistic_mix(sessions: list[tuple[Path, int, list[str]]], count: int) -> list[str]:
    """``count`` recorded commands, taken evenly across the sessions."""
    flat = [c for _, _, commands in sessions for c in commands]
    step = max(1, len(flat) // count)
    return flat[::step][:count]


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.2f}"


def spawn_table(title: str, data: dict[str, list[float]]) -> Table:
    t = Table(title=title)
    for name in ("path", "median ms", "mean ms", "p90 ms", "vs per command", "beyond bare (median ms)"):
        t.add_column(name, justify="left" if name == "path" else "right")
    base = statistics.median(data[PER_COMMAND]) if PER_COMMAND in data else None
    floor = statistics.median(data[BARE]) if BARE in data else None
    for mode, values in data.items():
        med = statistics.median(values)
        t.add_row(mode, ms(values), f"{statistics.mean(values) * 1000:.2f}",
                  f"{statistics.quantiles(values, n=10)[-1] * 1000:.2f}" if len(values) > 1 else ms(values),
                  f"{med / base:.2f}×" if base else "-", f"{(med - floor) * 1000:.2f}" if floor is not None else "-")
    return t


def overhead_table(title: str, overhead: dict[str, Overhead]) -> Table:
    t = Table(title=title)
    for name in ("path", "commands", "measured", "tool wall s", "own runtime s", "overhead s",
                 "overhead ÷ own runtime", "median overhead ms/call", "median overhead ÷ own, per call",
                 "first commands wall s"):
        t.add_column(name, justify="left" if name == "path" else "right")
    for mode, o in overhead.items():
        t.add_row(mode, str(o.commands), str(o.measured), f"{o.wall:.2f}", f"{o.own:.2f}", f"{o.wall - o.own:.2f}",
                  f"{o.share:.1%}", ms(o.per_call) if o.per_call else "-",
                  f"{statistics.median(o.ratios):.1%}" if o.ratios else "-", f"{o.first_wall:.2f}")
    return t


def profile_table(stages: dict[str, list[float]], totals: list[float], path: str) -> Table:
    t = Table(title=f"4. where a command's time goes: {len(totals)} recorded commands in the realistic workspace "
                    f"through the loop's tool path, {path} (median per call {statistics.median(totals) * 1000:.2f} ms)")
    for name in ("stage reached", "calls", "median ms since the stage before", "mean ms", "share of the mean total"):
        t.add_column(name, justify="left" if name == "stage reached" else "right")
    total = statistics.mean(totals)
    for stage, values in stages.items():
        t.add_row(stage, str(len(values)), ms(values), f"{statistics.mean(values) * 1000:.3f}",
                  f"{sum(values) / len(totals) / total:.1%}")
    return t


def _runs(data: dict[str, list[float]]) -> int:
    """Runs per path (the same for every path given)."""
    return max(map(len, data.values()), default=0)


def report(spawn: dict[str, list[float]], spawn_b2b: dict[str, list[float]], storm: dict[str, list[float]],
           overheads: dict[str, dict[str, Overhead]], profile: tuple[dict[str, list[float]], list[float]],
           gap: float) -> tuple[list[Table], plt.Figure]:
    t1 = spawn_table(f"1a. spawn: `true` per command, {gap * 1000:g} ms apart (a model turn's least), "
                     f"{_runs(spawn)} runs each, interleaved", spawn)
    t1b = spawn_table(f"1b. spawn: `true` per command, back to back (no idle time to make the next init), "
                      f"{_runs(spawn_b2b)} runs each, interleaved", spawn_b2b)
    t2 = Table(title=f"2. process storm: `{STORM}` as one command ({_runs(storm)} runs each)")
    for name in ("path", "median ms", "vs per command", "vs bare"):
        t2.add_column(name, justify="left" if name == "path" else "right")
    sbase = statistics.median(storm[PER_COMMAND]) if PER_COMMAND in storm else None
    sfloor = statistics.median(storm[BARE]) if BARE in storm else None
    for mode, values in storm.items():
        med = statistics.median(values)
        t2.add_row(mode, ms(values), f"{med / sbase:.2f}×" if sbase else "-", f"{med / sfloor:.2f}×" if sfloor else "-")
    tables = [t1, t1b, t2]
    for kind, overhead in overheads.items():
        tables.append(overhead_table(f"3. recorded sessions' commands through the shell tool, {kind} workspace: "
                                     "harness overhead beyond the commands' own runtime (each session's first "
                                     "command, which starts the session's sandbox, counted apart)", overhead))
    if profile[1]:
        tables.append(profile_table(*profile, SHELL if SHELL in overheads.get("realistic", {}) else PER_SESSION))
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    colors = {PER_COMMAND: "tab:gray", ON_DEMAND: "tab:olive", ONE_AHEAD: "tab:cyan", LATE_BASH: "tab:orange",
              PER_SESSION: "tab:green", SHELL: "tab:purple", BARE: "tab:blue"}
    for ax, data, title in ((axes[0], spawn, "1a. `true`: wall per command"), (axes[1], storm, f"2. `{STORM}`")):
        medians = {m: statistics.median(v) * 1000 for m, v in data.items()}
        bars = ax.barh(list(medians), list(medians.values()), color=[colors[m] for m in medians])
        ax.bar_label(bars, labels=[f"{v:.1f} ms" for v in medians.values()], fontsize=8, padding=2)
        ax.set_xlim(0, max(medians.values()) * 1.35)
        ax.invert_yaxis()
        ax.set(title=title, xlabel="ms (median)")
        ax.tick_params(axis="y", labelsize=7)
    width = 0.38
    shown = [m for m in SANDBOXED if all(m in o for o in overheads.values())]
    for i, (kind, overhead) in enumerate(overheads.items()):
        shares = [overhead[m].share * 100 for m in shown]
        xs = [x + (i - 0.5) * width for x in range(len(shown))]
        bars = axes[2].bar(xs, shares, width, label=f"{kind} workspace", alpha=0.55 + 0.45 * i,
                           color=[colors[m] for m in shown])
        axes[2].bar_label(bars, labels=[f"{v:.0f}%" for v in shares], fontsize=7)
    axes[2].set_xticks(range(len(shown)), [m.split(" (")[0].replace("sandbox ", "") for m in shown], fontsize=7)
    axes[2].axhline(5, color="tab:red", linestyle="--", linewidth=1, label="goal: 5%")
    axes[2].legend(fontsize=7)
    axes[2].set(title="3. harness overhead ÷ commands' own runtime", ylabel="%")
    fig.suptitle("Shell sandbox: one per session (inits made ahead) vs per command", fontsize=11)
    fig.tight_layout()
    return tables, fig


def probed(tmp: Path, name: str, per_session: bool, spares: int, bash_ahead: bool = True,
           shell_stays: bool = False) -> Sandbox:
    box = Sandbox(output_limit=16384, per_session=per_session)
    box.spares_ahead, box.bash_ahead, box.shell_stays = spares, bash_ahead, shell_stays
    if reason := box.probe(tmp / f"probe-{name}"):
        raise SystemExit(f"the sandbox cannot run here: {reason}")
    return box


async def main_async(args: argparse.Namespace) -> int:
    paths = provenance.session_files(args.traces)[:args.sessions or None]
    reps = 30 if args.quick else args.reps
    storm_reps = 3 if args.quick else 10
    limit = 20 if args.quick else args.limit
    chosen = tuple(dict.fromkeys(args.paths))  # in the order given (part 1 and 2 interleave them in it)
    gap_s = args.session_gap / 1000
    sessions = recorded_commands(paths, limit)
    if not sessions:
        console.print("[red]no recorded session with shell commands under --traces")
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    try:
        makers = {PER_COMMAND: lambda: probed(tmp, "c", False, 0), ON_DEMAND: lambda: probed(tmp, "d", True, 0),
                  ONE_AHEAD: lambda: probed(tmp, "o", True, 1),
                  LATE_BASH: lambda: probed(tmp, "l", True, 2, bash_ahead=False),
                  PER_SESSION: lambda: probed(tmp, "s", True, 2), SHELL: lambda: probed(tmp, "h", True, 2, shell_stays=True)}
        boxes = {mode: make() for mode, make in makers.items() if mode in chosen}
        if any(not box.per_session for mode, box in boxes.items() if mode != PER_COMMAND):
            console.print("[red]no system python3 for a session's supervisor: nothing to compare")
            return 1
        template = realistic_template(tmp)
        with Progress(console=console, transient=True) as progress:
            spawn = await repeat(boxes, tmp / "spawn", "true", reps, args.gap, progress, chosen)
            spawn_b2b = await repeat(boxes, tmp / "spawn-b2b", "true", reps, 0.0, progress, chosen)
            storm = await repeat(boxes, tmp / "storm", STORM, storm_reps, args.gap, progress, chosen)
            overheads = {"empty": await bench_sessions(boxes, tmp, sessions, None, progress, chosen, gap_s),
                         "realistic": await bench_sessions(boxes, tmp, sessions, template, progress, chosen, gap_s)}
            profile: tuple[dict[str, list[float]], list[float]] = ({}, [])
            profiled = SHELL if SHELL in chosen else PER_SESSION
            if profiled in chosen and args.profile > 0:
                profile = await bench_profile(boxes[profiled], tmp, realistic_mix(sessions, args.profile), template,
                                              args.gap)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    used = [(p, turns) for p, turns, _ in sessions]
    note = (f"their `bash` calls{f', the first {limit} of each' if limit else ''}, in an empty workspace and in a "
            f"git repository of `{PACKAGE}`'s source named as the session's package")
    short = provenance.short_data(used, note)
    tables, fig = report(spawn, spawn_b2b, storm, overheads, profile, args.gap)
    for t in tables:
        console.print(t)
    provenance.stamp(fig, short)
    png = provenance.save_figure(fig, args.out, "sandbox")
    header = provenance.provenance(
        [f"paths: {', '.join(chosen)}",
         f"part 1: `true` × {reps} per path, {args.gap * 1000:g} ms apart and back to back",
         f"part 2: `{STORM}` × {storm_reps} per path", f"part 3: {provenance.describe_sessions(used, note=note)}; "
         f"{args.session_gap:g} ms idle before each command",
         f"part 4: {len(profile[1])} of those commands, taken evenly, in the realistic workspace"],
        notes=["the machine's cores are shared: compare paths within one run (they are interleaved), not across runs",
               "own runtime: measured inside the sandbox by the command's shell ($EPOCHREALTIME when it starts, and in "
               "its EXIT trap); overhead = tool-call wall time (tools.execute) minus that"])
    body = []
    for t in tables:
        body += [*provenance.table_markdown(t), ""]
    md = provenance.write_markdown(args.out, "sandbox", "Shell sandbox: per session vs per command", header,
                                   [*body, "![sandbox](sandbox.png)"])
    summary = sandbox_json(overheads["realistic"])
    out_json = Path(args.out) / "sandbox.json"
    out_json.write_text(json.dumps(summary, indent=2) + "\n")
    console.print(f"wrote {provenance.rel(md)}, {provenance.rel(png)} and {provenance.rel(out_json)}")
    return 0


def sandbox_json(overhead: dict[str, Overhead]) -> dict[str, dict[str, dict[str, float]]]:
    """Per path, on the recorded commands in the realistic workspace: the harness's overhead ÷ the commands' own
    runtime (percent) and the median overhead of one command beyond its own runtime (ms)."""
    return {"paths": {mode: {"overhead_pct": round(o.share * 100, 2),
                             "median_ms": round(statistics.median(o.per_call) * 1000, 3) if o.per_call else 0.0}
                      for mode, o in overhead.items()}}


def _paths(text: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PATHS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown path {', '.join(unknown) or '(none)'}; choose of {', '.join(PATHS)}")
    return tuple(PATHS[n] for n in names)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(provenance.DATA_SESSIONS),
                        help="recorded sessions (a directory or files: mini-swe-agent, SWE-agent, chat JSON) whose shell "
                             "commands part 3 runs; files that are no session are skipped with a word why "
                             "(default: data/sessions)")
    parser.add_argument("--sessions", type=int, default=0, help="only the first N sessions (0: all)")
    parser.add_argument("--reps", type=int, default=200, help="runs of `true` per path")
    parser.add_argument("--quick", action="store_true", help="fewer runs, 20 commands per session")
    parser.add_argument("--limit", type=int, default=0, help="only the first N commands of each session (0: all)")
    parser.add_argument("--gap", type=float, default=0.05,
                        help="seconds between two commands in part 1a and 2 (the model's turn; 0.05: a fast one)")
    parser.add_argument("--profile", type=int, default=200,
                        help="commands profiled in part 4 (stage times through sandbox_process.TRACE; 0: no part 4)")
    parser.add_argument("--paths", type=_paths, default=tuple(PATHS.values()), metavar="LIST",
                        help="comma-separated paths to measure, of: command (a bubblewrap sandbox per command), "
                             "session (a sandbox per session, inits made ahead), on-demand (per session, each init "
                             "made when its command comes), one-ahead (per session, one init made ahead, as "
                             "before spares_ahead=2), late-bash (per session, two inits made ahead, each command's "
                             "bash started when it comes, as before bash_ahead), bare (no sandbox; parts 1 and 2 only: recorded commands "
                             "never run on the host); parts 1 and 2 run them interleaved in this order (a path that makes "
                             "its next inits right after a command slows the path after it); default: all")
    parser.add_argument("--session-gap", type=float, default=0.0, metavar="MS",
                        help="milliseconds of idle time before each recorded command in part 3 (the model's think "
                             "time, in which a session's sandbox makes its next inits); default 0: back to back")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(interrupts.main(main))
