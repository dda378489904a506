"""Feedback on long work, on stderr: only for a person at a terminal.

`tune` sweeps run real DataLoaders for minutes and `measure` may read many slow
samples; a terminal gets a line per step (done/total, elapsed, best so far). A
pipe, a CI log and `--json` get nothing unless asked (`--progress`): their stderr
is read by programs or kept as a record. `run --tune` asks its tuning container
for progress explicitly, because it relays those lines to its user.
"""

from __future__ import annotations

import sys
import time


def wanted(flag: bool | None, as_json: bool = False, stream=None) -> bool:
    """--progress / --no-progress when given; otherwise only when stderr is a terminal and the output is not JSON."""
    if flag is not None:
        return flag
    stream = stream or sys.stderr
    return not as_json and bool(getattr(stream, "isatty", lambda: False)())


class Reporter:
    """Writes `PREFIX [done/total] what (…, N s)` lines; does nothing when not wanted."""

    def __init__(self, prefix: str, enabled: bool, stream=None, clock=time.monotonic, every: float = 0.0) -> None:
        self.prefix, self.enabled, self.stream, self.clock, self.every = prefix, enabled, stream, clock, every
        self.start = clock()
        self.last = float("-inf")

    def elapsed(self) -> float:
        return self.clock() - self.start

    def __call__(self, done: int, total: int | None, what: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not force and now - self.last < self.every and done != total:
            return
        self.last = now
        count = f"[{done}/{total}] " if total else f"[{done}] "
        print(f"{self.prefix}: {count}{what} ({self.elapsed():.1f} s elapsed)", file=self.stream or sys.stderr,
              flush=True)
