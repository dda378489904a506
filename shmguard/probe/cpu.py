"""CPUs this process can really use: the smaller of its affinity (cpuset) and its cgroup CPU quota.

os.cpu_count() counts the host. Affinity is read from Cpus_allowed_list in
/proc/self/status (what sched_getaffinity returns), the quota from cpu.max or
cpu.cfs_quota_us along the cgroup path. Shares/weight are not limits and are not
used. Rounding for num_workers: down, at least 1 — a 1.5-CPU quota keeps one
worker busy at full speed; the trainer process needs CPU too.
"""

from __future__ import annotations

from shmguard.probe import cgroup
from shmguard.record import Record


class CpuInfo(Record):
    host: int | None
    affinity: int | None
    quota: float | None
    quota_source: str | None
    effective: float | None
    errors: tuple


MAX_CPU = 1 << 16  # above any kernel's NR_CPUS: a CPU number past it is garbage, not a machine


def parse_cpu_list(text: str) -> set[int]:
    """A kernel CPU list (`0-3,8,10-11`) into a set of CPU numbers. ValueError on garbage (or absurd numbers)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            first, last = int(low), int(high)
            if first > last or first < 0 or last >= MAX_CPU:
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(first, last + 1))
        else:
            number = int(part)
            if number < 0 or number >= MAX_CPU:
                raise ValueError(f"bad CPU number {part!r}")
            cpus.add(number)
    return cpus


def host_cpus(root) -> int | None:
    """CPUs the host has online (/sys/devices/system/cpu/online), like os.cpu_count()."""
    text = root.read_or_none("/sys/devices/system/cpu/online")
    try:
        return len(parse_cpu_list(text)) if text else None
    except ValueError:
        return None


def affinity(root) -> tuple[int | None, str | None]:
    text = root.read_or_none("/proc/self/status")
    if text is None:
        return None, "cannot read /proc/self/status"
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            try:
                cpus = parse_cpu_list(line.split(":", 1)[1])
            except ValueError:
                return None, f"cannot parse {line.strip()!r}"
            return (len(cpus) or None), None
    return None, "/proc/self/status has no Cpus_allowed_list"


def effective_cpus(affinity_count: int | None, quota: float | None, host: int | None) -> float | None:
    """The smaller of affinity and quota (None when neither nor the host count is known)."""
    limits = [v for v in (affinity_count, quota) if v is not None]
    if not limits:
        return float(host) if host else None
    return float(min(limits))


def probe_cpu(root, mounts, entries) -> CpuInfo:
    errors = []
    count, error = affinity(root)
    if error:
        errors.append(error)
    levels, note = cgroup.controller_dirs(root, mounts, entries, "cpu")
    if note and levels:
        errors.append(note)
    quota = cgroup.cpu_quota(root, levels)
    errors.extend(quota.errors)
    host = host_cpus(root)
    return CpuInfo(host=host, affinity=count, quota=quota.value, quota_source=quota.source,
                   effective=effective_cpus(count, quota.value, host), errors=tuple(errors))
