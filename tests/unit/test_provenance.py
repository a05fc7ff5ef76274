"""bench/provenance.py records committed results only from a clean tree (or with --allow-dirty, marked dirty)."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def prov(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh copy of the module whose repository is a scratch git checkout with one commit."""
    spec = importlib.util.spec_from_file_location("provenance_under_test", BENCH / "provenance.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "provenance_under_test", module)
    spec.loader.exec_module(module)

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "old.md").write_text("# old\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "base")
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "RECORDED_RESULTS", tmp_path / "bench" / "results")
    module.git_commit.cache_clear()
    return module


def parser_for(prov: ModuleType) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    prov.add_out_argument(parser)
    return parser


def test_a_clean_tree_records(prov: ModuleType) -> None:
    results = prov.RECORDED_RESULTS
    assert "dirty" not in prov.git_commit()
    args = parser_for(prov).parse_args(["--out", str(results)])
    path = prov.write_markdown(args.out, "x", "X", prov.provenance("d"), ["body"])
    assert path == results / "x.md" and "dirty" not in path.read_text()


def test_results_written_earlier_do_not_make_the_tree_dirty(prov: ModuleType) -> None:
    """`make bench-record` runs one benchmark after another: each one's results are not a change."""
    (prov.RECORDED_RESULTS / "old.md").write_text("# rewritten\n")
    (prov.RECORDED_RESULTS / "new.png").write_bytes(b"png")
    assert prov.changed_paths() == [] and "dirty" not in prov.git_commit()


def test_a_dirty_tree_is_refused_before_the_benchmark_runs(prov: ModuleType) -> None:
    (prov.ROOT / "code.py").write_text("x = 2\n")
    (prov.ROOT / "new_file.py").write_text("")
    with pytest.raises(SystemExit) as refused:
        parser_for(prov).parse_args(["--out", str(prov.RECORDED_RESULTS)])
    message = str(refused.value)
    assert "\n" not in message and "2 changed or untracked path(s)" in message
    assert "commit" in message and "--allow-dirty" in message
    # The writers refuse too (a caller that did not parse with add_out_argument).
    with pytest.raises(SystemExit):
        prov.write_markdown(prov.RECORDED_RESULTS, "x", "X", "header", [])
    assert not (prov.RECORDED_RESULTS / "x.md").exists()


def test_allow_dirty_records_and_the_header_says_dirty(prov: ModuleType) -> None:
    (prov.ROOT / "code.py").write_text("x = 2\n")
    args = parser_for(prov).parse_args(["--out", str(prov.RECORDED_RESULTS), "--allow-dirty"])
    assert args.allow_dirty is True
    path = prov.write_markdown(args.out, "x", "X", prov.provenance("d"), ["body"])
    assert "dirty (1 changed or untracked path(s))" in path.read_text()


def test_elsewhere_any_tree_writes(prov: ModuleType, tmp_path: Path) -> None:
    """`make bench` writes to .state/bench/ (untracked) whatever the tree."""
    (prov.ROOT / "code.py").write_text("x = 2\n")
    out = prov.ROOT / ".state" / "bench"
    args = parser_for(prov).parse_args(["--out", str(out)])
    path = prov.write_markdown(args.out, "x", "X", prov.provenance("d"), ["body"])
    assert "dirty" in path.read_text()


def test_no_git_commit_is_refused(prov: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prov, "_git", lambda *args, **kwargs: "")
    prov.git_commit.cache_clear()
    with pytest.raises(SystemExit, match="no git commit"):
        prov.check_clean(prov.RECORDED_RESULTS)
