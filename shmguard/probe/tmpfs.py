"""A tmpfs's size, use and files, from statvfs: the one reader of /dev/shm's figures.

`check` (shmguard.probe.shm), `run`'s samplers, the exporter's engine mode (a container's
/proc/PID/root/dev/shm) and node mode (a pod's memory emptyDir) all read a tmpfs through
`read_tmpfs`, or `used_of` where a loop samples thousands of times a second; so "used" has
one meaning everywhere:

    size  = f_blocks × f_frsize          the mount's size= (0: a tmpfs mounted without a limit)
    used  = (f_blocks − f_bfree) × f_frsize   the pages its files hold, as `df` counts "Used"
    free  = f_bavail × f_frsize          what an unprivileged writer can still put there
    files = f_files − f_ffree            inodes in use, of max_files (nr_inodes=; 0: no limit)

Why f_bfree for "used" and f_bavail for "free": on a tmpfs the two are the same number
(shmem_statfs in mm/shmem.c sets f_bavail = f_bfree = max_blocks − used_blocks: a tmpfs
keeps no blocks for root), so either reads a tmpfs right. They differ only when /dev/shm is
not a tmpfs (a plain directory of the image on ext4, a disk-backed emptyDir), where f_bfree
includes the blocks reserved for root: "used" from f_bavail would count that reserve as
the job's pages (5% of the disk, gigabytes, on ext4's defaults), while "free" from f_bfree
would promise a non-root DataLoader space it cannot write. The exporter read f_bfree and
`check` f_bavail; on a tmpfs they agreed, and on anything else `check`'s "used" was wrong.

Standard library only (the samplers start in milliseconds, `health` runs every few seconds).
"""

import os

from shmguard.record import Record

ST_RDONLY = 1  # os.ST_RDONLY


class Tmpfs(Record):
    """What statvfs says of a filesystem, in bytes and files (see the module docstring)."""

    size: int
    used: int
    free: int
    files: int
    max_files: int
    read_only: bool = False


def used_of(st) -> int:
    """Bytes in use on the filesystem of a statvfs result: its blocks less its free blocks (see the module)."""
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def tmpfs_of(st) -> Tmpfs:
    """A statvfs result as a Tmpfs (pure)."""
    return Tmpfs(size=st.f_blocks * st.f_frsize, used=used_of(st), free=st.f_bavail * st.f_frsize,
                 files=st.f_files - st.f_ffree, max_files=st.f_files, read_only=bool(st.f_flag & ST_RDONLY))


def read_tmpfs(path: str, root=None) -> Tmpfs:
    """The filesystem at path (under root, a shmguard.probe.Root, when given); OSError when it cannot be read."""
    return tmpfs_of(root.statvfs(path) if root is not None else os.statvfs(path))


def tmpfs_statvfs(size: int, free: int, files: int = 0, max_files: int = 0, read_only: bool = False,
                  page: int = 4096) -> os.statvfs_result:
    """The statvfs result a tmpfs of `size` bytes with `free` of them free reports (f_bavail = f_bfree, as
    shmem_statfs sets them): what a fake Root answers, so that fakes are read by the same reader as the real thing."""
    return os.statvfs_result((page, page, size // page, free // page, free // page, max_files, max_files - files,
                              max_files - files, ST_RDONLY if read_only else 0, 255))
