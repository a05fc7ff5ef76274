"""A filesystem of its own per tenant, as large as the workspace quota: a bound the kernel keeps.

Checking a workspace's size while a command runs (``workspace_quota``) stops a command only
after it wrote past the quota, and never one that ends between two checks. Here each tenant's
tree (``<workspace_root>/tenant-<name>``) is instead the mount point of an ext4 image of the
quota's size (``<workspace_root>/.tenant-volumes/<tree>.img``, sparse: it takes on the host disk
what the tenant wrote, plus a few MiB of metadata), loop-mounted nosuid,nodev. Every write of
the tenant -- any number of files, ``fallocate``, parallel commands, the harness's own file tools
-- lands in it, so the tenant's usage never exceeds the quota: a write past it fails with ENOSPC,
and deleting files makes room again. Its usage is one ``statvfs`` (no walk).

The image needs a harness running as root where loop devices can be mounted (``probe``);
elsewhere the quota stays a check. A tree is mounted only while it holds no file (new, or only
the empty directories ``tenant_workspace`` made, which are made again inside the volume):
anything else would be hidden under the mount, so such a tree (made before volumes, or while
they were off) stays checked. Volumes stay mounted while the harness runs and are detached
when it stops (a restart mounts the image again; after a kill it finds them still mounted); a larger quota grows them (ext4 grows
online), a smaller one applies to new tenants only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path

from loopwire.harness.tenant_limits import megabytes

log = logging.getLogger("loopwire.harness")
_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MOUNT_OPTIONS = "loop,nosuid,nodev,noatime"
_DIR_NAME = ".tenant-volumes"
_FULL_BELOW = 1 << 20  # free bytes under which a command's result says the volume is full


def _run(argv: list[str]) -> str:
    """Run a tool; '' or why it failed."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{argv[0]}: {e}"
    if done.returncode != 0:
        return f"{' '.join(argv[:2])}: exit {done.returncode}: {done.stderr.decode(errors='replace').strip()[-300:]}"
    return ""


def _empty_dirs(tree: str) -> list[tuple[str, int, int, int]] | None:
    """(relative path, mode, uid, gid) of every directory below ``tree``, parents first, when it holds
    nothing else; None when it holds a file, a link or anything not a directory."""
    found: list[tuple[str, int, int, int]] = []
    try:
        top = os.open(tree, _O_DIR)
    except FileNotFoundError:
        return found
    try:
        for path, dirnames, filenames, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            if filenames:
                return None
            for name in dirnames:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    return None  # a symlink to a directory is listed among dirnames
                found.append((os.path.normpath(os.path.join(path, name)), stat.S_IMODE(st.st_mode), st.st_uid,
                              st.st_gid))
    finally:
        os.close(top)
    return found


class TenantVolumes:
    """The volumes of the tenants' trees under ``root``, each ``quota`` bytes."""

    def __init__(self, root: Path, quota: int) -> None:
        self.root, self.quota = Path(os.path.realpath(root)), quota
        self.images = self.root / _DIR_NAME
        self.reason = "not probed"  # '' once volumes work here
        self._lock = threading.Lock()
        self._unbounded: set[str] = set()  # trees found holding files before a volume: logged once

    def probe(self) -> str:
        """Make, mount and unmount a small volume; '' when that works (then ``reason`` is '')."""
        self.reason = self._probe()
        return self.reason

    def _probe(self) -> str:
        if self.quota <= 0:
            return "no workspace quota"
        if os.geteuid() != 0:
            return "the harness is not root (mounting a loop device needs it)"
        for tool in ("mount", "umount", "mkfs.ext4"):
            if shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
                return f"{tool} is not installed"
        try:
            self._made()
            image, target = self.images / ".probe.img", self.images / ".probe"
            target.mkdir(exist_ok=True)
            try:
                why = self._mkfs(image, 64 << 20) or _run(["mount", "-o", _MOUNT_OPTIONS, str(image), str(target)])
                if not why:
                    why = _run(["umount", str(target)])
                return why
            finally:
                with contextlib.suppress(OSError):
                    image.unlink()
                with contextlib.suppress(OSError):
                    target.rmdir()
        except OSError as e:
            return f"cannot make {self.images}: {e}"

    @property
    def enabled(self) -> bool:
        return not self.reason

    def _made(self) -> None:
        self.images.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.images, 0o700)  # images hold every tenant's files: the harness's alone

    def _make(self, image: Path) -> str:
        """A new image whose filesystem holds the quota: made once at the quota's size to learn what its
        metadata takes, then again that much larger."""
        if why := self._mkfs(image, self.quota):
            return why
        try:
            said = subprocess.run(["dumpe2fs", "-h", str(image)], capture_output=True, timeout=60, text=True).stdout
            fields = dict(line.split(":", 1) for line in said.splitlines() if ":" in line)
            overhead = int(fields["Overhead clusters"]) * int(fields["Block size"])
        except (OSError, subprocess.TimeoutExpired, KeyError, ValueError):
            return ""  # _fit grows it once mounted
        return self._mkfs(image, self.quota + overhead)

    def _mkfs(self, image: Path, size: int) -> str:
        with open(image, "wb") as f:
            f.truncate(size)
        # No reserved blocks (the tenant is the only user); from 64 MiB on a 4 MiB journal (the default grows with
        # the size, up to 1 GiB, which a sparse image would take from the host disk at once).
        journal = ["-J", "size=4"] if size >= 64 << 20 else []
        return _run(["mkfs.ext4", "-q", "-F", "-m", "0", *journal, "-E", "nodiscard,root_owner=0:0", str(image)])

    def bounded(self, tree: str) -> bool:
        """Whether ``tree`` (a tenant's tree under the root) is a volume: mounted now if it can be."""
        if not self.enabled:
            return False
        if os.path.ismount(tree):
            return True
        with self._lock:
            if os.path.ismount(tree):
                return True
            try:
                return self._mount(tree)
            except OSError as e:
                log.warning("the workspace quota of %s stays a check: its volume cannot be mounted (%s)", tree, e)
                return False

    def _mount(self, tree: str) -> bool:
        if tree in self._unbounded:
            return False
        dirs = _empty_dirs(tree)
        if dirs is None:
            if tree not in self._unbounded:
                self._unbounded.add(tree)
                log.warning("the workspace quota of %s stays a check: it holds files made before its volume", tree)
            return False
        self._made()
        image = self.images / f"{os.path.basename(tree)}.img"
        if not image.exists() and (why := self._make(image)):
            image.unlink(missing_ok=True)
            raise OSError(why)
        with contextlib.suppress(FileExistsError):
            os.mkdir(tree, 0o711)
        if why := _run(["mount", "-o", _MOUNT_OPTIONS, str(image), tree]):
            raise OSError(why)
        self._fit(tree, image)
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(tree, "lost+found"))  # not the tenant's; e2fsck makes it again if it needs one
        top = os.open(tree, _O_DIR)
        try:
            for path, mode, uid, gid in dirs:  # as tenant_workspace made them, before the mount hid them
                with contextlib.suppress(FileExistsError):
                    os.mkdir(path, mode, dir_fd=top)
                os.chown(path, uid, gid, dir_fd=top, follow_symlinks=False)
            if stat.S_IMODE(os.fstat(top).st_mode) == 0o755:  # a new filesystem's root: as tenant_workspace makes the tree
                os.fchmod(top, 0o711)
        finally:
            os.close(top)
        return True

    def _fit(self, tree: str, image: Path) -> None:
        """Grow the volume just mounted until what it can hold is the quota: its metadata (a few percent, and
        a journal) comes on top. Offline (ext4's online growth is refused here for small volumes), before
        anything uses it. A volume larger than a lowered quota keeps its size."""
        for _ in range(3):  # more blocks bring a little more metadata: close enough after a step or two
            missing = self.quota - self.capacity(tree)
            if missing < 1 << 20:
                return
            size = image.stat().st_size + missing
            why = _run(["umount", tree])
            if not why:
                with open(image, "r+b") as f:
                    f.truncate(size)
                why = _run(["e2fsck", "-f", "-p", str(image)]) or _run(["resize2fs", str(image), f"{size // 1024}K"])
                if again := _run(["mount", "-o", _MOUNT_OPTIONS, str(image), tree]):
                    raise OSError(again)
            if why:
                log.warning("the volume of %s holds less than the quota: %s", tree, why)
                return

    def usage(self, tree: str) -> int:
        """Bytes the tenant's volume holds (data and directories; none of its own metadata)."""
        st = os.statvfs(tree)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def capacity(self, tree: str) -> int:
        """Bytes the tenant's volume can hold in all: a little under the quota (its metadata is inside)."""
        st = os.statvfs(tree)
        return st.f_blocks * st.f_frsize


def unmount_below(root: str | os.PathLike[str]) -> None:
    """Unmount every volume mounted below ``root`` (a test's or a benchmark's workspace root, before it
    is removed)."""
    base = os.path.realpath(root) + "/"
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((p for p in points if p.startswith(base)), key=len, reverse=True):
        _run(["umount", "-l", point])


class VolumeQuota:
    """A command's quota note when its tenant's tree is a volume: nothing to check while it runs (the
    filesystem refuses what does not fit); at its end, a note when the volume is (nearly) full."""

    def __init__(self, volumes: TenantVolumes, tree: str) -> None:
        self.volumes, self.tree = volumes, tree
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done.set_result(None)
        self.used: int | None = None

    def stop(self) -> None:
        pass

    def note(self) -> str:
        """What the tool result says about the quota ('' while the volume has room)."""
        try:
            st = os.statvfs(self.tree)
        except OSError:
            return ""
        self.used = (st.f_blocks - st.f_bfree) * st.f_frsize
        if st.f_bavail * st.f_frsize >= _FULL_BELOW:
            return ""
        return (f"[the tenant's workspaces hold {megabytes(self.used)}, all their quota of "
                f"{megabytes(self.volumes.quota)} allows (a filesystem of that size): writes past it fail with "
                "'No space left on device'; delete files to make room]")
