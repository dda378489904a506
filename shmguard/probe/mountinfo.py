"""/proc/self/mountinfo: which filesystem is mounted where, and from which root.

Format (proc(5)): `id parent major:minor root mount-point options [optional...] - fstype source super-options`.
The optional fields end at a lone `-`; paths escape space, tab, newline and
backslash as octal (`\\040`). A malformed line is skipped and counted, not fatal.
"""

from shmguard.record import Record


class Mount(Record):
    mount_id: int
    parent_id: int
    root: str
    mount_point: str
    options: str
    fstype: str
    source: str
    super_options: str
    device: str = ""  # major:minor of the filesystem (the same on every mount of it, in every namespace)


def unescape(field: str) -> str:
    """Undo the kernel's octal escapes (`\\040` -> space)."""
    if "\\" not in field:
        return field
    out = []
    i = 0
    while i < len(field):
        c = field[i]
        digits = field[i + 1:i + 4]
        if c == "\\" and len(digits) == 3 and all(d in "01234567" for d in digits):
            out.append(chr(int(digits, 8)))
            i += 4
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _split(line: str) -> tuple[list[str], int, int, int] | None:
    """A line's fields, the index of the `-` that ends the optional ones and the two ids; None when malformed."""
    fields = line.split()
    try:
        sep = fields.index("-", 6)
    except ValueError:
        return None
    if len(fields) < sep + 3:
        return None
    try:
        return fields, sep, int(fields[0]), int(fields[1])
    except ValueError:
        return None


def _mount(fields: list[str], sep: int, mount_id: int, parent_id: int) -> Mount:
    return Mount(mount_id, parent_id, unescape(fields[3]), unescape(fields[4]), fields[5], fields[sep + 1],
                 unescape(fields[sep + 2]), ",".join(fields[sep + 3:]), fields[2])


def parse_line(line: str, keep=None) -> Mount | None:
    """One mountinfo line into a Mount, or None when it is malformed (or `keep(mount_point, fstype)` says no)."""
    parsed = _split(line)
    if parsed is None:
        return None
    fields, sep, mount_id, parent_id = parsed
    if keep is not None and not keep(unescape(fields[4]), fields[sep + 1]):
        return None
    return _mount(fields, sep, mount_id, parent_id)


def parse_mountinfo(text: str, keep=None) -> tuple[list[Mount], int]:
    """The mounts in the text (those `keep(mount_point, fstype)` accepts, if given), and how many lines were malformed.

    A line keep turns away is split once and never made a Mount: health keeps about one line in three."""
    mounts = []
    bad = 0
    for line in text.splitlines():
        if not line or line.isspace():
            continue
        parsed = _split(line)
        if parsed is None:
            bad += 1
            continue
        fields, sep, mount_id, parent_id = parsed
        if keep is None or keep(unescape(fields[4]), fields[sep + 1]):
            mounts.append(_mount(fields, sep, mount_id, parent_id))
    return mounts, bad


def shm_or_cgroup(mount_point: str, fstype: str) -> bool:
    """The mounts `health` needs: /dev/shm and the cgroup hierarchies."""
    return mount_point == "/dev/shm" or fstype in ("cgroup", "cgroup2")


def mount_at(mounts: list[Mount], mount_point: str) -> Mount | None:
    """The mount visible at a path: the last one mounted there (later mounts hide earlier ones)."""
    found = None
    for mount in mounts:
        if mount.mount_point == mount_point:
            found = mount
    return found


def read_mountinfo(root, keep=None) -> tuple[list[Mount], str | None]:
    """The mounts of this process (filtered by keep), and an error message when mountinfo could not be read."""
    try:
        text = root.read("/proc/self/mountinfo")
    except (OSError, ValueError) as exc:
        return [], f"cannot read /proc/self/mountinfo: {exc.strerror if isinstance(exc, OSError) else exc}"
    mounts, _bad = parse_mountinfo(text, keep)
    return mounts, None


def mount_devices(text: str) -> dict[int, int]:
    """Each mount's id and the device (st_dev) of its filesystem, from mountinfo's third field (`0:27`). Mount ids
    are unique across mount namespaces, so the maps of several namespaces can be merged."""
    import os

    devices = {}
    for line in text.splitlines():
        parsed = _split(line)
        if parsed is None:
            continue
        major, _, minor = parsed[0][2].partition(":")
        try:
            devices[parsed[2]] = os.makedev(int(major), int(minor))
        except ValueError:
            continue
    return devices
