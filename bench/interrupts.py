"""No orphaned services after Ctrl-C or ``kill``: SIGTERM (and SIGHUP) become KeyboardInterrupt, so
every ``finally`` runs, and every mesh started through :func:`start_mesh` is stopped on the way out.

The services run in their own sessions (``loopwire.mesh`` starts them with
``start_new_session=True``), so a Ctrl-C in the terminal reaches only the benchmark: it must
stop them itself.
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from loopwire import mesh as _mesh

_live: dict[int, _mesh.Mesh] = {}  # by id(): Mesh is an unhashable dataclass
_lock = threading.Lock()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def install() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, and so does SIGINT even where
    the shell started us with it ignored (``cmd &`` in a script), so ``kill -INT`` works too."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def start_mesh(state_dir: Path, **kwargs: Any) -> _mesh.Mesh:
    """``loopwire.mesh.start_mesh``, remembered until :func:`stop` (safe to call from a worker thread:
    an interrupt while it starts leaves the mesh registered, and :func:`stop_all` stops it)."""
    mesh = _mesh.start_mesh(state_dir, **kwargs)
    with _lock:
        _live[id(mesh)] = mesh
    return mesh


def stop(mesh: _mesh.Mesh) -> None:
    mesh.stop()
    with _lock:
        _live.pop(id(mesh), None)


def stop_all() -> None:
    """Stop every mesh still running; a second Ctrl-C meanwhile does not cut the cleanup short."""
    with _lock:
        meshes = list(_live.values())
    if not meshes:
        return
    in_main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    try:
        for mesh in meshes:
            stop(mesh)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)


atexit.register(stop_all)


def main(fn: Any) -> int:
    """Run a benchmark's ``main``; on Ctrl-C or SIGTERM stop what it started and exit 130, no traceback."""
    install()
    try:
        return int(fn() or 0)
    except KeyboardInterrupt as e:
        stop_all()
        print(f"\ninterrupted ({str(e) or 'SIGINT'}); services stopped", file=sys.stderr)
        return 130
    finally:
        stop_all()
