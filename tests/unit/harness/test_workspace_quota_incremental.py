"""The session quota's usage kept from inotify events equals a full walk (``usage()``, the old path)
after any sequence of changes, and falls back to a full walk when the events cannot tell."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from itertools import cycle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from loopwire.harness import workspace_usage
from loopwire.harness.workspace_quota import SessionQuota
from loopwire.harness.workspace_usage import UsageTree, usage

NAMES = st.sampled_from(["a", "b", "c", "d", "e", "sub", "x" * 120])  # collisions on purpose; long names
SIZES = st.sampled_from([0, 1, 100, 4096, 4097, 20000, 70000])


class Draws:
    """A rule's choices, all drawn before it runs (used in turn, over again if a rule wants more):
    what a rule draws never depends on the files it finds, so replaying an example meets the same
    draws (hypothesis rejects draws shaped by the state)."""

    def __init__(self, picks: list[int], flags: list[bool], names: list[str], sizes: list[int]) -> None:
        self._picks, self._flags, self._names, self._sizes = cycle(picks), cycle(flags), cycle(names), cycle(sizes)

    def pick(self, items: Sequence[Path]) -> Path:
        return items[next(self._picks) % len(items)]

    def flag(self) -> bool:
        return next(self._flags)

    def name(self) -> str:
        return next(self._names)

    def size(self) -> int:
        return next(self._sizes)


DRAWS = st.builds(Draws, st.lists(st.integers(0, 2**16), min_size=4, max_size=4),
                  st.lists(st.booleans(), min_size=2, max_size=2), st.lists(NAMES, min_size=3, max_size=3),
                  st.lists(SIZES, min_size=3, max_size=3))


def full_walk(top: int) -> int:
    return usage(top, lambda fd: None)


def everything(root: Path) -> tuple[list[Path], list[Path]]:
    """The files (anything not a directory) and the directories below ``root`` (root included)."""
    files, dirs = [], [root]
    for parent, dirnames, filenames in os.walk(root):
        dirs.extend(Path(parent, d) for d in dirnames if not os.path.islink(os.path.join(parent, d)))
        files.extend(Path(parent, f) for f in filenames)
        files.extend(Path(parent, d) for d in dirnames if os.path.islink(os.path.join(parent, d)))
    return sorted(files), sorted(dirs)


class Workspace(RuleBasedStateMachine):
    """Random file operations in a temporary directory; after each batch the kept total is checked."""

    @initialize()
    def start(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="quota-"))
        self.top = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        self.tree = UsageTree()
        assert self.tree.measure(self.top) == full_walk(self.top)
        self.pending = False

    def teardown(self) -> None:
        if not hasattr(self, "tree"):
            return
        try:
            if self.pending:  # the last batch
                self.check()
        finally:  # an inotify instance left open each failing example would use up the user's limit
            self.tree.close()
            os.close(self.top)
            shutil.rmtree(self.root)

    def files(self) -> list[Path]:
        return everything(self.root)[0]

    def dirs(self) -> list[Path]:
        return everything(self.root)[1]

    def _target(self, data: Draws) -> Path:
        return data.pick(self.dirs()) / data.name()

    def _done(self) -> None:
        self.pending = True

    @rule(data=DRAWS, size=SIZES)
    def create(self, data: Draws, size: int) -> None:
        path = self._target(data)
        if not path.is_dir():
            path.unlink(missing_ok=True)
            path.write_bytes(b"x" * size)
        self._done()

    @rule(data=DRAWS, size=SIZES)
    def append(self, data: Draws, size: int) -> None:
        files = [f for f in self.files() if f.is_file() and not f.is_symlink()]
        if files:
            with open(data.pick(files), "ab") as f:
                f.write(b"y" * size)
        self._done()

    @rule(data=DRAWS, size=SIZES)
    def truncate(self, data: Draws, size: int) -> None:
        files = [f for f in self.files() if f.is_file() and not f.is_symlink()]
        if files:
            os.truncate(data.pick(files), size)  # larger: sparse, no blocks
        self._done()

    @rule(data=DRAWS)
    def delete(self, data: Draws) -> None:
        if files := self.files():
            data.pick(files).unlink()
        self._done()

    @rule(data=DRAWS, depth=st.integers(1, 3))
    def mkdir(self, data: Draws, depth: int) -> None:
        path = self._target(data)
        for _ in range(depth - 1):
            path = path / data.name()
        with contextlib.suppress(FileExistsError, NotADirectoryError):
            path.mkdir(parents=True)
            for level in (path, *path.parents):  # a file at each level
                if level == self.root:
                    break
                with contextlib.suppress(OSError):
                    (level / "f").write_bytes(b"z" * data.size())
        self._done()

    @rule(data=DRAWS)
    def rmtree(self, data: Draws) -> None:
        if dirs := self.dirs()[1:]:
            shutil.rmtree(data.pick(dirs))
        self._done()

    @rule(data=DRAWS)
    def rename_file(self, data: Draws) -> None:
        files, target = self.files(), self._target(data)
        if files:
            with contextlib.suppress(OSError):  # onto a directory
                os.rename(data.pick(files), target)  # may replace a file
        self._done()

    @rule(data=DRAWS)
    def rename_dir(self, data: Draws) -> None:
        dirs = self.dirs()[1:]
        nested = [d for d in dirs if any(other.parent == d for other in dirs)]
        if dirs:  # often one with a subtree
            source = data.pick(nested if nested and data.flag() else dirs)
            parent = data.pick([d for d in self.dirs() if not d.is_relative_to(source)])
            target = parent / data.name()
            if os.path.lexists(target) and data.flag():
                target = parent / f"{target.name}-moved"
            with contextlib.suppress(OSError):  # onto a file or a directory not empty
                os.rename(source, target)  # may replace an empty directory
        self._done()

    @rule(data=DRAWS)
    def hard_link(self, data: Draws) -> None:
        files, target = [f for f in self.files() if not f.is_symlink()], self._target(data)
        if files and not os.path.lexists(target):
            os.link(data.pick(files), target)  # often into another directory
        self._done()

    @rule(data=DRAWS)
    def symlink(self, data: Draws) -> None:
        target = self._target(data)
        if not os.path.lexists(target):
            pointee = data.pick([*self.dirs(), *self.files(), Path("/usr"), Path("nowhere")])
            os.symlink(pointee, target)  # to a directory too: never followed
        self._done()

    @rule(data=DRAWS, n=st.integers(50, 150))
    def many(self, data: Draws, n: int) -> None:
        directory = data.pick(self.dirs())
        for i in range(n):  # enough long names to make the directory itself grow on ext4
            (directory / f"many-{i}-{'m' * 100}").touch()
        self._done()

    @precondition(lambda self: self.pending)
    @rule()
    def check(self) -> None:
        assert self.tree.measure(self.top) == full_walk(self.top)
        self.pending = False

    @invariant()
    def never_walked_whole_again(self) -> None:
        if hasattr(self, "tree"):  # no change raced a check, nothing overflowed: events told everything
            assert self.tree.walks == 1 and self.tree.exact


TestWorkspace = Workspace.TestCase
TestWorkspace.settings = settings(max_examples=150, stateful_step_count=30, deadline=None, database=None,
                                  suppress_health_check=[HealthCheck.too_slow])


# --- the paths around it ------------------------------------------------------------------------


@pytest.fixture
def top(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def test_moves_links_and_deletes_of_nested_directories(tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    top = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    tree = UsageTree()
    tree.measure(top)

    def shell(*steps: str) -> None:
        for step in steps:
            assert os.system(f"cd {ws} && {step}") == 0, step
            assert tree.measure(top) == full_walk(top), step
            assert tree.walks == 1, f"walked whole after {step}"

    shell("mkdir -p a/b/c x && head -c 30000 /dev/zero > a/b/c/f && head -c 9000 /dev/zero > a/b/g",
          "ln a/b/c/f x/h",  # a second name in another directory: counted once
          "mv a/b y",  # a directory with a subtree, moved within the workspace
          "mv y/c a/c2 && head -c 5000 /dev/zero >> a/c2/f",
          "rm x/h",
          f"mv y {outside}/",  # moved out: no longer counted (nor watched)
          f"head -c 50000 /dev/zero > {outside}/y/more",
          "for i in $(seq 150); do touch a/long-name-$i-$(printf 'n%.0s' $(seq 100)); done",  # a grows
          "ln -s /usr a/usr && ln -s a/c2 link",  # never followed
          "mkdir -p a/c2/d/e/f && rm -r a/c2",  # a new subtree, gone before the check
          "rm -r a",
          "mkdir a && mkdir a/b && head -c 7000 /dev/zero > a/b/f")  # the same names again
    tree.close()
    os.close(top)


def test_nothing_changed_reads_no_directory(tmp_path, top, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 10000)
    tree = UsageTree()
    assert tree.measure(top) == full_walk(top) > 0
    assert not tree.changed()
    expected = full_walk(top)
    monkeypatch.setattr(os, "scandir", lambda *a: pytest.fail("listed a directory with no event"))
    assert tree.measure(top) == expected
    tree.close()


def test_an_overflow_walks_the_workspace_whole(tmp_path, top):
    tree = UsageTree()
    tree.measure(top)
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip(f"max_queued_events is {limit}")
    for i in range(limit // 2 + 100):  # each makes IN_CREATE and IN_CLOSE_WRITE: past the queue's length
        os.close(os.open(tmp_path / f"f{i}", os.O_WRONLY | os.O_CREAT))
    (tmp_path / "big").write_bytes(b"x" * 50000)
    assert tree.changed()
    assert tree.measure(top) == full_walk(top) and tree.walks == 2 and tree.exact
    (tmp_path / "more").write_bytes(b"x" * 50000)  # and after the walk, followed from events again
    assert tree.measure(top) == full_walk(top) and tree.walks == 2
    tree.close()


def test_an_overflow_event_read_walks_whole(tmp_path, top, monkeypatch):
    tree = UsageTree()
    tree.measure(top)
    (tmp_path / "f").write_bytes(b"x" * 9000)
    monkeypatch.setattr(tree, "_events", lambda: [(-1, workspace_usage._IN_Q_OVERFLOW)])
    assert tree.measure(top) == full_walk(top) and tree.walks == 2
    tree.close()


def test_a_directory_not_where_it_was_walks_whole(tmp_path, top):
    (tmp_path / "a" / "b").mkdir(parents=True)
    tree = UsageTree()
    tree.measure(top)
    b = next(wd for wd, node in tree._wds.items() if node.name == "b")
    os.rename(tmp_path / "a" / "b", tmp_path / "b")
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "a" / "b" / "f").write_bytes(b"x" * 9000)
    # As if only the old a/b's event had come: a/b is another directory now, the tree cannot tell why.
    tree._events = lambda: [(b, workspace_usage._IN_MODIFY)]  # type: ignore[method-assign]
    assert tree.measure(top) == full_walk(top) and tree.walks == 2
    tree.close()


def test_without_inotify_every_check_walks(tmp_path, top, monkeypatch):
    tree = UsageTree()
    tree.exact = False
    (tmp_path / "f").write_bytes(b"x" * 9000)
    assert tree.changed() and tree.measure(top) == full_walk(top)
    (tmp_path / "g").write_bytes(b"x" * 9000)
    assert tree.changed() and tree.measure(top) == full_walk(top) and tree.walks == 2


def test_the_watch_limit_turns_to_walking_every_time(tmp_path, top, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x" * 9000)
    real = workspace_usage._libc

    class Limited:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def inotify_add_watch(fd, path, mask):
            return -1

    monkeypatch.setattr(workspace_usage, "_libc", Limited())
    tree = UsageTree()
    assert tree.measure(top) == full_walk(top) and not tree.exact and tree.changed()
    (tmp_path / "g").write_bytes(b"x" * 9000)
    assert tree.measure(top) == full_walk(top)


def test_a_write_through_a_link_in_an_unchanged_directory_counts_once(tmp_path, top):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 5000)
    tree = UsageTree()
    tree.measure(top)
    os.link(tmp_path / "a" / "f", tmp_path / "b" / "g")  # no event in a: its link count is the inode's
    assert tree.measure(top) == full_walk(top)
    with open(tmp_path / "b" / "g", "ab") as f:  # the inode grows; a has no event, b has
        f.write(b"y" * 50000)
    assert tree.measure(top) == full_walk(top)
    (tmp_path / "b" / "g").unlink()
    assert tree.measure(top) == full_walk(top) and tree.walks == 1
    tree.close()


async def test_a_session_quota_follows_changes_without_walking_whole(tmp_path, monkeypatch):
    walks = []
    monkeypatch.setattr(workspace_usage, "usage", lambda *a: walks.append(1) or usage(*a))
    (tmp_path / "src").mkdir()
    recorded = []
    quota = SessionQuota(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY), 1 << 20, 60, None, recorded.append)
    try:
        await quota.settled()
        assert quota.used == full_walk(quota.dir_fd) and recorded == [quota.used]
        (tmp_path / "src" / "big").write_bytes(b"x" * 2_000_000)
        await quota.settled()
        assert quota.used == full_walk(quota.dir_fd) > quota.quota
        command = quota.watch(lambda: None)
        assert "over its quota" in command.note()
        command.stop()
        await command.done
        (tmp_path / "src" / "big").unlink()
        await quota.settled()
        assert quota.used == full_walk(quota.dir_fd) < quota.quota and recorded[-1] == quota.used
        assert quota._tree.walks == 1 and not walks  # one walk at the start, the rest from the events
    finally:
        quota.close()
        await asyncio.sleep(0.05)


async def test_a_command_that_wrote_nothing_ends_its_check_at_once(tmp_path, monkeypatch):
    """No event since the last check: the command's last check is done when it stops, with no
    worker thread; after a write it measures, and the usage follows."""
    quota = SessionQuota(os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY), 1 << 20, 60, None)
    try:
        await quota.settled()
        measured = []
        monkeypatch.setattr(quota, "measure", lambda real=quota.measure: measured.append(1) or real())
        idle = quota.watch(lambda: None)
        idle.stop()
        assert idle.done.done() and not measured
        writer = quota.watch(lambda: None)
        (tmp_path / "new").write_bytes(b"x" * 100_000)
        writer.stop()
        assert not writer.done.done()
        await writer.done
        assert measured == [1] and quota.used == full_walk(quota.dir_fd)
    finally:
        quota.close()
        await asyncio.sleep(0.05)
