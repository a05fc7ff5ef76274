"""bench/task_sets.py: every generated task is decided by its checker alone — done (by the reference
shell solution the generator emits) it passes, untouched it fails — and a seed gives one task set."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("task_sets_under_test", BENCH / "task_sets.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the dataclass looks its module up while it is built
    spec.loader.exec_module(module)
    return module


task_sets = _load()


def _lay_out(ws: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)


def _solve(ws: Path, solution: str) -> str:
    """Run the reference solution in the workspace; its output is the answer (for questions)."""
    done = subprocess.run(["bash", "-c", solution], cwd=ws, capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, (solution, done.stderr)
    return done.stdout


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**63), extra=st.integers(min_value=0, max_value=6))
def test_reference_solution_passes_and_untouched_workspace_fails(seed: int, extra: int) -> None:
    tasks = task_sets.generated(seed, len(task_sets.TEMPLATES) + extra)
    assert len({t.name for t in tasks}) == len(tasks)
    assert len({t.name.split("-", 1)[1] for t in tasks}) == len(task_sets.TEMPLATES)  # each template at least once
    for task in tasks:
        with tempfile.TemporaryDirectory() as done, tempfile.TemporaryDirectory() as untouched:
            _lay_out(Path(done), task.files)
            _lay_out(Path(untouched), task.files)
            answer = _solve(Path(done), task.solution)
            assert task.check(Path(done), answer), (task.name, task.prompt, task.solution, answer)
            assert not task.check(Path(untouched), ""), (task.name, task.prompt)


@given(seed=st.integers(min_value=0, max_value=2**63), k=st.integers(min_value=1, max_value=40))
def test_a_seed_gives_one_task_set(seed: int, k: int) -> None:
    first, second = task_sets.generated(seed, k), task_sets.generated(seed, k)
    assert len(first) == k
    assert [(t.name, t.prompt, t.files, t.solution) for t in first] == \
        [(t.name, t.prompt, t.files, t.solution) for t in second]


def test_answers_naming_a_wrong_file_or_value_fail() -> None:
    """A question's checker wants the right names and none of the others, so listing everything fails."""
    for seed in range(15):
        for task in task_sets.generated(seed, len(task_sets.TEMPLATES)):
            if task.name.endswith(("search", "list-ext", "read-value", "first-line")):
                with tempfile.TemporaryDirectory() as ws:
                    _lay_out(Path(ws), task.files)
                    everything = _solve(Path(ws), "ls; cat *")
                    assert not task.check(Path(ws), everything), (task.name, task.prompt, everything)
