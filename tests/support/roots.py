"""Fixture roots: fake /proc, /sys and /dev under a temporary folder, read through shmguard.probe.Root as the real
ones are, with one fake statvfs (a tmp folder cannot be a 64 MiB tmpfs).

FakeRoot is the one fake statvfs of the tests: /dev/shm of a container (`shm=`), a container's /dev/shm seen from
the host (`/proc/<pid>/root/dev/shm`, tests/support/exporter.py) or a pod's memory emptyDir on a node, each an
entry of `sizes`. Its answers are made by shmguard.probe.tmpfs.tmpfs_statvfs, so the package's own tmpfs reader
reads them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from shmguard.probe import Root
from shmguard.probe.tmpfs import tmpfs_statvfs

DIR = object()  # marks a directory in a tree spec
SHM_LINE = "92 78 0:47 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k"
CGROUP2_LINE = "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate"


class FakeRoot(Root):
    """A Root whose statvfs answers (total, free) for the paths in `sizes`, and says ENOENT for every other.

    shm: /dev/shm's (total, free); readonly: every answered filesystem is mounted read-only; on_statvfs: called
    with the path before answering (what it names may vanish meanwhile: a container exiting mid-read)."""

    def __init__(self, path, shm: tuple[int, int] | None = None, readonly: bool = False) -> None:
        super().__init__(str(path))
        self.sizes: dict[str, tuple[int, int]] = {}
        self.readonly = readonly
        self.on_statvfs: Callable[[str], None] | None = None
        if shm is not None:
            self.sizes["/dev/shm"] = shm

    @property
    def shm(self) -> tuple[int, int] | None:
        return self.sizes.get("/dev/shm")

    @shm.setter
    def shm(self, value: tuple[int, int] | None) -> None:
        if value is None:
            self.sizes.pop("/dev/shm", None)
        else:
            self.sizes["/dev/shm"] = value

    def statvfs(self, path):
        if self.on_statvfs is not None:
            self.on_statvfs(path)
        size = self.sizes.get(path)
        if size is None:
            raise FileNotFoundError(2, "No such file or directory", path)
        total, free = size
        return tmpfs_statvfs(total, free, read_only=self.readonly)


def build_tree(base: Path, files: dict) -> None:
    """Write {path: text or DIR} under base."""
    for rel, content in files.items():
        path = base / rel.lstrip("/")
        if content is DIR:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def mountinfo(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def unreadable(path: Path) -> None:
    """Make a file unreadable, even for root: replace it with a directory (reading raises IsADirectoryError)."""
    os.remove(path)
    path.mkdir()


def record_reads(root: Root) -> list[str]:
    """The paths a root reads from now on, in order (read_or_none reads through read too)."""
    paths: list[str] = []
    read = root.read

    def recorded(path: str) -> str:
        paths.append(path)
        return read(path)

    root.read = recorded  # type: ignore[method-assign]
    return paths
