"""Which processes are alive, and which files they hold (open or mapped): what `shmguard clean` must not remove.

A segment in /dev/shm is in use while any process has it open (/proc/PID/fd) or mapped (/proc/PID/maps),
whatever its name says: a DataLoader's trainer maps the batches its workers wrote, and a container's processes
name their segments after pids of their own pid namespace. Files are matched by device and inode, which hold
across mount and pid namespaces (a path in another process's maps may be another /dev/shm's).

What cannot be seen is recorded, not guessed: processes whose fd and maps cannot be read (another user's,
without root) and whether this process sees the host's pids at all (the kernel's kthreadd is pid 2 only in
the initial pid namespace). Read through the injectable Root; standard library only.
"""

from __future__ import annotations

import os

from shmguard.record import Record, field

GONE_STATES = ("Z", "X")  # a zombie or dead task holds no files and keeps its pid only until it is reaped
PF_KTHREAD = 0x00200000  # a kernel thread (include/linux/sched.h): no memory map, no files of a user


class Holders(Record):
    """The processes this process can see, on the one device of interest."""

    alive: frozenset  # pids of live (not zombie) processes
    held: frozenset  # (st_dev, st_ino) of files on the device that a visible process has open or mapped
    blind: tuple  # (pid, uid) of live processes whose fds or maps could not be read (uid None: unknown)
    host_pids: bool  # the host's pid namespace is the one seen (kthreadd is pid 2)
    started: dict = field(default_factory=dict)  # pid -> when it started (seconds since the epoch, ~1 s precision)


def parse_stat_state(text: str) -> str | None:
    """The state letter of /proc/PID/stat (after the command name, which may hold spaces and parentheses)."""
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    return fields[0] if fields else None


def parse_stat_flags(text: str) -> int | None:
    """The flags of /proc/PID/stat (field 9)."""
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        return int(fields[6])
    except (IndexError, ValueError):
        return None


def parse_stat_start(text: str) -> int | None:
    """The start time of /proc/PID/stat (field 22), in clock ticks after boot."""
    _, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        return int(fields[19])  # fields[0] is field 3, the state
    except (IndexError, ValueError):
        return None


def parse_btime(text: str) -> int | None:
    """The boot time of /proc/stat (`btime 1764070000`), seconds since the epoch."""
    for line in text.splitlines():
        if line.startswith("btime "):
            try:
                return int(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def parse_status_uid(text: str) -> int | None:
    """The real uid of /proc/PID/status (`Uid:	1000	1000	1000	1000`)."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            try:
                return int(fields[1])
            except (IndexError, ValueError):
                return None
    return None


def parse_maps(text: str, device: int) -> set[tuple[int, int]]:
    """(device, inode) of the files on `device` that a /proc/PID/maps maps (`7f..-7f.. rw-s 0 00:1a 1234 /dev/shm/x`)."""
    held = set()
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 5:
            continue
        major, _, minor = fields[3].partition(":")
        try:
            dev = os.makedev(int(major, 16), int(minor, 16))
            inode = int(fields[4])
        except ValueError:
            continue
        if inode and dev == device:
            held.add((dev, inode))
    return held


def alive(root, pid: int) -> bool:
    """A process with this pid exists here and is not a zombie (a zombie's pid cannot be reused, but it holds nothing)."""
    text = root.read_or_none(f"/proc/{pid}/stat")
    return text is not None and parse_stat_state(text) not in GONE_STATES


def sees_host_pids(root) -> bool:
    text = root.read_or_none("/proc/2/stat")
    return text is not None and "(kthreadd)" in text


def scan(root, device: int) -> Holders:
    """Every visible process: whether it is alive, and the files on `device` it holds."""
    live: set[int] = set()
    held: set[tuple[int, int]] = set()
    blind: list[tuple[int, int | None]] = []
    started: dict[int, float] = {}
    btime_text = root.read_or_none("/proc/stat")
    btime = parse_btime(btime_text) if btime_text else None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for name in root.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        stat = root.read_or_none(f"/proc/{pid}/stat")
        if stat is None or parse_stat_state(stat) in GONE_STATES:
            continue
        live.add(pid)
        start = parse_stat_start(stat)
        if btime is not None and start is not None:
            started[pid] = btime + start / ticks
        if (parse_stat_flags(stat) or 0) & PF_KTHREAD:
            continue
        readable = True
        maps = root.read_or_none(f"/proc/{pid}/maps")
        if maps is None:
            readable = False
        else:
            held |= parse_maps(maps, device)
        fd_dir = root.join(f"/proc/{pid}/fd")
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            fds = []  # exited meanwhile
        except OSError:
            fds, readable = [], False
        for fd in fds:
            try:
                st = os.stat(os.path.join(fd_dir, fd))
            except OSError:
                continue  # closed meanwhile, or not a file we can stat (then not ours to hold either)
            if st.st_dev == device:
                held.add((st.st_dev, st.st_ino))
        if not readable and alive(root, pid):
            status = root.read_or_none(f"/proc/{pid}/status")
            blind.append((pid, parse_status_uid(status) if status else None))
    return Holders(alive=frozenset(live), held=frozenset(held), blind=tuple(blind), host_pids=sees_host_pids(root),
                   started=started)
