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
        import os
        import subprocess
        import sys

        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen([self.python or sys.executable, "-m", "shmguard.engine.shm_sampler", self.path,
                                       repr(self.interval)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=env, text=True)
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
