"""Peaks of quantities that rise and fall faster than anyone looks: sampled in a thread.

/dev/shm use under a DataLoader peaks for milliseconds (a batch in flight), so
`run` and `tune` both sample it (and `tune` the cgroup's memory) in a background
thread and keep the maximum. A reader returns bytes, or None when it could not
read this time (the container is gone, a file vanished): that sample is skipped.
"""

from __future__ import annotations

import threading
from typing import Callable

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
