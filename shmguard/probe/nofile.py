"""The open-file limit: PyTorch's file_descriptor strategy holds one descriptor per shared tensor in flight.

Read from /proc/self/limits so a fixture tree can stand in for the process.
"""

from __future__ import annotations

from shmguard.record import Record


class NofileInfo(Record):
    soft: int | None  # None: unlimited or unknown
    hard: int | None
    errors: tuple


def parse_limits(text: str) -> tuple[int | None, int | None]:
    """`Max open files  1024  1048576  files` -> (1024, 1048576); `unlimited` -> None."""
    for line in text.splitlines():
        if line.startswith("Max open files"):
            fields = line[len("Max open files"):].split()
            values: list[int | None] = []
            for field in fields[:2]:
                if field == "unlimited":
                    values.append(None)
                else:
                    values.append(int(field))
            if len(values) == 2:
                return values[0], values[1]
    raise ValueError("no `Max open files` line")


def probe_nofile(root) -> NofileInfo:
    text = root.read_or_none("/proc/self/limits")
    if text is None:
        return NofileInfo(soft=None, hard=None, errors=("cannot read /proc/self/limits",))
    try:
        soft, hard = parse_limits(text)
    except ValueError as exc:
        return NofileInfo(soft=None, hard=None, errors=(f"/proc/self/limits: {exc}",))
    return NofileInfo(soft=soft, hard=hard, errors=())
