"""Fixture trees: fake /proc, /sys and /dev under a temporary root, with a fake statvfs for /dev/shm."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from shmguard.probe import Root
from shmguard.probe.tmpfs import tmpfs_statvfs

DATA = Path(__file__).resolve().parents[1] / "data"
MIB = 2**20
DIR = object()  # marks a directory in a tree spec


class FakeRoot(Root):
    """A Root whose /dev/shm statvfs answers with given sizes (a tmp dir cannot be a 64 MiB tmpfs)."""

    def __init__(self, path, shm: tuple[int, int] | None = None, readonly: bool = False) -> None:
        super().__init__(str(path))
        self.shm = shm
        self.readonly = readonly

    def statvfs(self, path):
        if path == "/dev/shm" and self.shm is not None:
            total, free = self.shm
            return tmpfs_statvfs(total, free, read_only=self.readonly)
        raise FileNotFoundError(2, "No such file or directory")


def build_tree(base: Path, files: dict) -> None:
    for rel, content in files.items():
        path = base / rel.lstrip("/")
        if content is DIR:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


@pytest.fixture
def tree(tmp_path):
    """tree({path: text or DIR}, shm=(total, free), base='docker-v1') -> FakeRoot."""

    def make(files: dict | None = None, shm: tuple[int, int] | None = None, base: str | None = None) -> FakeRoot:
        if base:
            shutil.copytree(DATA / base, tmp_path, dirs_exist_ok=True)
        build_tree(tmp_path, files or {})
        return FakeRoot(tmp_path, shm)

    return make


def mountinfo(*lines: str) -> str:
    return "\n".join(lines) + "\n"


SHM_LINE = "92 78 0:47 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k"
CGROUP2_LINE = "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate"


def unreadable(path: Path) -> None:
    """Make a file unreadable, even for root: replace it with a directory (reading raises IsADirectoryError)."""
    os.remove(path)
    path.mkdir()
