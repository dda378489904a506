"""/proc/meminfo: the host's memory, in all and available. The one parser of it: `check`'s memory probe, both
exporter modes and elastic /dev/shm's grower read it here.

Format (proc(5)): `Key:   value kB` lines (the kernel writes kB for both; a value with another unit is taken as
bytes). MemAvailable is the kernel's estimate
of what can be given without swapping (page cache and reclaimable slab included): what a tmpfs's next pages can
still take from the host. A line that cannot be read is skipped. Standard library only.
"""

from shmguard.record import Record


class Meminfo(Record):
    total: int | None = None  # MemTotal, bytes
    available: int | None = None  # MemAvailable, bytes


KEYS = {"MemTotal": "total", "MemAvailable": "available"}


def parse_meminfo(text: str) -> Meminfo:
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        field = KEYS.get(key)
        if field is None:
            continue
        fields = rest.split()
        try:
            value = int(fields[0])
        except (IndexError, ValueError):
            continue
        found[field] = value * 1024 if len(fields) < 2 or fields[1].lower() == "kb" else value  # kB unless told
    return Meminfo(**found)


def read_meminfo(root) -> Meminfo:
    """The host's memory from root's /proc/meminfo; unknown (None) when it cannot be read."""
    text = root.read_or_none("/proc/meminfo")
    return parse_meminfo(text) if text else Meminfo()
