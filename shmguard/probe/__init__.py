"""Probes read the system through one injectable filesystem root (default `/`, or SHMGUARD_ROOT).

One module per kernel interface; each has pure `parse_*` functions next to thin
readers, so tests drive the parsers with strings and the readers with fake
/proc, /sys and /dev trees. A missing or unreadable file is reported ("cannot
tell"), never raised. Standard library only: `shmguard health` imports these.

Root lives here rather than in a module of its own: every probe needs it, and each
module less is about 0.15 ms less for the healthcheck.
"""

import os

# No kernel interface shmguard reads is larger (mountinfo of a host with thousands of mounts is well under
# this); a bigger "file" is garbage or a device, and reading it whole could exhaust memory.
MAX_READ = 4 * 1024 * 1024


class Root:
    """A directory standing for `/`: real by default, a fixture tree in tests.

    Not a Record (shmguard.record): it is the filesystem the probes read, an object with behaviour that
    tests replace with fakes carrying their own state (tests/support/roots.py FakeRoot), not data.
    """

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.environ.get("SHMGUARD_ROOT") or "/"

    def join(self, path: str) -> str:
        if self.path == "/" and path.startswith("/"):
            return path  # the real root: the path itself (the exporter joins thousands a second)
        return os.path.join(self.path, path.lstrip("/"))

    def read(self, path: str) -> str:
        """The text of a regular file under the root, at most MAX_READ bytes.

        Raises OSError when it is missing or unreadable, not a regular file (a FIFO would
        block, /dev/zero never ends: neither is opened for reading in blocking mode), or too big.
        """
        fd = os.open(self.join(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            mode = os.fstat(fd).st_mode
            if mode & 0o170000 != 0o100000:
                raise OSError(22, "not a regular file", path)
            chunks = []
            size = 0
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_READ:
                    raise OSError(27, f"larger than {MAX_READ} bytes", path)
                chunks.append(chunk)
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", "surrogateescape")

    def read_or_none(self, path: str) -> str | None:
        try:
            return self.read(path)
        except (OSError, ValueError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(self.join(path))

    def isdir(self, path: str) -> bool:
        return os.path.isdir(self.join(path))

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.join(path)))
        except OSError:
            return []

    def subdirs(self, path: str) -> list[str]:
        """The names of the folders in a folder (not following symlinks), sorted; [] when it cannot be read."""
        try:
            with os.scandir(self.join(path)) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            return []

    def realpath(self, path: str) -> str:
        """The path with every symlink under the root followed and `.`, `..` and `//` gone, as the kernel writes
        mount points (an absolute link target is taken under the root; a missing part is kept as written)."""
        parts = [p for p in path.split("/") if p not in ("", ".")]
        resolved: list[str] = []
        links = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            resolved.append(part)
            try:
                target = os.readlink(self.join("/" + "/".join(resolved)))
            except OSError:
                continue  # not a link (or not there)
            links += 1
            if links > 40:
                raise OSError(40, "Too many levels of symbolic links", path)
            resolved.pop()
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
        return "/" + "/".join(resolved)

    def statvfs(self, path: str) -> os.statvfs_result:
        return os.statvfs(self.join(path))

    def lstat(self, path: str) -> os.stat_result:
        """The file's own status under the root (a symlink is not followed); OSError when it is not there."""
        return os.lstat(self.join(path))

    def __repr__(self) -> str:
        return f"Root({self.path!r})"
