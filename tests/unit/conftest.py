"""Fixtures of the unit tests: fixture trees under a temporary root (tests/support/roots.py)."""

from __future__ import annotations

import shutil

import pytest

from tests.support.paths import DATA
from tests.support.roots import FakeRoot, build_tree


@pytest.fixture
def tree(tmp_path):
    """tree({path: text or DIR}, shm=(total, free), base='docker-v1') -> FakeRoot."""

    def make(files: dict | None = None, shm: tuple[int, int] | None = None, base: str | None = None) -> FakeRoot:
        if base:
            shutil.copytree(DATA / base, tmp_path, dirs_exist_ok=True)
        build_tree(tmp_path, files or {})
        return FakeRoot(tmp_path, shm)

    return make
