"""The container's memory limit and usage, and the host's RAM.

/dev/shm pages are charged to the memory cgroup of the process that touches them
(moby #47967), so the job's shared memory must fit under this limit too.
"""

from __future__ import annotations

from shmguard.probe import cgroup
from shmguard.record import Record


class MemoryInfo(Record):
    __slots__ = ("host", "limit", "limit_source", "usage", "errors")


def parse_meminfo_total(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            try:
                value = int(fields[1])
            except (IndexError, ValueError):
                return None
            unit = fields[2].lower() if len(fields) > 2 else "kb"
            return value * 1024 if unit == "kb" else value
    return None


def probe_memory(root, mounts, entries) -> MemoryInfo:
    errors = []
    meminfo = root.read_or_none("/proc/meminfo")
    host = parse_meminfo_total(meminfo) if meminfo else None
    if host is None:
        errors.append("cannot read MemTotal from /proc/meminfo")
    levels, note = cgroup.controller_dirs(root, mounts, entries, "memory")
    if note:
        errors.append(note)
    limit = cgroup.memory_limit(root, levels, host)
    usage = cgroup.memory_usage(root, levels) if levels else cgroup.Limit()
    errors.extend(limit.errors)
    return MemoryInfo(host=host, limit=limit.value, limit_source=limit.source, usage=usage.value,
                      errors=tuple(errors))
