"""A workspace's disk usage, followed with inotify instead of walked again (``UsageTree``), and
the whole walk it replaces (``usage``). ``workspace_quota`` checks a session's commands with it.

The walk puts an inotify watch on every directory (before listing it: what changes after the
listing comes as an event) and keeps, per directory, what its own entries use: its files' inodes
(one table for the whole workspace, so that a file with several links counts once from whichever
directory it is seen) and its subdirectories' own blocks. The sum is what ``usage()``, the full
walk, counts: st_blocks * 512 of everything below the top, no link followed. Events name the
directories whose entries changed; only those are listed again: a new subdirectory is walked
whole, one that went away (deleted, moved, its watch gone) is dropped with everything below it.
What the events cannot tell is walked again whole: a queue overflow, a directory not found where
it was recorded (a change racing the check). Without inotify (no instance left, the watch limit
reached) every check walks, as ``usage()``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import stat
import struct
import threading
from collections.abc import Callable, Iterator

# inotify(7): what changes a directory's entries or a file's size.
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE, _IN_MOVED_FROM, _IN_MOVED_TO = 0x2, 0x4, 0x8, 0x40, 0x80
_IN_CREATE, _IN_DELETE, _IN_DELETE_SELF, _IN_MOVE_SELF, _IN_ONLYDIR = 0x100, 0x200, 0x400, 0x800, 0x01000000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
         | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR)
_IN_Q_OVERFLOW, _IN_IGNORED = 0x4000, 0x8000  # sent without asking: events lost; a watch removed
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED  # the watched directory is no longer where it was
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
_libc = ctypes.CDLL(None, use_errno=True)


_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def usage(top: int, watch: Callable[[int], object]) -> int:
    """Bytes allocated below the open directory ``top``, as ``tenant_limits.disk_usage`` counts
    them, calling ``watch`` with each directory before listing it: what changes after the
    listing comes as an event. The reference of what UsageTree keeps: a walk of everything."""
    total, seen = 0, set()
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []

    def enter(fd: int) -> None:
        try:
            watch(fd)
            stack.append((fd, os.scandir(fd)))
        except OSError:
            os.close(fd)

    enter(os.open(".", _O_DIR, dir_fd=top))
    while stack:
        fd, entries = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            os.close(fd)
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(OSError):
                enter(os.open(entry.name, _O_DIR, dir_fd=fd))
        elif st.st_nlink > 1:
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
    return total


_Key = tuple[int, int]  # (st_dev, st_ino)


def _blocks(st: os.stat_result) -> int:
    return st.st_blocks * 512


class _Fallback(Exception):
    """What the events say cannot be followed (an overflow, a directory not where it was): walk whole."""


class _Dir:
    """A directory of the workspace as last listed: where it is, and what its own entries use."""

    __slots__ = ("parent", "name", "key", "blocks", "wd", "files", "dirs", "alive")

    def __init__(self, parent: _Dir | None, name: str, key: _Key, blocks: int) -> None:
        self.parent, self.name, self.key = parent, name, key
        self.blocks = blocks  # its own st_blocks * 512, counted as an entry of its parent (0 for the top)
        self.wd = -1  # its inotify watch; -1: it could not be opened, nothing below it is counted
        self.files: dict[str, _Key] = {}  # its entries that are not directories, by name
        self.dirs: dict[str, _Dir] = {}  # its subdirectories, by name
        self.alive = True  # False once dropped from the tree

    def depth(self) -> int:
        n, node = 0, self.parent
        while node is not None:
            n, node = n + 1, node.parent
        return n


class UsageTree:
    """The workspace's usage, kept from inotify's events (see the module docstring).

    Used under SessionQuota's ``_walking`` lock, one thread at a time; ``_lock`` guards only the
    inotify descriptor, which ``changed`` polls from the event loop while a check may replace it."""

    def __init__(self) -> None:
        self.fd = -1  # the inotify instance: one per whole walk, so a walk starts with no stale watch
        self.exact = True  # False: inotify cannot follow this workspace, every check walks (usage())
        self.total = 0
        self.walks = 0  # whole walks made (the first, and each fallback)
        self._root: _Dir | None = None  # None: not walked yet, or a check failed midway
        self._wds: dict[int, _Dir] = {}
        self._inodes: dict[_Key, list[int]] = {}  # a file's inode: [its names in the tree, its blocks]
        self._lock = threading.Lock()

    def changed(self) -> bool:
        """Whether a check could find anything new: events wait (or inotify cannot tell)."""
        with self._lock:
            if not self.exact or self.fd < 0:
                return True
            poll = select.poll()
            poll.register(self.fd, select.POLLIN)
            return bool(poll.poll(0))

    def measure(self, top: int) -> int:
        """The usage below the open directory ``top`` now: from the events if they tell, else walked."""
        if self.exact and self._root is not None:
            try:
                self._update(top)
                return self.total
            except Exception:  # _Fallback, or an error midway that leaves the tree unsure
                self._root = None
        return self._walk(top)

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
            self.fd, self.exact, self._root = -1, False, None

    # --- a whole walk ---

    def _walk(self, top: int) -> int:
        """Walk the whole workspace into a fresh tree, watching each directory with a fresh instance."""
        self.walks += 1
        self._root, self.total, self._wds, self._inodes = None, 0, {}, {}
        if self.exact:
            fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            with self._lock:
                if self.fd >= 0:
                    os.close(self.fd)  # and with it every watch of the last walk
                self.fd, self.exact = fd, fd >= 0
        if self.exact:
            root_fd = os.open(".", _O_DIR, dir_fd=top)
            try:
                st = os.fstat(root_fd)
                root = _Dir(None, "", (st.st_dev, st.st_ino), 0)
                self._fill(root, root_fd)  # closes root_fd
                self._root = root
                return self.total
            except _Fallback:  # the watch limit (or one directory twice): inotify cannot follow it
                self.close()
        return usage(top, lambda fd: None)

    def _fill(self, node: _Dir, fd: int) -> None:
        """Watch and list the directory ``node`` just found (open as ``fd``, closed here) and all below it,
        as usage() does: the watch first, then the listing, one open directory per level."""
        stack: list[tuple[_Dir, int, os._ScandirIterator[str]]] = []

        def enter(node: _Dir, fd: int) -> None:
            try:
                node.wd = self._watch(fd)
                self._wds[node.wd] = node
                stack.append((node, fd, os.scandir(fd)))
            except BaseException:
                os.close(fd)
                raise

        with contextlib.suppress(OSError):
            enter(node, fd)
        try:
            while stack:
                node, fd, entries = stack[-1]
                entry = next(entries, None)
                if entry is None:
                    stack.pop()
                    entries.close()
                    os.close(fd)
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    child = self._add_dir(node, entry.name, st)
                    with contextlib.suppress(OSError):
                        enter(child, os.open(entry.name, _O_DIR, dir_fd=fd))
                else:
                    key = (st.st_dev, st.st_ino)
                    node.files[entry.name] = key
                    self._link(key, _blocks(st))
        finally:
            for _, fd, entries in stack:
                entries.close()
                os.close(fd)

    def _watch(self, fd: int) -> int:
        wd = _libc.inotify_add_watch(self.fd, f"/proc/self/fd/{fd}".encode(), _MASK)
        if wd < 0 or wd in self._wds:  # the watch limit; or a directory watched already, elsewhere
            raise _Fallback
        return wd

    def _add_dir(self, parent: _Dir, name: str, st: os.stat_result) -> _Dir:
        child = _Dir(parent, name, (st.st_dev, st.st_ino), _blocks(st))
        parent.dirs[name] = child
        self.total += child.blocks
        return child

    def _link(self, key: _Key, blocks: int) -> None:
        """One more name of a file's inode, its blocks as just seen (the inode's, whichever name)."""
        inode = self._inodes.get(key)
        if inode is None:
            self._inodes[key] = [1, blocks]
            self.total += blocks
        else:
            inode[0] += 1
            self.total += blocks - inode[1]
            inode[1] = blocks

    def _unlink(self, key: _Key) -> None:
        inode = self._inodes[key]
        inode[0] -= 1
        if not inode[0]:
            del self._inodes[key]
            self.total -= inode[1]

    # --- a check from the events ---

    def _update(self, top: int) -> None:
        """Follow the events waiting: list again each directory that had one, parents first."""
        dirty: set[_Dir] = set()
        for wd, mask in self._events():
            if wd < 0 or mask & _IN_Q_OVERFLOW:
                raise _Fallback  # events were lost
            node = self._wds.get(wd)
            if node is None:
                continue  # the last events of a watch dropped already
            if mask & _GONE and node.parent is not None:
                dirty.add(node.parent)  # where it was: listed again, it says whether it is still there
                self._drop(node)  # anywhere else it is new, and its new parent has the event for that
            elif mask & _IN_IGNORED:
                raise _Fallback  # the top's own watch is gone
            else:
                dirty.add(node)
        found: dict[_Dir, list[str]] = {}
        for node in sorted(dirty, key=_Dir.depth):  # a directory dropped with its parent is not listed
            if node.alive:
                self._relist(top, node, found)
        for parent, names in found.items():
            if parent.alive:
                self._add_new(top, parent, names)

    def _events(self) -> list[tuple[int, int]]:
        """The events waiting, drained, as (wd, mask): the names are not needed, a directory is listed whole."""
        data = b""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        events, at = [], 0
        while at < len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
            events.append((wd, mask))
            at += _EVENT.size + length
        return events

    def _open(self, top: int, node: _Dir) -> int:
        """``node``'s directory, opened by its path from the top without following a link; _Fallback when
        it is not there (a change the events have not told yet: one racing this check)."""
        names = []
        n = node
        while n.parent is not None:
            names.append(n.name)
            n = n.parent
        fd = os.open(".", _O_DIR, dir_fd=top)
        try:
            for name in reversed(names):
                child = os.open(name, _O_DIR, dir_fd=fd)
                os.close(fd)
                fd = child
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            raise _Fallback from None
        if (st.st_dev, st.st_ino) != node.key:
            os.close(fd)
            raise _Fallback
        return fd

    def _relist(self, top: int, node: _Dir, found: dict[_Dir, list[str]]) -> None:
        """List ``node`` again: its files' blocks as they are now, its own blocks (a directory grows with
        its entries, and no event tells its parent), subdirectories gone dropped, new ones into ``found``."""
        fd = self._open(top, node)
        try:
            if node.parent is not None:
                blocks = _blocks(os.fstat(fd))
                self.total += blocks - node.blocks
                node.blocks = blocks
            files: dict[str, _Key] = {}
            dirs: dict[str, _Dir] = {}
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    key = (st.st_dev, st.st_ino)
                    if not stat.S_ISDIR(st.st_mode):
                        files[entry.name] = key
                        self._link(key, _blocks(st))  # before the old names go: an inode still there stays
                        continue
                    child = node.dirs.get(entry.name)
                    if child is not None and child.key == key and child.wd >= 0:
                        self.total += _blocks(st) - child.blocks
                        child.blocks = _blocks(st)
                        dirs[entry.name] = child
                    else:  # new, or one that could not be opened before: tried again
                        found.setdefault(node, []).append(entry.name)
        finally:
            os.close(fd)
        for key in node.files.values():
            self._unlink(key)
        node.files = files
        for child in list(node.dirs.values()):
            if dirs.get(child.name) is not child:
                self._drop(child)
        node.dirs = dirs

    def _add_new(self, top: int, parent: _Dir, names: list[str]) -> None:
        """Walk whole the subdirectories ``names`` that ``parent`` has now: after every drop of this check,
        so that a directory moved within the workspace gets a watch of its own again."""
        fd = self._open(top, parent)
        try:
            for name in names:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone again: the event for that waits
                if not stat.S_ISDIR(st.st_mode) or name in parent.dirs:
                    continue  # replaced since (an event waits)
                child = self._add_dir(parent, name, st)
                with contextlib.suppress(OSError):
                    self._fill(child, os.open(name, _O_DIR, dir_fd=fd))
        finally:
            os.close(fd)

    def _drop(self, node: _Dir) -> None:
        """Forget ``node`` and everything below it, and stop watching them: gone from where it was."""
        if not node.alive:
            return
        if node.parent is not None and node.parent.dirs.get(node.name) is node:
            del node.parent.dirs[node.name]
        stack = [node]
        while stack:
            n = stack.pop()
            n.alive = False
            self.total -= n.blocks
            for key in n.files.values():
                self._unlink(key)
            if n.wd >= 0 and self._wds.get(n.wd) is n:
                del self._wds[n.wd]
                _libc.inotify_rm_watch(self.fd, n.wd)  # fails, harmlessly, if the kernel removed it already
            stack.extend(n.dirs.values())
