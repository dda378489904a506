"""Fixtures of the webhook's unit tests: certificates and a server in this process (tests/support/webhook.py)."""

from __future__ import annotations

import pytest

from shmguard.webhook.certs import write_certs
from tests.support.webhook import Server


@pytest.fixture
def certs(tmp_path):
    write_certs(str(tmp_path), "shmguard-webhook", "shmguard", ["localhost"])
    return tmp_path


@pytest.fixture
def server(certs):
    s = Server(certs, timeout=2.0)
    yield s
    s.stop()
