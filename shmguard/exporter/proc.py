"""A container's /dev/shm and memory cgroup, read from the host through /proc/<pid> and the cgroup mounts.

/proc/<pid>/root/dev/shm is the container's own /dev/shm (the path resolves in the
process's mount namespace), for Docker and Podman alike; statvfs gives its size and use (read as
shmguard.probe.tmpfs reads every tmpfs).
The memory cgroup is found as the probes find it (shmguard.probe.cgroup): the process's
path from /proc/<pid>/cgroup, placed under the host's cgroup mounts, v1 or v2, and read
with the same parsers (limit: the smallest along the path; usage less inactive file;
shmem). Everything goes through one Root, so tests read fixture trees and a DaemonSet can
read the host's /proc and /sys mounted under SHMGUARD_ROOT.

A process can exit at any point (the container stops mid-read, its /proc entry vanishes):
a read that fails is "gone", never an error of the exporter, and the reading is only
trusted when /proc/<pid> still exists after it.
"""

from __future__ import annotations

from shmguard.exporter.metrics import Reading
from shmguard.probe import Root
from shmguard.probe.cgroup import (
    Level,
    controller_dirs,
    memory_limit,
    memory_shmem,
    memory_stat,
    memory_usage,
    parse_meminfo_total,
    parse_proc_cgroup,
)
from shmguard.probe.mountinfo import parse_mountinfo
from shmguard.probe.tmpfs import read_tmpfs
from shmguard.record import Record


class Host(Record):
    """What every container's reading needs from the host, read once: its cgroup mounts and its RAM."""

    mounts: tuple  # the cgroup and cgroup2 Mounts
    memory: int | None  # bytes of RAM (a limit at or above it is no limit)


def cgroup_mount(mount_point: str, fstype: str) -> bool:
    return fstype in ("cgroup", "cgroup2")


def read_host(root: Root) -> Host:
    """The host's cgroup mounts and RAM. Under a root other than `/` (the host's /proc and /sys mounted in a
    container), the mounts are those of the host's pid 1: /proc/self would be the exporter's own."""
    source = "/proc/self/mountinfo" if root.path in ("/", "") else "/proc/1/mountinfo"
    text = root.read_or_none(source) or ""
    mounts, _bad = parse_mountinfo(text, cgroup_mount)
    meminfo = root.read_or_none("/proc/meminfo")
    return Host(mounts=tuple(mounts), memory=parse_meminfo_total(meminfo) if meminfo else None)


def memory_levels(root: Root, host: Host, pid: int) -> tuple[list[Level], str | None]:
    """The memory cgroup directories of a process, from its own up to the mount root (read once per container:
    a process does not change cgroup), or an error."""
    text = root.read_or_none(f"/proc/{pid}/cgroup")
    if text is None:
        return [], f"cannot read /proc/{pid}/cgroup"
    levels, note = controller_dirs(root, list(host.mounts), parse_proc_cgroup(text), "memory")
    return levels, (None if levels else note)


def read_shm(root: Root, pid: int) -> tuple[int | None, int | None, str | None]:
    """The /dev/shm the process sees: its size and used bytes from statvfs, or the error."""
    path = f"/proc/{pid}/root/dev/shm"
    try:
        usage = read_tmpfs(path, root)
    except OSError as exc:
        return None, None, f"cannot statvfs {path}: {exc.strerror or exc}"
    return usage.size, usage.used, None


class PassRoot(Root):
    """The host's Root for one pass: each file is read at most once per pass. The cgroup levels above the
    containers' own (/docker, the hierarchy's root) are on every container's walk; they are read once."""

    def __init__(self, root: Root) -> None:
        super().__init__(root.path)
        self.root = root
        self.seen: dict[str, str | OSError] = {}

    def read(self, path: str) -> str:
        found = self.seen.get(path)
        if found is None:
            try:
                found = self.root.read(path)
            except OSError as exc:
                found = exc
            self.seen[path] = found
        if isinstance(found, OSError):
            raise found
        return found

    def exists(self, path: str) -> bool:
        return self.root.exists(path)

    def isdir(self, path: str) -> bool:
        return self.root.isdir(path)

    def statvfs(self, path: str):
        return self.root.statvfs(path)


def read_container(root: Root, host: Host, pid: int, levels: list[Level]) -> Reading | None:
    """The container's reading, or None when its process is gone (before, during or right after the read)."""
    shm_size, shm_used, shm_error = read_shm(root, pid)
    errors = [shm_error] if shm_error else []
    memory = read_memory(root, levels, host.memory)
    if not root.exists(f"/proc/{pid}"):
        return None  # it exited (before or mid-read): what was read may be half of a torn-down cgroup
    return memory.replace(shm_size=shm_size, shm_used=shm_used, errors=tuple(errors) + memory.errors)


def read_memory(root: Root, levels: list[Level], host_memory: int | None) -> Reading:
    """A memory cgroup's limit (the smallest along the levels), use and shmem, as the probes read them
    (shmguard.probe.cgroup), memory.stat read once; no levels: nothing known."""
    if not levels:
        return Reading()
    found = memory_limit(root, levels, host_memory)
    stat = memory_stat(root, levels)
    used = memory_usage(root, levels, stat)
    pages = memory_shmem(root, levels, stat)
    return Reading(memory_limit=_int(found.value), memory_usage=_int(used.value), memory_shmem=_int(pages.value),
                   errors=(*found.errors, *used.errors, *pages.errors))


def _int(value) -> int | None:
    return None if value is None else int(value)
