"""What every benchmark writes, and where: results files that say how they were made.

Each results file (markdown, beside each PNG) starts with its provenance: the exact command
line, the git commit (``dirty`` when the tree has changes), the data set (which session files,
how many sessions and turns), the machine (cores, CPU model, load, engine and cost model where
relevant), the date and the wall time so far.

Benchmarks write to ``.state/bench/`` by default (untracked); ``make bench-record`` passes
``--out bench/results`` to refresh the committed results. Those are written only from a clean
tree: with changes (other than earlier results in ``bench/results/`` itself) a benchmark refuses
before it runs, unless ``--allow-dirty`` is passed (``make bench-record BENCH_ARGS=--allow-dirty``);
the header then says ``dirty``. ``.state/bench/`` takes results from any tree.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_SESSIONS = ROOT / "data" / "sessions"  # the recorded sessions behind the headline numbers
EXAMPLE_SESSIONS = ROOT / "examples" / "sessions"  # three of them, for `make run`
DEFAULT_OUT = ROOT / ".state" / "bench"  # untracked (.gitignore: .state/)
RECORDED_RESULTS = ROOT / "bench" / "results"  # committed; written only by `make bench-record`
SESSION_SUFFIXES = (".traj.json", ".traj", ".json")
_STARTED = time.monotonic()
_DATE = datetime.now(UTC)


# -- command line ----------------------------------------------------------------------------


_allow_dirty = False  # set by --allow-dirty


class _AllowDirty(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        global _allow_dirty
        _allow_dirty = True
        setattr(namespace, self.dest, True)


def add_out_argument(parser: argparse.ArgumentParser) -> None:
    """``--out`` and ``--allow-dirty``; the parsed ``--out`` is checked at once (``check_clean``), so a
    benchmark that may not record its results refuses before it runs, not after."""
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help=f"directory for the markdown and PNG results (default: {rel(DEFAULT_OUT)}/; "
                             "`make bench-record` passes bench/results)")
    parser.add_argument("--allow-dirty", action=_AllowDirty,
                        help="write to bench/results/ although the working tree has changes (the header says dirty)")
    parse = parser.parse_known_args

    def parse_then_check(*args: Any, **kwargs: Any) -> tuple[argparse.Namespace, list[str]]:
        namespace, rest = parse(*args, **kwargs)
        check_clean(getattr(namespace, "out", DEFAULT_OUT))
        return namespace, rest

    parser.parse_known_args = parse_then_check  # type: ignore[method-assign]  # parse_args calls it too


def rel(path: Path | str) -> str:
    """``path`` relative to the repository root when it is inside it."""
    p = Path(os.path.abspath(path))  # not resolve(): the venv's python is a symlink out of the repository
    try:
        return str(p.relative_to(ROOT))
    except ValueError:
        return str(path)


def command_line() -> str:
    """The command as run: interpreter and script relative to the repository root when inside it;
    an interpreter elsewhere (a virtual environment shared with another checkout) by its name only,
    so no machine path enters a results file."""
    exe = rel(sys.executable)
    if os.path.isabs(exe):
        exe = os.path.basename(exe)
    return shlex.join([exe, rel(sys.argv[0]), *sys.argv[1:]])


# -- sessions --------------------------------------------------------------------------------


def session_files(*roots: Path | str) -> list[Path]:
    """Recorded session files under each directory (or the file itself), sorted per root."""
    out: list[Path] = []
    for root in map(Path, roots):
        if root.is_dir():
            out += sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(SESSION_SUFFIXES))
        elif root.is_file():
            out.append(root)
    return out


def _kind(path: Path) -> str:
    if path.name.endswith(".traj.json"):
        return "mini-swe-agent `.traj.json`"
    if path.name.endswith(".traj"):
        return "SWE-agent `.traj`"
    return "`.json`"


def describe_sessions(used: Sequence[tuple[Path, int]], *, note: str = "", source: str = "") -> str:
    """One markdown bullet body: where the sessions come from, how many sessions and turns, which files
    (and a digest of their bytes, so a rerun can check it replays the same data)."""
    if not used:
        return "no sessions"
    kinds: dict[str, int] = {}
    digest = hashlib.sha256()
    for path, _ in used:
        kinds[_kind(path)] = kinds.get(_kind(path), 0) + 1
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    dirs = sorted({rel(p.parent) for p, _ in used})
    where = source or ", ".join(f"`{d}/`" for d in dirs)
    turns = sum(n for _, n in used)
    kinds_text = ", ".join(f"{n} {k}" for k, n in kinds.items())
    names = ", ".join(p.name.removesuffix(".json").removesuffix(".traj") for p, _ in used)
    return (f"{where}: {len(used)} session{'s' if len(used) != 1 else ''} ({kinds_text}), {turns:,} assistant turns"
            f"{'; ' + note if note else ''}; sha256 of the files {digest.hexdigest()[:12]}; files: {names}")


def short_data(used: Sequence[tuple[Path, int]], note: str = "") -> str:
    """The data set in a few words, for plot titles and footers."""
    dirs = sorted({rel(p.parent.parent if p.parent.parent.name == "sessions" else p.parent) for p, _ in used})
    return (f"{len(used)} recorded session{'s' if len(used) != 1 else ''} from {', '.join(dirs)}, "
            f"{sum(n for _, n in used):,} turns{' (' + note + ')' if note else ''}")


# -- provenance ------------------------------------------------------------------------------


def _git(*args: str, strip: bool = True) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip() if strip else out


def changed_paths() -> list[str]:
    """Paths ``git status`` reports changed or untracked, except results files under ``bench/results/``:
    writing them is what recording does (``make bench-record`` runs one benchmark after another)."""
    entries = _git("status", "--porcelain", "-z", strip=False).split("\0")  # " M path": the space counts
    out: list[str] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        if "R" in entry[:2] or "C" in entry[:2]:
            i += 1  # a rename or copy: its source path follows
        path = entry[3:]
        if not Path(os.path.abspath(ROOT / path)).is_relative_to(RECORDED_RESULTS):
            out.append(path)
    return out


@functools.cache
def git_commit() -> str:
    commit = _git("rev-parse", "--short=12", "HEAD") or "unknown"
    changed = changed_paths()
    return f"{commit} dirty ({len(changed)} changed or untracked path(s))" if changed else commit


def _records(out: Path | str) -> bool:
    return Path(os.path.abspath(out)).is_relative_to(RECORDED_RESULTS)


def check_clean(out: Path | str) -> None:
    """Refuse (exit with one line) to write committed results from a tree they cannot be traced to:
    changed or untracked paths, or no git commit at all. ``--allow-dirty`` lets them through."""
    if _allow_dirty or not _records(out):
        return
    commit = git_commit()
    if commit.startswith("unknown"):
        why = "no git commit found (not a git checkout?), so the results could not name one"
    elif "dirty" in commit:
        why = f"the working tree has {len(changed_paths())} changed or untracked path(s) (git status)"
    else:
        return
    raise SystemExit(f"refusing to write results to {rel(out)}/: {why}; commit first, "
                     "or pass --allow-dirty to record anyway (the header then says dirty)")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    cores = len(os.sched_getaffinity(0))
    try:
        load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = "load unknown"
    return (f"{cores} cores usable ({os.cpu_count()} online), {cpu_model()}, {platform.machine()}, "
            f"{load} when written; Python {platform.python_version()}")


def provenance(data: str | Sequence[str], *, engine: str = "", cost_model: str = "",
               notes: Iterable[str] = ()) -> str:
    """The markdown bullets every results file starts with (``data``: one line, or one per part)."""
    data_lines = [f"- data: {data}"] if isinstance(data, str) else ["- data:", *(f"  - {d}" for d in data)]
    lines = [
        f"- command: `{command_line()}` (run from the repository root)",
        f"- commit: {git_commit()}",
        *data_lines,
        f"- machine: {machine()}",
    ]
    if engine:
        lines.append(f"- engine: {engine}")
    if cost_model:
        lines.append(f"- cost model: {cost_model}")
    lines += [f"- date: {_DATE:%Y-%m-%d %H:%M} UTC (start); wall time so far {time.monotonic() - _STARTED:,.0f} s",
              *(f"- {n}" for n in notes)]
    return "\n".join(lines)


def stamp(fig: Any, data: str) -> None:
    """A footer on a figure: data set, commit and date, so a PNG on its own says what it shows."""
    commit = git_commit().split(" ")[0] + (" (dirty)" if "dirty" in git_commit() else "")
    # Just below the figure (savefig's tight bbox takes it in), so it never covers an axis label.
    fig.text(0.005, -0.005, f"{data} · commit {commit} · {_DATE:%Y-%m-%d} · {command_line()}",
             fontsize=6.5, color="0.35", ha="left", va="top")


# -- writing ---------------------------------------------------------------------------------


def table_markdown(table: Any) -> list[str]:
    """A rich Table as a markdown table (title in bold above it; markup stripped)."""
    from rich.text import Text

    def plain(cell: object) -> str:
        text = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
        return text.replace("\n", " ").replace("|", "\\|")

    cols = table.columns
    out = [f"**{plain(table.title)}**", ""] if table.title else []
    out += ["| " + " | ".join(plain(c.header) for c in cols) + " |",
            "|" + "|".join("---:" if c.justify == "right" else "---" for c in cols) + "|"]
    cells = [list(c.cells) for c in cols]
    for i in range(table.row_count):
        out.append("| " + " | ".join(plain(col[i]) for col in cells) + " |")
    return out


def _atomic_write(path: Path, write: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def write_markdown(out: Path, stem: str, title: str, header: str, body: Sequence[str]) -> Path:
    check_clean(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.md"
    text = "\n".join([f"# {title}", "", header, "", *body]).rstrip() + "\n"
    _atomic_write(path, lambda p: p.write_text(text, encoding="utf-8"))
    return path


def save_figure(fig: Any, out: Path, stem: str, dpi: int = 120) -> Path:
    import matplotlib.pyplot as plt

    check_clean(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.png"
    _atomic_write(path, lambda p: fig.savefig(p, format="png", dpi=dpi, bbox_inches="tight"))
    plt.close(fig)
    return path


def cost_model(gpu: str, params: str) -> str:
    """The simulated engine's roofline cost model, with the numbers it prices steps by."""
    from loopwire.inference.cost_model import CostModel

    c = CostModel.named(gpu, params)
    g = c.gpu
    return (f"roofline (`loopwire.inference.cost_model`): {g.name.upper()} {g.bf16_tflops:g} BF16 TFLOP/s × "
            f"{g.compute_efficiency:g} achieved, {g.hbm_tb_per_s:g} TB/s × {g.bandwidth_efficiency:g}, "
            f"{g.step_overhead_s * 1e6:.0f} µs per step; Llama {params.upper()} "
            f"({c.model.num_params / 1e9:.2f} B params, BF16 weights and KV)")
