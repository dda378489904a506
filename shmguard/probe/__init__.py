"""Probes read the system through one injectable filesystem root (default `/`, or SHMGUARD_ROOT).

One module per kernel interface; each has pure `parse_*` functions next to thin
readers, so tests drive the parsers with strings and the readers with fake
/proc, /sys and /dev trees. A missing or unreadable file is reported ("cannot
tell"), never raised. Standard library only: `shmguard health` imports these.

Root lives here rather than in a module of its own: every probe needs it, and each
module less is about 0.15 ms less for the healthcheck.
"""

import os


class Root:
    """A directory standing for `/`: real by default, a fixture tree in tests."""

    __slots__ = ("path",)

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.environ.get("SHMGUARD_ROOT") or "/"

    def join(self, path: str) -> str:
        return os.path.join(self.path, path.lstrip("/"))

    def read(self, path: str) -> str:
        """The text of a file under the root; raises OSError (missing, unreadable) or UnicodeError."""
        with open(self.join(path), encoding="utf-8", errors="surrogateescape") as f:
            return f.read()

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

    def statvfs(self, path: str) -> os.statvfs_result:
        return os.statvfs(self.join(path))

    def __repr__(self) -> str:
        return f"Root({self.path!r})"
