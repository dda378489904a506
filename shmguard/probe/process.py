"""A process as /proc shows it: its open descriptors, its shared, writable memory mappings, its command line and
its start time.

The Python API builds its probe batch in a forked child that must not touch what it shares with the trainer
(shmguard.api.batch): it reopens the files it may read, and makes the shared, writable mappings read-only. Both
come from the child's own /proc/self, read here through a root like every other read of the system.
Standard library only.
"""

from __future__ import annotations

from typing import Iterator

from shmguard.record import Record

SELF = "self"


class Mapping(Record):
    """One address range of /proc/PID/maps: [start, end), and whether it is executable."""

    start: int
    end: int
    executable: bool


def fd_folder(pid: int | str = SELF) -> str:
    return f"/proc/{pid}/fd"


def has_fd_table(root, pid: int | str = SELF) -> bool:
    """Whether /proc shows the process's descriptors (without /proc, a child cannot be cut off from its files)."""
    return root.isdir(fd_folder(pid))


def open_fds(root, pid: int | str = SELF) -> list[int]:
    """The numbers of the process's open descriptors ([] when they cannot be listed)."""
    return sorted(int(name) for name in root.listdir(fd_folder(pid)) if name.isdigit())


def fd_path(root, fd: int, pid: int | str = SELF) -> str:
    """The path that opens the file a descriptor refers to anew (its own open file description)."""
    return root.join(f"{fd_folder(pid)}/{fd}")


def parse_shared_writable(lines) -> Iterator[Mapping]:
    """The shared, writable ranges of /proc/PID/maps lines (`7f..-7f.. rw-s 0 00:1a 1234 /dev/shm/x`); a line that
    does not parse is skipped."""
    for line in lines:
        fields = line.split(maxsplit=2)
        if len(fields) < 2 or len(fields[1]) < 4 or fields[1][1] != "w" or fields[1][3] != "s":
            continue
        start, _, end = fields[0].partition("-")
        try:
            yield Mapping(int(start, 16), int(end, 16), fields[1][2] == "x")
        except ValueError:
            continue


def shared_writable_mappings(root, pid: int | str = SELF) -> list[Mapping]:
    """The process's shared, writable mappings, read from /proc/PID/maps line by line (a trainer holding many
    shared tensors has a mapping each: the file is not bounded as the small kernel files are). OSError when it
    cannot be read."""
    with open(root.join(f"/proc/{pid}/maps"), encoding="ascii", errors="replace") as maps:
        return list(parse_shared_writable(maps))


def command_line(root, pid: int | str = 1) -> list[str]:
    """The words a process was started with (/proc/PID/cmdline, NUL-separated); [] when unreadable. PID 1 is a
    container's main process: `check` reads the launcher it runs (torchrun --nproc-per-node 8) from it."""
    text = root.read_or_none(f"/proc/{pid}/cmdline")
    return [word for word in (text or "").split("\0") if word]


def parse_start_time(stat_text: str) -> str | None:
    """Field 22 of /proc/PID/stat, the process's start time in clock ticks since boot, which tells it from a later
    process given the same number. Read after the command's closing parenthesis (a command may hold spaces and
    parentheses of its own)."""
    fields = stat_text.rsplit(")", 1)
    rest = fields[1].split() if len(fields) == 2 else []
    return rest[19] if len(rest) > 19 else None


def start_time(root, pid: int | str) -> str | None:
    """The start time of process pid (parse_start_time), or None when it is gone or unreadable."""
    text = root.read_or_none(f"/proc/{pid}/stat")
    return None if text is None else parse_start_time(text)
