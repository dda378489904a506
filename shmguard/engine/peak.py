"""Peaks of quantities that rise and fall faster than anyone looks: sampled in a thread.

/dev/shm use under a DataLoader peaks for milliseconds (a batch in flight), so
`run` and `tune` both sample it (and `tune` the cgroup's memory) in a background
thread and keep the maximum. A reader returns bytes, or None when it could not
read this time (the container is gone, a file vanished): that sample is skipped.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import subprocess

Reader = Callable[[], "int | None"]


class PeakSampler:
    """Calls each reader every `interval` seconds until stopped and keeps each one's peak."""

    def __init__(self, readers: dict[str, Reader], interval: float) -> None:
        self.readers = readers
        self.interval = interval
        self.peaks: dict[str, int | None] = {name: None for name in readers}  # None: never read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        for name, read in self.readers.items():
            value = read()
            if value is not None:
                peak = self.peaks[name]
                self.peaks[name] = value if peak is None else max(peak, value)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def start(self) -> "PeakSampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "PeakSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# The sampler runs isolated (-I: neither the current directory, nor PYTHON* variables, nor the user's site-packages
# reach its sys.path) from / , and imports this shmguard from the folder named after -c. With `-m`, the current
# directory came first on sys.path: a folder named shmguard wherever the user stood ran as root (issue 43.1).
SAMPLER_BOOT = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
                "from shmguard.engine.shm_sampler import main; sys.exit(main(sys.argv[1:]))")


def package_root() -> str:
    """The folder that holds this shmguard package (what the sampler process puts first on its sys.path)."""
    import os

    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def start_sampler(args: list[str], python: str | None = None, **popen) -> "subprocess.Popen[str]":
    """Start a sampler process (shmguard.engine.shm_sampler with these arguments) of this shmguard: isolated, from /,
    its stdin and stdout pipes of text, its stderr discarded. Every process shmguard starts is started here."""
    import subprocess
    import sys

    return subprocess.Popen([python or sys.executable, "-I", "-c", SAMPLER_BOOT, package_root(), *args], cwd="/",
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            **popen)


class ProcessPeakSampler:
    """The peak of a filesystem's used bytes, sampled by a separate process (shmguard.engine.shm_sampler).

    Same interface as PeakSampler (start, stop, peaks["shm"]). Used where the peak must not be missed:
    the sampler process is not held up by this process's GIL.
    """

    def __init__(self, path: str, interval: float = 0.0002, python: str | None = None) -> None:
        self.path = path
        self.interval = interval
        self.python = python
        self.peaks: dict[str, int | None] = {"shm": None}
        self.samples = 0
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> "ProcessPeakSampler":
        self._proc = start_sampler([self.path, repr(self.interval)], self.python)
        return self

    def stop(self) -> None:
        import json
        import subprocess

        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            out, _ = proc.communicate("", timeout=10)
            result = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError, OSError):
            proc.kill()
            proc.wait()
            return
        self.samples = int(result.get("samples") or 0)
        if result.get("peak") is not None:
            self.peaks["shm"] = max(self.peaks["shm"] or 0, int(result["peak"]))

    def __enter__(self) -> "ProcessPeakSampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
