"""A process as /proc shows it (shmguard.probe.process): its descriptors and its shared, writable mappings, read
from fixture trees and from this process's own /proc."""

from __future__ import annotations

import mmap
import os

from shmguard.probe import Root
from shmguard.probe.process import (
    Mapping,
    fd_path,
    has_fd_table,
    open_fds,
    parse_shared_writable,
    shared_writable_mappings,
)
from tests.support.roots import DIR

MAPS = """\
55d0a0000000-55d0a0021000 r--p 00000000 fd:01 1234 /usr/bin/python3
7f0000000000-7f0000100000 rw-s 00000000 00:1a 777 /dev/shm/torch_1_2_3
7f0000200000-7f0000201000 rwxs 00000000 00:01 12 /memfd:x (deleted)
7f0000300000-7f0000301000 r--s 00000000 00:1a 778 /dev/shm/read-only
7f0000400000-7f0000401000 rw-p 00000000 00:00 0 [heap]
garbage line
zz-yy rw-s 0 0 0
"""


def test_only_the_shared_writable_ranges_are_kept():
    assert list(parse_shared_writable(MAPS.splitlines())) == [
        Mapping(0x7F0000000000, 0x7F0000100000, False), Mapping(0x7F0000200000, 0x7F0000201000, True)]


def test_a_fixture_process(tree):
    root = tree({"/proc/42/fd/0": "", "/proc/42/fd/3": "", "/proc/42/fd/10": "", "/proc/42/maps": MAPS,
                 "/proc/7": DIR})
    assert has_fd_table(root, 42) and not has_fd_table(root, 7)
    assert open_fds(root, 42) == [0, 3, 10] and open_fds(root, 7) == []
    assert fd_path(root, 3, 42) == root.join("/proc/42/fd/3")
    assert len(shared_writable_mappings(root, 42)) == 2


def test_this_process(tmp_path):
    """The real /proc/self: an open file is listed, and a shared writable mapping of it is found."""
    path = tmp_path / "shared"
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    fd = os.open(path, os.O_RDWR)
    try:
        area = mmap.mmap(fd, mmap.PAGESIZE, flags=mmap.MAP_SHARED)
        try:
            root = Root("/")
            assert has_fd_table(root) and fd in open_fds(root)
            assert os.path.samefile(fd_path(root, fd), path)
            assert any(m.end - m.start >= mmap.PAGESIZE and not m.executable for m in shared_writable_mappings(root))
        finally:
            area.close()
    finally:
        os.close(fd)


def test_the_start_time_is_read_after_the_command_whatever_it_holds():
    """Field 22 of /proc/PID/stat; a command may hold spaces and parentheses (the ledger's pid-reuse check)."""
    from shmguard.probe import Root
    from shmguard.probe.process import parse_start_time, start_time

    fields = " ".join(str(n) for n in range(3, 23))  # fields 3 (state) to 22 (starttime)
    assert parse_start_time(f"123 (python3) {fields}") == "22"
    assert parse_start_time(f"123 (a (b) c) {fields}") == "22"
    assert parse_start_time("123 (cut") is None and parse_start_time("123 (x) 1 2") is None
    assert start_time(Root("/"), "self") == parse_start_time(open("/proc/self/stat").read())
    assert start_time(Root("/"), 2**31) is None  # no such process
