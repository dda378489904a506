"""Elastic /dev/shm, the remount: grow a running container's /dev/shm from the host (in the sampler process).

A container's /dev/shm (without --ipc host or a volume there) is a tmpfs of its own, and
its size is an option of that tmpfs's superblock. From the host, as root, `fspick` on
/proc/PID/root/dev/shm then `fsconfig(size=N)` and `fsconfig(RECONFIGURE)` (Linux 5.2+)
change it at once, with the files in it kept and the mount's own flags (nosuid, nodev,
noexec) untouched, without entering the container's mount namespace and without the
engine. Where those calls are missing, `nsenter --mount=… mount -o remount,size=N
/dev/shm` does the same (util-linux keeps the flags). Verified on Docker 20.10 and 28
(runc) and on Podman 4.3 (rootful).

The container's process is reached through a descriptor of its /proc/PID directory, opened
once and checked to be in the container's cgroup: if the process ends and its number is
reused, lookups through that descriptor fail instead of reaching another process's (or the
host's) /dev/shm. Standard library only: the sampler process imports it.
"""

from __future__ import annotations

import errno
import os
from typing import Any

# fspick(2) and fsconfig(2): the same numbers on every architecture since Linux 5.1 (the unified syscall table).
SYS_FSCONFIG = 431
SYS_FSPICK = 433
FSPICK_CLOEXEC = 1
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_RECONFIGURE = 7
SHM_IN_ROOT = "root/dev/shm"  # relative to the container process's /proc/PID

_libc: Any = None


def load_libc() -> Any:
    """The C library, loaded once (about a millisecond: done before the first growth, not during it)."""
    import ctypes

    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def _syscall(number: int, *args: Any) -> int:
    import ctypes

    load_libc()
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


def reconfigure(dir_fd: int, path: str, size: int) -> None:
    """Set the size of the tmpfs whose root is at `path` (relative to dir_fd): fspick + fsconfig. OSError on failure
    (ENOSYS: a kernel before 5.2)."""
    import ctypes

    fd = _syscall(SYS_FSPICK, ctypes.c_int(dir_fd), ctypes.c_char_p(os.fsencode(path)), ctypes.c_uint(FSPICK_CLOEXEC))
    try:
        _syscall(SYS_FSCONFIG, ctypes.c_int(fd), ctypes.c_uint(FSCONFIG_SET_STRING), ctypes.c_char_p(b"size"),
                 ctypes.c_char_p(str(size).encode()), ctypes.c_int(0))
        _syscall(SYS_FSCONFIG, ctypes.c_int(fd), ctypes.c_uint(FSCONFIG_CMD_RECONFIGURE), None, None, ctypes.c_int(0))
    finally:
        os.close(fd)


def nsenter_remount(proc_fd: int, size: int) -> None:
    """`mount -o remount,size=N /dev/shm` in the container's mount namespace (for kernels without fspick)."""
    import subprocess

    proc = subprocess.run(["nsenter", f"--mount=/proc/self/fd/{proc_fd}/ns/mnt", "mount", "-o", f"remount,size={size}",
                           "/dev/shm"], pass_fds=(proc_fd,), capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise OSError(errno.EPERM, (proc.stderr.strip() or f"nsenter exited {proc.returncode}")[-300:])


def remount(proc_fd: int, size: int) -> None:
    """Grow the /dev/shm of the process whose /proc directory is open as proc_fd to `size` bytes."""
    try:
        reconfigure(proc_fd, SHM_IN_ROOT, size)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        nsenter_remount(proc_fd, size)


def gone(exc: OSError) -> bool:
    """Is this what a remount meets when the container's process has ended (the job is over, nothing to grow)?"""
    return exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENOTDIR, errno.EINVAL)


def open_process(pid: int, container_id: str) -> int:
    """A descriptor of /proc/PID, once it is checked to be the container's (its id is in the process's cgroup path).
    OSError: ENOENT when the process is gone, ENXIO when it is not the container's."""
    fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with open(os.open("cgroup", os.O_RDONLY | os.O_CLOEXEC, dir_fd=fd)) as f:
            cgroups = f.read()
    except OSError:
        os.close(fd)
        raise
    if container_id not in cgroups:
        os.close(fd)
        raise OSError(errno.ENXIO, f"process {pid} is not in container {container_id[:12]}'s cgroup")
    return fd


def shm_path(proc_fd: int) -> str:
    """The container's /dev/shm through the descriptor of its process (stale, not another's, once it ends)."""
    return f"/proc/self/fd/{proc_fd}/{SHM_IN_ROOT}"

