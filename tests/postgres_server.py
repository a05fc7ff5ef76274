"""A real PostgreSQL server for the session-store tests: Debian's initdb + pg_ctl, run as an
unprivileged user (initdb refuses root) in a temporary directory, on a free loopback port.

One server per test process (``shared()``), one fresh database per test (``database()``);
a test that stops or restarts the server makes its own (``PostgresServer``).
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from required import missing

from loopwire.mesh import free_port

MISSING = ("PostgreSQL server binaries (initdb, pg_ctl) not found: `make tools` installs Debian's postgresql "
           "(scripts/install_tools.sh)")


def bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


class PostgresServer:
    def __init__(self) -> None:
        bins = bin_dir()
        if bins is None:
            missing(MISSING)
        self.bins = bins
        self.root = Path(tempfile.mkdtemp(prefix="loopwire-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.user = None
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            self.user = "postgres" if _user_exists("postgres") else "nobody"
            os.chown(self.root, pwd.getpwnam(self.user).pw_uid, pwd.getpwnam(self.user).pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "loopwire", "--auth=trust", "-E", "UTF8", "--no-sync")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self._as_user(), str(self.bins / tool), *args], cwd=self.root,
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stdout}{done.stderr}{log[-2000:]}")

    def _as_user(self) -> list[str]:
        """setpriv, not subprocess's user=: changing uid between fork and exec of a process with
        threads can crash the child (seen as pg_ctl dying of SIGSEGV from a test's thread)."""
        if self.user is None:
            return []
        entry = pwd.getpwnam(self.user)
        return ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups", "--"]

    def _ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100"
        self._run("pg_ctl", action, "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options, *extra)

    def start(self) -> None:
        self._ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("stop", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self._ctl("restart", "-m", mode)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://loopwire@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def close(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except RuntimeError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


_shared: PostgresServer | None = None


def shared() -> PostgresServer:
    """The process's server, started on first use and stopped at exit."""
    global _shared
    if _shared is None:
        _shared = PostgresServer()
        atexit.register(_shared.close)
    return _shared
