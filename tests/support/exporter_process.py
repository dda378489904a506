"""`shmguard exporter` run as its own process from this tree, and what waiting for one takes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from typing import Iterator

from tests.support.paths import CHECKOUT

WAIT = 120  # seconds: generous bounds on a busy machine, never a timing assertion


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(url: str, proc: subprocess.Popen, why=lambda: "", timeout: float = WAIT) -> None:
    """Until url answers 200 (AssertionError when proc exits first or the time is up, with why())."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{url} never answered: {why()}")
        time.sleep(0.2)


@contextmanager
def exporter(*args: str, env: dict | None = None) -> Iterator[int]:
    """`shmguard exporter` from this tree on a free port; yields the port; stopped (SIGTERM, exit 0) after."""
    environment = {**os.environ, "PYTHONPATH": str(CHECKOUT), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "shmguard", "exporter", "--address", "127.0.0.1", "--port", "0",
                             *args], stderr=subprocess.PIPE, text=True, env=environment, cwd=CHECKOUT)
    try:
        line = proc.stderr.readline()
        assert "serving http://127.0.0.1:" in line, line + proc.stderr.read() if proc.poll() is not None else line
        yield int(line.split("127.0.0.1:")[1].split("/")[0])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
        proc.stderr.close()
