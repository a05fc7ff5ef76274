"""Wait for processes to end by what they run, instead of sleeping and hoping: a test gives a
command a unique argument (``sleep 987.123``) and waits until no process on the host has it."""

from __future__ import annotations

import asyncio
import os
import time


def running(marker: str) -> list[int]:
    """The pids whose command line contains ``marker`` (bwrap's too: its argv holds the command)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue  # it ended while we looked
        if any(marker.encode() in arg for arg in args):
            found.append(int(pid))
    return found


async def ended(marker: str, within: float = 30.0) -> bool:
    """True once no process runs with ``marker``; False if some still does after ``within`` s."""
    deadline = time.monotonic() + within
    while running(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True
