"""Fixtures of the exporter's unit tests: a fixture host (cgroup v1 and v2), a fake engine
(tests/support/exporter.py), and Prometheus's promtool (its rule engine, for the alerts)."""

from __future__ import annotations

import shutil

import pytest

from tests.support.ci import unavailable
from tests.support.exporter import FakeEngine, Host


@pytest.fixture(params=["v1", "v2"])
def host(request, tmp_path) -> Host:
    return Host(tmp_path, request.param)


@pytest.fixture
def host_v1(tmp_path) -> Host:
    return Host(tmp_path, "v1")


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        unavailable("promtool is missing: scripts/setup.sh installs Debian's prometheus package")
    return path
