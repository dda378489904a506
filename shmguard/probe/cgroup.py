"""cgroup v1 and v2: where this process's cgroup is, and the memory and CPU limits along its path.

The directory of a controller is found as the kernel describes it, never assumed
at /sys/fs/cgroup: the process's path from /proc/self/cgroup, made relative to the
root of the cgroup mount (mountinfo field 4) and joined to its mount point. When a
host-namespace path does not exist under the mount (a container without a cgroup
namespace), leading components are trimmed until it does (as OpenJDK does).

Limits are the smallest along the path from the process's cgroup up to the mount
root: a `max` child under a limited parent is limited (JDK-8322420). Missing files
and `max`/-1 mean "no limit at that level"; garbage is recorded, never raised.
See https://docs.kernel.org/admin-guide/cgroup-v2.html and cgroup-v1/memory.rst.
"""

import posixpath

from shmguard.probe.mountinfo import Mount
from shmguard.record import Record

# v1 memory.limit_in_bytes for "unlimited" is PAGE_COUNTER_MAX rounded to pages
# (9223372036854771712 on 4 KiB pages); any value at or above the host's RAM means no limit.
V1_UNLIMITED_FLOOR = 1 << 62


class CgroupEntry(Record):
    """One line of /proc/self/cgroup: `hierarchy-id:controller,list:/path`."""

    hierarchy: int
    controllers: tuple
    path: str


class Level(Record):
    """One directory on the walk from the process's cgroup to the mount root."""

    path: str
    version: str


class Limit(Record):
    """A limit found on the walk: value (None = no limit), where it came from, and problems met."""

    value: int | float | None = None  # bytes (memory), CPUs (the CPU quota); None: no limit
    source: str | None = None
    errors: tuple = ()


def parse_proc_cgroup(text: str) -> list[CgroupEntry]:
    """/proc/self/cgroup lines; the path may itself contain colons. Malformed lines are skipped."""
    entries = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        try:
            hid = int(hierarchy)
        except ValueError:
            continue
        entries.append(CgroupEntry(hid, tuple(filter(None, controllers.split(","))), path or "/"))
    return entries


def relative_to_mount(path: str, mount_root: str) -> str | None:
    """The cgroup path as seen under a mount whose root is mount_root, or None if it lies outside."""
    path = posixpath.normpath(path)
    mount_root = posixpath.normpath(mount_root)
    if mount_root == "/":
        return path
    if path == mount_root:
        return "/"
    if path.startswith(mount_root + "/"):
        return path[len(mount_root):]
    return None


def controller_dirs(root, mounts: list[Mount], entries: list[CgroupEntry], controller: str) -> tuple[list[Level], str | None]:
    """The directories to read for a controller, from the process's own up to the mount root.

    v1 is preferred where the controller is mounted there (hybrid hosts mount
    cgroup2 without controllers); otherwise the v2 unified hierarchy.
    """
    for entry in entries:
        if controller in entry.controllers:
            for mount in mounts:
                if mount.fstype == "cgroup" and controller in mount.super_options.split(","):
                    return _walk(root, mount, entry.path, "v1")
    for entry in entries:
        if entry.hierarchy == 0 and entry.controllers == ():
            for mount in mounts:
                if mount.fstype != "cgroup2":
                    continue
                listed = root.read_or_none(posixpath.join(mount.mount_point, "cgroup.controllers"))
                if listed is not None and controller not in listed.split():
                    continue  # e.g. the controller-less cgroup2 of a hybrid host
                return _walk(root, mount, entry.path, "v2")
    return [], f"no cgroup {controller} controller is mounted"


def _walk(root, mount: Mount, path: str, version: str) -> tuple[list[Level], str | None]:
    rel = relative_to_mount(path, mount.root)
    note = None
    if rel is None:
        # The process's path lies outside the mount's root (`/..` in a nested namespace): only the mount itself is visible.
        rel = "/"
        note = f"cgroup path {path} lies outside the mount root {mount.root}; using {mount.mount_point}"
    # A host-namespace path that does not exist here: trim leading components until it does.
    parts = [p for p in rel.split("/") if p]
    while parts and not root.isdir(posixpath.join(mount.mount_point, *parts)):
        parts = parts[1:]
    levels = []
    while True:
        levels.append(Level(path=posixpath.join(mount.mount_point, *parts), version=version))
        if not parts:
            break
        parts = parts[:-1]
    return levels, note


def parse_limit_value(text: str, version: str) -> int | None:
    """memory.max / memory.limit_in_bytes: bytes, or None for no limit. ValueError on garbage."""
    value = text.strip()
    if value == "max":
        return None
    number = int(value)
    if number < 0 or number >= V1_UNLIMITED_FLOOR:
        return None
    return number


def parse_cpu_max(text: str) -> float | None:
    """v2 cpu.max `quota period` (or `max period`, or a lone quota) into CPUs; None = no limit. ValueError on garbage."""
    fields = text.split()
    if not fields or len(fields) > 2:
        raise ValueError(f"cpu.max should be `quota period`, not {text.strip()!r}")
    if fields[0] == "max":
        if len(fields) == 2:
            int(fields[1])  # still validate the period
        return None
    quota = int(fields[0])
    period = int(fields[1]) if len(fields) == 2 else 100000
    if period <= 0:
        raise ValueError(f"cpu.max has a period of {period}")
    if quota <= 0:
        raise ValueError(f"cpu.max has a quota of {quota}")
    return quota / period


def parse_v1_quota(quota_text: str, period_text: str) -> float | None:
    """v1 cpu.cfs_quota_us and cpu.cfs_period_us into CPUs; -1 (or any negative) = no limit."""
    quota = int(quota_text.strip())
    if quota < 0:
        return None
    period = int(period_text.strip())
    if period <= 0:
        raise ValueError(f"cpu.cfs_period_us is {period}")
    if quota == 0:
        raise ValueError("cpu.cfs_quota_us is 0")
    return quota / period


def _read(root, path: str, errors: list[str]) -> str | None:
    try:
        return root.read(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        errors.append(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
        return None


def memory_limit(root, levels: list[Level], host_memory: int | None) -> Limit:
    """The smallest memory limit on the walk; values at or above the host's RAM mean no limit."""
    best = None
    source = None
    errors: list[str] = []
    for level in levels:
        name = "memory.max" if level.version == "v2" else "memory.limit_in_bytes"
        path = posixpath.join(level.path, name)
        text = _read(root, path, errors)
        if text is None:
            continue
        try:
            value = parse_limit_value(text, level.version)
        except ValueError:
            errors.append(f"{path} holds {text.strip()[:40]!r}, not a number")
            continue
        if value is not None and host_memory and value >= host_memory:
            value = None
        if value is not None and (best is None or value < best):
            best, source = value, path
    return Limit(value=best, source=source, errors=tuple(errors))


def memory_usage(root, levels: list[Level], stat: dict[str, int] | None = None) -> Limit:
    """Memory charged to the process's own cgroup, less inactive file cache (what the OOM killer would not reclaim last).

    stat: its memory.stat already read (memory_stat), to read the file once for usage and shmem."""
    errors: list[str] = []
    if not levels:
        return Limit(errors=("no memory cgroup",))
    level = levels[0]
    current_name = "memory.current" if level.version == "v2" else "memory.usage_in_bytes"
    path = posixpath.join(level.path, current_name)
    text = _read(root, path, errors)
    if text is None:
        return Limit(errors=tuple(errors) or (f"{path} is missing",))
    try:
        usage = int(text.strip())
    except ValueError:
        return Limit(errors=(f"{path} holds {text.strip()[:40]!r}, not a number",))
    if stat is None:
        stat = parse_memory_stat(_read(root, posixpath.join(level.path, "memory.stat"), errors) or "")
    usage -= stat.get("inactive_file" if level.version == "v2" else "total_inactive_file", 0)
    return Limit(value=max(0, usage), source=path, errors=tuple(errors))


def parse_memory_stat(text: str, keys=None) -> dict[str, int]:
    """memory.stat's `key value` lines (v1 and v2) as numbers; a line that is not one is skipped.

    keys: only these (looked up, not every line split: the exporter reads it for every container every second)."""
    values = {}
    if keys is not None:
        for key in keys:
            at = text.find(key + " ")
            while at > 0 and text[at - 1] != "\n":  # `total_shmem` also holds `shmem `: only a line's start counts
                at = text.find(key + " ", at + 1)
            if at < 0:
                continue
            end = text.find("\n", at)
            try:
                values[key] = int(text[at + len(key) + 1:end if end >= 0 else len(text)])
            except ValueError:
                continue
        return values
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            continue
    return values


# What memory_usage and memory_shmem take from memory.stat.
STAT_KEYS = frozenset(("inactive_file", "total_inactive_file", "shmem", "total_shmem"))


def memory_own(root, levels: list[Level], stat: dict[str, int] | None = None) -> Limit:
    """The processes' own memory: what is charged to the cgroup less its inactive file cache (memory_usage) and less
    its tmpfs pages, /dev/shm's among them (memory_shmem): what elastic /dev/shm must leave room for beside /dev/shm
    under the memory limit. stat: its memory.stat already read (memory_stat)."""
    if stat is None:
        stat = memory_stat(root, levels)
    usage = memory_usage(root, levels, stat or {})
    if usage.value is None:
        return usage
    shmem = memory_shmem(root, levels, stat) if stat is not None else Limit()
    return Limit(value=max(0, int(usage.value) - int(shmem.value or 0)), source=usage.source,
                 errors=usage.errors + shmem.errors)


def memory_stat(root, levels: list[Level]) -> dict[str, int] | None:
    """memory.stat of the process's own cgroup, the lines memory_usage and memory_shmem need; None when it
    cannot be read."""
    if not levels:
        return None
    text = root.read_or_none(posixpath.join(levels[0].path, "memory.stat"))
    return None if text is None else parse_memory_stat(text, STAT_KEYS)


def memory_shmem(root, levels: list[Level], stat: dict[str, int] | None = None) -> Limit:
    """Shared-memory pages (tmpfs, /dev/shm, SysV) charged to the process's own cgroup and those below it:
    v2's `shmem`, v1's hierarchical `total_shmem`. The pages that turn a full /dev/shm into an OOM kill.

    stat: its memory.stat already read (memory_stat)."""
    if not levels:
        return Limit(errors=("no memory cgroup",))
    level = levels[0]
    path = posixpath.join(level.path, "memory.stat")
    if stat is None:
        stat = memory_stat(root, levels)
        if stat is None:
            return Limit(errors=(f"cannot read {path}",))
    key = "shmem" if level.version == "v2" else "total_shmem"
    value = stat.get(key)
    if value is None:
        return Limit(errors=(f"{path} has no {key} line",))
    return Limit(value=value, source=path)


def cpu_quota(root, levels: list[Level]) -> Limit:
    """The smallest CPU quota on the walk, in CPUs (a float: 1.5 means 150 ms per 100 ms)."""
    best = None
    source = None
    errors: list[str] = []
    for level in levels:
        try:
            if level.version == "v2":
                path = posixpath.join(level.path, "cpu.max")
                text = _read(root, path, errors)
                if text is None:
                    continue
                value = parse_cpu_max(text)
            else:
                path = posixpath.join(level.path, "cpu.cfs_quota_us")
                quota = _read(root, path, errors)
                period = _read(root, posixpath.join(level.path, "cpu.cfs_period_us"), errors)
                if quota is None or period is None:
                    continue
                value = parse_v1_quota(quota, period)
        except ValueError as exc:
            errors.append(f"{path}: {exc}")
            continue
        if value is not None and (best is None or value < best):
            best, source = value, path
    return Limit(value=best, source=source, errors=tuple(errors))


def read_proc_cgroup(root, pid: int | str = "self") -> tuple[list[CgroupEntry], str | None]:
    """The cgroups of a process (this one by default) from root's /proc/PID/cgroup, or why they cannot be read."""
    try:
        return parse_proc_cgroup(root.read(f"/proc/{pid}/cgroup")), None
    except (OSError, ValueError) as exc:
        return [], f"cannot read /proc/{pid}/cgroup: {getattr(exc, 'strerror', None) or exc}"


# The container's memory: /dev/shm pages are charged to the memory cgroup of the process
# that touches them (moby #47967), so the job's shared memory must fit under this limit too.

class MemoryInfo(Record):
    host: int | None  # bytes of RAM on the host (/proc/meminfo)
    limit: int | float | None  # as Limit.value
    limit_source: str | None
    usage: int | float | None
    errors: tuple


class Meminfo(Record):
    """/proc/meminfo's totals: the host's memory in all, and what the kernel can still give without swapping (page
    cache and reclaimable slab included: what a tmpfs's next pages can take from the host)."""

    total: int | None = None  # MemTotal, bytes
    available: int | None = None  # MemAvailable, bytes


MEMINFO_KEYS = {"MemTotal": "total", "MemAvailable": "available"}


def parse_meminfo(text: str) -> Meminfo:
    """The one parser of /proc/meminfo (check, health, both exporter modes, elastic's grower): `Key:   value kB`
    lines (the kernel writes kB; a value with another unit is taken as bytes); a line that cannot be read is
    skipped."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        name = MEMINFO_KEYS.get(key)
        if name is None:
            continue
        fields = rest.split()
        try:
            value = int(fields[0])
        except (IndexError, ValueError):
            continue
        found[name] = value * 1024 if len(fields) < 2 or fields[1].lower() == "kb" else value
    return Meminfo(**found)


def read_meminfo(root) -> Meminfo:
    """The host's memory from root's /proc/meminfo; unknown (None) when it cannot be read."""
    text = root.read_or_none("/proc/meminfo")
    return parse_meminfo(text) if text else Meminfo()


def parse_meminfo_total(text: str) -> int | None:
    """MemTotal in bytes (parse_meminfo)."""
    return parse_meminfo(text).total


def memory_cgroup_limit(root, mounts, entries) -> tuple[list[Level], int | float | None]:
    """The memory cgroup's directories and the limit on them (None: no limit), as probe_memory finds it, reading
    /proc/meminfo only once a limit is found: the host's memory is what tells a limit from one at or above it (no
    limit). The smallest limit on the walk is below the host's memory exactly when memory_limit, given that, keeps
    one. For `health`, every few seconds: without a limit (Docker's default) it reads neither meminfo nor the usage.
    """
    levels, _ = controller_dirs(root, mounts, entries, "memory")
    limit = memory_limit(root, levels, None).value
    if limit is not None:
        host = read_meminfo(root).total
        if host and limit >= host:
            limit = None
    return levels, limit


def probe_memory(root, mounts, entries) -> MemoryInfo:
    errors = []
    meminfo = root.read_or_none("/proc/meminfo")
    host = parse_meminfo_total(meminfo) if meminfo else None
    if host is None:
        errors.append("cannot read MemTotal from /proc/meminfo")
    levels, note = controller_dirs(root, mounts, entries, "memory")
    if note:
        errors.append(note)
    limit = memory_limit(root, levels, host)
    usage = memory_usage(root, levels) if levels else Limit()
    errors.extend(limit.errors)
    return MemoryInfo(host=host, limit=limit.value, limit_source=limit.source, usage=usage.value,
                      errors=tuple(errors))
