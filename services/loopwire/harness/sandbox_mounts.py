"""What a sandboxed command sees, as bubblewrap arguments: the host's system directories bound read-only,
a generated /etc, the fixed environment, the host uid range it runs as, and the descriptors (``Spawn``) a
prepared bwrap is handed. ``Sandbox._prepare`` assembles the whole command line from these."""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
_PATH = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"
SANDBOX_UID = SANDBOX_GID = 1000
SANDBOX_USER = "sandbox"
# The host uids/gids sandboxed commands run as when the harness is root (no account needed): one
# per tenant from this range (--sandbox-uid-base/--sandbox-uid-count).
SANDBOX_UID_BASE = 61000
SANDBOX_UID_COUNT = 1000
# Moves the shell into a cgroup (as root, before setpriv drops the uid), then runs the rest.
JOIN_CGROUP = 'echo 0 > "$1" || exit 126; shift; exec "$@"'
# What of the host's /etc a build needs and that holds no secret: dynamic linker, Debian's
# alternatives symlinks, CA certificates, time zone, services/protocols, interpreter configs.
_ETC_FROM_HOST = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone",
                  "protocols", "services", "mime.types", "magic", "magic.mime", "ssl/certs", "ssl/openssl.cnf",
                  "ca-certificates", "ca-certificates.conf", "gai.conf", "host.conf", "inputrc", "os-release",
                  "debian_version", "xattr.conf", "terminfo", "perl", "python3*", "java-*", "gitconfig")
_NSSWITCH = b"passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n" \
            b"protocols: files\nservices: files\n"


def system_python() -> str:
    """The system's python3 (for a session's supervisor) when the sandbox sees it where the
    host does, under a system directory it binds; '' when there is none."""
    found = shutil.which("python3", path=_PATH) or ""
    real = os.path.realpath(found) if found else ""
    return found if any(real.startswith(d + "/") for d in SYSTEM_DIRS) else ""


@functools.cache
def supervisor_source() -> str:
    return (Path(__file__).parent / "sandbox_supervisor.py").read_text()


def command_env(home: str) -> dict[str, str]:
    """The whole environment of a sandboxed command: nothing of the harness's."""
    return {"PATH": _PATH, "HOME": home, "LANG": "C.UTF-8", "USER": SANDBOX_USER, "LOGNAME": SANDBOX_USER,
            "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"}


@dataclass
class Spawn:
    argv: list[str]
    fds: list[int] = field(default_factory=list)  # passed to the child, closed once it started
    # Our ends of bwrap's --info-fd (it tells the sandbox's pid) and --block-fd (the command
    # waits for "go" on it): nothing runs before the harness knows the pid it must kill.
    info_r: int = -1
    block_w: int = -1
    workspace: str = ""

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()

    def close_ours(self) -> None:
        for fd in (self.info_r, self.block_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.info_r = self.block_w = -1

    def data_fd(self, data: bytes) -> int:
        fd = os.memfd_create("loopwire-sandbox-file")
        self.fds.append(fd)
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd

def etc_args(spawn: Spawn, home: str) -> list[str]:
    """A tmpfs /etc holding only generated account and name-service files plus harmless
    host configuration, then made read-only. No resolv.conf: a command resolves nothing
    itself; the egress proxy resolves the names it is asked for."""
    files = {
        "passwd": f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:{SANDBOX_USER}:{home}:/bin/bash\n"
                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n".encode(),
        "group": f"{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n".encode(),
        "hosts": b"127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "hostname": b"sandbox\n",
        "nsswitch.conf": _NSSWITCH,
    }
    args = ["--size", str(16 << 20), "--tmpfs", "/etc"]
    for name, data in files.items():
        args += ["--perms", "0644", "--file", str(spawn.data_fd(data)), f"/etc/{name}"]
    for pattern in _ETC_FROM_HOST:
        for src in sorted(glob.glob(f"/etc/{pattern}")):
            if os.path.islink(src):
                args += ["--symlink", os.readlink(src), src]
            elif os.path.exists(src):
                args += ["--ro-bind", src, src]
    return [*args, "--remount-ro", "/etc"]
