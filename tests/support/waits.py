"""How long a test waits for something that must happen: HANG, a bound on a hang, never a timing.

A test waits for an event (a thread's end, a line, a state), and HANG only turns a hang into a failure instead of
a CI that never ends. It is far above what any step takes on a loaded machine, so that reaching it means the thing
waited for is not coming, not that the machine was slow."""

from __future__ import annotations

HANG = 600.0
