"""/dev/shm: its size and free space, whether it is a tmpfs, and segments left by dead processes.

Size, use and free space come from statvfs, read as shmguard.probe.tmpfs says (the one
definition of "used" every command shares). A /dev/shm that is not a tmpfs (a plain
directory of the image, or a bind of the host's) is reported. Leftover segments:
PyTorch's file_system strategy names them `torch_<pid>_...`; a segment whose
creator pid no longer exists in this pid namespace is stale and holds memory
until someone deletes it. Other segments (`psm_*` from multiprocessing,
`sem.*`, ...) are listed with their size; their owner cannot be told from the name.
"""


from shmguard.probe.mountinfo import Mount, mount_at
from shmguard.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from shmguard.probe.tmpfs import Tmpfs

SHM = "/dev/shm"
DOCKER_DEFAULT_SHM = 64 * 1024 * 1024


class Segment(Record):
    name: str
    bytes: int
    pid: int | None
    stale: bool


class ShmInfo(Record):
    total: int | None = None
    free: int | None = None
    fstype: str | None = None
    segments: tuple = ()
    errors: tuple = ()
    usage: "Tmpfs | None" = None  # what statvfs said (probe_shm); None for a /dev/shm described, not read

    @property
    def used(self) -> int | None:
        """Bytes in use: statvfs's (shmguard.probe.tmpfs); for one described (a Pod's emptyDir before it runs,
        a test's), total less free, which is the same on a tmpfs."""
        if self.usage is not None:
            return self.usage.used
        if self.total is None or self.free is None:
            return None
        return self.total - self.free

    @property
    def stale_bytes(self) -> int:
        return sum(s.bytes for s in self.segments if s.stale)


def printable(name: str) -> str:
    """A file name safe to print: undecodable bytes and control characters (ANSI escapes) shown as \\xNN.

    /dev/shm is world-writable, so anyone on the machine can plant a name that would
    crash a strict encoder or drive the terminal.
    """
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def segment_pid(name: str) -> int | None:
    """The creator pid in a PyTorch file_system segment name (`torch_1234_987654_0`), if any."""
    if not name.startswith("torch_"):
        return None
    parts = name.split("_")
    try:
        return int(parts[1])
    except (IndexError, ValueError):
        return None


def list_segments(root, folder: str = SHM) -> list[Segment]:
    """The regular files directly in folder (under root), with their size and whether their creator is gone."""
    segments = []
    for name in root.listdir(folder):
        try:
            st = root.lstat(f"{folder.rstrip('/')}/{name}")
        except OSError:
            continue
        if not (st.st_mode & 0o170000 == 0o100000):  # regular files only
            continue
        pid = segment_pid(name)
        stale = pid is not None and not root.exists(f"/proc/{pid}")
        segments.append(Segment(name=name, bytes=st.st_blocks * 512, pid=pid, stale=stale))
    return segments


def probe_shm(root, mounts: list[Mount]) -> ShmInfo:
    errors = []
    mount = mount_at(mounts, SHM)
    fstype = mount.fstype if mount else None
    if mounts and mount is None:
        errors.append(f"no filesystem is mounted at {SHM}")
    from shmguard.probe.tmpfs import read_tmpfs  # here: `health` loads list_segments alone

    try:
        usage = read_tmpfs(SHM, root)
    except OSError as exc:
        errors.append(f"cannot statvfs {SHM}: {exc.strerror}")
        return ShmInfo(fstype=fstype, errors=tuple(errors))
    return ShmInfo(total=usage.size, free=usage.free, fstype=fstype,
                   segments=tuple(list_segments(root)), errors=tuple(errors), usage=usage)
