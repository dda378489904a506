"""Helpers for the daemons the integration tests start themselves (the Slurm and Kubernetes clusters): free ports,
stopping a process by pid, the mounts under a folder, and a bounded wait."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Callable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop(pid: int | None, timeout: float = 30) -> None:
    """SIGTERM a daemon we started, wait (bounded), then SIGKILL it and wait for it to go."""
    if not pid or not alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or under path, deepest first (mountinfo field 5; spaces are escaped as \\040 there).
    os.path.ismount would miss a bind mount within one filesystem."""
    prefix = str(path)
    points = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.add(point)
    return sorted(points, key=lambda p: -p.count("/"))


def wait_until(what: str, ready: Callable[[], Any], timeout: float = 180, pause: float = 0.3,
               longest_pause: float = 2.0) -> Any:
    """Poll ready() until it returns something true (bounded; the pause grows by half each time up to
    longest_pause); return that value, or raise AssertionError naming what did not come."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f} s")
        time.sleep(pause)
        pause = min(pause * 1.5, longest_pause)
