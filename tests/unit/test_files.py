"""Atomic writes: the old content or the new, never half; no temporary file left behind."""

from __future__ import annotations

import os

import pytest

from shmguard.files import write_atomic


def test_write_atomic_replaces_and_creates_dirs(tmp_path):
    target = tmp_path / "a" / "b.json"
    write_atomic(str(target), "one")
    write_atomic(str(target), "two")
    assert target.read_text() == "two"
    assert os.listdir(target.parent) == ["b.json"]


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "c.json"
    target.write_text("old")

    def boom(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(str(target), "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["c.json"]
