"""Which processes are alive, and which files they hold (open or mapped): what `shmguard clean` must not remove.

A segment in /dev/shm is in use while any process has it open (/proc/PID/fd) or mapped (/proc/PID/maps),
whatever its name says: a DataLoader's trainer maps the batches its workers wrote, and a container's processes
name their segments after pids of their own pid namespace. Files are matched by device and inode, which hold
across mount and pid namespaces (a path in another process's maps may be another /dev/shm's).

A process is looked at through a live thread: when its main thread has exited (pthread_exit) while others
run, the leader shows "Z" and its own /proc/PID/fd and maps are empty, but the threads still share the
process's files and memory, seen in /proc/PID/task/TID/.

Nothing here touches another filesystem: an open file is known by readlink of /proc/PID/fd/N, its mount id
and inode from /proc/PID/fdinfo/N, and the mount's device from mountinfo, all answered by /proc itself.
Following the link (stat) would ask the file's filesystem, and a FUSE or NFS server that does not answer
would hang the scan, and a Slurm Epilog with it, for ever. Reading /proc can still block (a process stuck in
a page fault holds its memory map's lock), so the scan runs against a deadline: what it could not look at
in time is reported, and nothing it did not see is taken as gone.

What cannot be seen is recorded, not guessed: processes whose fd and maps cannot be read (another user's,
without root; a non-dumpable process without CAP_SYS_PTRACE; one a security module protects), and whether
this process sees the host's pids at all (the kernel's kthreadd is pid 2 only in the initial pid namespace).
Read through the injectable Root; standard library only.
"""

from __future__ import annotations

import os
import threading
import time

from shmguard.probe.mountinfo import mount_devices
from shmguard.record import Record, field

GONE_STATES = ("Z", "X")  # a zombie or dead task holds no files and keeps its pid only until it is reaped
PF_KTHREAD = 0x00200000  # a kernel thread (include/linux/sched.h): no memory map, no files of a user
CAP_SYS_PTRACE = 19  # include/uapi/linux/capability.h: what /proc/PID/fd of a non-dumpable process needs
DEADLINE = 10.0  # seconds for the whole scan: a Slurm Epilog must end (a hung one drains the node)


class Holders(Record):
    """The processes this process can see, on the one device of interest."""

    alive: frozenset  # pids of live (not zombie) processes
    held: frozenset  # (st_dev, st_ino) of files on the device that a visible process has open or mapped
    blind: tuple  # (pid, uid) of live processes whose fds or maps could not be read (uid None: unknown)
    host_pids: bool  # the host's pid namespace is the one seen (kthreadd is pid 2)
    started: dict = field(default_factory=dict)  # pid -> when it started (seconds since the epoch, ~1 s precision)
    finished: bool = True  # the scan looked at every process before its deadline
    unfinished: tuple = ()  # if not, the pids it had not looked at (the first: the one it was reading)
    lacks: str | None = None  # why the blind could not be read: "root", "CAP_SYS_PTRACE", or None (protected)


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


def parse_status_uid(text: str, which: int = 0) -> int | None:
    """The real uid of /proc/PID/status (`Uid:	1000	1000	1000	1000`); which=1: the effective one."""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            try:
                return int(fields[1 + which])
            except (IndexError, ValueError):
                return None
    return None


def parse_status_caps(text: str) -> int | None:
    """The effective capabilities of /proc/PID/status (`CapEff:	000001ffffffffff`), as a bit mask."""
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split()[1], 16)
            except (IndexError, ValueError):
                return None
    return None


def parse_fdinfo(text: str) -> tuple[int | None, int | None]:
    """The mount id and inode of an open file, from /proc/PID/fdinfo/N (`mnt_id:	27`, `ino:	1234`; the inode
    since Linux 5.14, the mount id since 3.15)."""
    mount_id = inode = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "mnt_id":
            mount_id = int(value) if value.strip().isdigit() else None
        elif key == "ino":
            inode = int(value) if value.strip().isdigit() else None
    return mount_id, inode


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


def live_task(root, pid: int, stat: str | None = None) -> str | None:
    """Where to read a process: /proc/PID while its main thread runs; /proc/PID/task/TID of a live thread when the
    main thread has exited (pthread_exit) and others go on; None when every thread is gone (or it never was)."""
    stat = root.read_or_none(f"/proc/{pid}/stat") if stat is None else stat
    if stat is None:
        return None
    if parse_stat_state(stat) not in GONE_STATES:
        return f"/proc/{pid}"
    for tid in root.listdir(f"/proc/{pid}/task"):
        if tid == str(pid) or not tid.isdigit():
            continue
        text = root.read_or_none(f"/proc/{pid}/task/{tid}/stat")
        if text is not None and parse_stat_state(text) not in GONE_STATES:
            return f"/proc/{pid}/task/{tid}"
    return None


def alive(root, pid: int) -> bool:
    """A process with this pid exists here with a live thread (a zombie's pid cannot be reused, but it holds
    nothing; a process whose main thread exited while others run is alive)."""
    return live_task(root, pid) is not None


def sees_host_pids(root) -> bool:
    text = root.read_or_none("/proc/2/stat")
    return text is not None and "(kthreadd)" in text


def what_is_lacking(root) -> str | None:
    """What this process lacks to read every process's fd and maps: "root" (another user's processes), or
    "CAP_SYS_PTRACE" (root without it, as in a container, cannot read a non-dumpable process); None: nothing,
    so only a security module or a protected process can keep it out."""
    status = root.read_or_none("/proc/self/status")
    euid = parse_status_uid(status, which=1) if status else None
    if euid is None:
        euid = os.geteuid()
    if euid != 0:
        return "root"
    caps = parse_status_caps(status) if status else None
    if caps is not None and not caps >> CAP_SYS_PTRACE & 1:
        return "CAP_SYS_PTRACE"
    return None


class OpenFiles:
    """Which open files of a process are on the device, without ever asking their filesystem (see the module).

    Mount ids come from fdinfo, their devices from the mountinfo of each mount namespace met (read once per
    namespace; mount ids are unique across namespaces). inodes: those of the files in question, which tell a
    file on a mount no mountinfo shows (lazily unmounted) that could be one of them."""

    def __init__(self, root, device: int, inodes=frozenset()) -> None:
        self.root, self.device, self.inodes = root, device, inodes
        self.devices: dict[int, int] = {}
        self.namespaces: set[str] = set()

    def mount_device(self, mount_id: int, task: str) -> int | None:
        found = self.devices.get(mount_id)
        if found is None:
            try:
                namespace = os.readlink(self.root.join(f"{task}/ns/mnt"))
            except OSError:
                namespace = task
            if namespace not in self.namespaces:
                self.namespaces.add(namespace)
                self.devices.update(mount_devices(self.root.read_or_none(f"{task}/mountinfo") or ""))
                found = self.devices.get(mount_id)
        return found

    def held(self, task: str) -> tuple[set[tuple[int, int]], bool]:
        """(device, inode) of the process's open files on the device, and whether its fds could all be read."""
        held: set[tuple[int, int]] = set()
        fd_dir = self.root.join(f"{task}/fd")
        try:
            fds = os.listdir(fd_dir)
        except FileNotFoundError:
            return held, True  # exited meanwhile
        except OSError:
            return held, False
        readable = True
        for fd in fds:
            try:
                link = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue  # closed meanwhile
            if not link.startswith("/"):
                continue  # a socket, pipe or anon_inode: no file of a directory
            info = self.root.read_or_none(f"{task}/fdinfo/{fd}")
            if info is None:
                continue  # closed meanwhile
            mount_id, inode = parse_fdinfo(info)
            device = self.mount_device(mount_id, task) if mount_id is not None else None
            if device is None:
                if inode is None:
                    readable = False  # neither its mount nor its inode: it cannot be told without asking its fs
                elif inode in self.inodes:
                    held.add((self.device, inode))  # a mount no namespace shows: it may be ours, so kept
                continue
            if device != self.device:
                continue
            if inode is None:  # before Linux 5.14: the file is on the device in question, whose stat cannot hang
                try:
                    inode = os.stat(os.path.join(fd_dir, fd)).st_ino
                except OSError:
                    continue
            held.add((self.device, inode))
        return held, readable


class Scan:
    """What one scan found so far: the deadline may end it half-way (see scan)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: set[int] = set()
        self.held: set[tuple[int, int]] = set()
        self.blind: list[tuple[int, int | None]] = []
        self.started: dict[int, float] = {}
        self.pids: list[int] = []
        self.done = 0  # how many of pids were looked at
        self.error: BaseException | None = None

    def run(self, root, device: int, inodes) -> None:
        try:
            self.look_at_all(root, device, inodes)
        except BaseException as exc:  # raised again by holders(), in the thread that waits
            self.error = exc

    def look_at_all(self, root, device: int, inodes) -> None:
        btime_text = root.read_or_none("/proc/stat")
        btime = parse_btime(btime_text) if btime_text else None
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        files = OpenFiles(root, device, inodes)
        self.pids = sorted(int(name) for name in root.listdir("/proc") if name.isdigit())
        for pid in self.pids:
            self.look(root, pid, files, btime, ticks)
            self.done += 1

    def look(self, root, pid: int, files: OpenFiles, btime, ticks) -> None:
        stat = root.read_or_none(f"/proc/{pid}/stat")
        task = live_task(root, pid, stat) if stat is not None else None
        if stat is None or task is None:
            return
        start = parse_stat_start(stat)
        if (parse_stat_flags(stat) or 0) & PF_KTHREAD:
            with self.lock:
                self.live.add(pid)
            return
        maps = root.read_or_none(f"{task}/maps")
        mapped = parse_maps(maps, device=files.device) if maps is not None else set()
        opened, fds_read = files.held(task)
        readable = maps is not None and fds_read
        blind = not readable and alive(root, pid)  # one that exited meanwhile held nothing
        status = root.read_or_none(f"{task}/status") if blind else None
        with self.lock:
            self.live.add(pid)
            if btime is not None and start is not None:
                self.started[pid] = btime + start / ticks
            self.held |= mapped | opened
            if blind:
                self.blind.append((pid, parse_status_uid(status) if status else None))

    def holders(self, root, finished: bool) -> Holders:
        if self.error is not None:
            raise self.error
        with self.lock:
            return Holders(alive=frozenset(self.live), held=frozenset(self.held), blind=tuple(self.blind),
                           host_pids=sees_host_pids(root), started=dict(self.started), finished=finished,
                           unfinished=() if finished else tuple(self.pids[self.done:]), lacks=what_is_lacking(root))


def scan(root, device: int, inodes=frozenset(), deadline: float = DEADLINE) -> Holders:
    """Every visible process: whether it is alive, and the files on `device` it holds; what the deadline left
    unseen is in `unfinished`. inodes: those of the files in question (see OpenFiles)."""
    found = Scan()
    worker = threading.Thread(target=found.run, args=(root, device, frozenset(inodes)), name="shmguard-holders",
                              daemon=True)  # a read stuck in the kernel must not keep the command from ending
    until = time.monotonic() + deadline
    worker.start()
    worker.join(max(0.0, until - time.monotonic()))
    return found.holders(root, finished=not worker.is_alive())
