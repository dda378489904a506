"""Fixtures of the Python API's tests."""

from __future__ import annotations

import pytest

from shmguard.api import guarded
from tests.support.snapshots import snapshot


@pytest.fixture
def container(monkeypatch):
    """The snapshot the API sees: 64 MiB of /dev/shm and 8 CPUs unless a test sets another."""
    state = {"snapshot": snapshot()}
    monkeypatch.setattr(guarded, "read_container", lambda root: state["snapshot"])
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("SHMGUARD_PROCS_PER_NODE", raising=False)
    return state
