"""Elastic /dev/shm, the remount: grow a running container's /dev/shm from the host (in the sampler process).

A container's /dev/shm (without --ipc host or a volume there) is a tmpfs of its own, and
its size is an option of that tmpfs's superblock. From the host, as root, `fspick` on
the container's /dev/shm (reached through /proc/PID/root) then `fsconfig(size=N)` and
`fsconfig(RECONFIGURE)` (Linux 5.2+) change it at once, with the files in it kept and the
mount's own flags (nosuid, nodev, noexec) untouched, without the engine. Where those calls
are missing, a thread of the sampler enters the container's mount namespace (and nothing
else) and calls mount(2) with MS_REMOUNT, the mount's own flags and `size=N`. Nothing of
the container's is ever run: `nsenter --mount … mount` ran the container's own
/bin/mount, as the host's root, outside the container's pid namespace, cgroup and seccomp
(issue 43.1). Verified on Docker 20.10 and 28 (runc) and on Podman 4.3 (rootful).

What is resized is only ever the tmpfs identified when the container started (its device
number, from the container's mountinfo: shmguard.engine.container_shm): each remount opens
the container's /dev/shm without following a symlink there and checks its device first, so
a /dev rebound, a user's mount or a symlink planted since cannot turn a growth onto another
filesystem (the host's /dev/shm among them).

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
FSPICK_EMPTY_PATH = 8
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


def reconfigure(fd: int, size: int) -> None:
    """Set the size of the tmpfs whose root is open as `fd` (O_PATH): fspick + fsconfig. OSError on failure
    (ENOSYS: a kernel before 5.2)."""
    import ctypes

    picked = _syscall(SYS_FSPICK, ctypes.c_int(fd), ctypes.c_char_p(b""),
                      ctypes.c_uint(FSPICK_CLOEXEC | FSPICK_EMPTY_PATH))
    try:
        _syscall(SYS_FSCONFIG, ctypes.c_int(picked), ctypes.c_uint(FSCONFIG_SET_STRING), ctypes.c_char_p(b"size"),
                 ctypes.c_char_p(str(size).encode()), ctypes.c_int(0))
        _syscall(SYS_FSCONFIG, ctypes.c_int(picked), ctypes.c_uint(FSCONFIG_CMD_RECONFIGURE), None, None,
                 ctypes.c_int(0))
    finally:
        os.close(picked)


def device_text(st_dev: int) -> str:
    """A device number as mountinfo writes it (`0:55`)."""
    return f"{os.major(st_dev)}:{os.minor(st_dev)}"


def check_device(st: os.stat_result, device: str | None) -> None:
    """OSError (EXDEV) unless `st` is of the tmpfs identified at the start (device None: not checked)."""
    if device is not None and device_text(st.st_dev) != device:
        raise OSError(errno.EXDEV, f"the container's /dev/shm is no longer the tmpfs it started with ({device}): "
                                   f"not resized")


def open_shm(proc_fd: int, device: str | None) -> int:
    """An O_PATH descriptor of the container's /dev/shm (a symlink there is not followed), checked to be the tmpfs
    identified at the start."""
    fd = os.open(SHM_IN_ROOT, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=proc_fd)
    try:
        check_device(os.fstat(fd), device)
    except OSError:
        os.close(fd)
        raise
    return fd


# mount(2) flags of the per-mount options mountinfo lists (<sys/mount.h>), kept as they are by a remount.
MS_REMOUNT = 32
MOUNT_FLAGS = {"ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "sync": 16, "mand": 64, "dirsync": 128,
               "nosymfollow": 256, "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21,
               "strictatime": 1 << 24, "lazytime": 1 << 25}
CLONE_FS = 0x200
CLONE_NEWNS = 0x20000


def mount_flags(options: str) -> int:
    """The mount(2) flags that keep a mount's per-mount options (mountinfo's sixth field, `rw,nosuid,…`)."""
    flags = 0
    for option in options.split(","):
        flags |= MOUNT_FLAGS.get(option, 0)
    return flags


def namespace_remount(proc_fd: int, size: int, device: str | None = None) -> None:
    """For kernels without fspick: mount(2) MS_REMOUNT of /dev/shm with its own flags and `size=N`, from a thread
    that enters the container's mount namespace and nothing else (its own filesystem context first: unshare(CLONE_FS),
    as setns into a mount namespace asks). The thread runs no program and opens no library: what it calls is loaded
    already."""
    import ctypes
    import threading

    from shmguard.probe.mountinfo import mount_at, parse_mountinfo

    with open(os.open("mountinfo", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)) as f:
        shm = mount_at(parse_mountinfo(f.read())[0], "/dev/shm")
    if shm is None:
        raise OSError(errno.ENOENT, "the container has no mount at /dev/shm")
    libc = load_libc()
    namespace = os.open("ns/mnt", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    failed: list[OSError] = []

    def call(result: int) -> None:
        if result != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    def inside() -> None:  # the thread ends with the namespace it entered: the sampler's own threads never do
        try:
            call(libc.unshare(ctypes.c_int(CLONE_FS)))
            call(libc.setns(ctypes.c_int(namespace), ctypes.c_int(CLONE_NEWNS)))
            check_device(os.stat("/dev/shm", follow_symlinks=False), device)
            call(libc.mount(ctypes.c_char_p(b"shm"), ctypes.c_char_p(b"/dev/shm"), None,
                            ctypes.c_ulong(MS_REMOUNT | mount_flags(shm.options)),
                            ctypes.c_char_p(f"size={size}".encode())))
        except OSError as exc:
            failed.append(exc)

    try:
        thread = threading.Thread(target=inside, name="shmguard-remount")
        thread.start()
        thread.join()
    finally:
        os.close(namespace)
    if failed:
        raise failed[0]


def remount(proc_fd: int, size: int, device: str | None = None) -> None:
    """Grow the /dev/shm of the process whose /proc directory is open as proc_fd to `size` bytes, when it is still
    the tmpfs `device` (major:minor; None: not checked)."""
    fd = open_shm(proc_fd, device)
    try:
        reconfigure(fd, size)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise
        namespace_remount(proc_fd, size, device)
    finally:
        os.close(fd)


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

