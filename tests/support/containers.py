"""The containers the tests make: which demo image, the label every one of them carries (and CI checks is gone
afterwards), this session's value of it, and what a finished one left."""

from __future__ import annotations

import os
import uuid
from typing import Any

from shmguard.record import Record

DEMO_IMAGE = os.environ.get("SHMGUARD_DEMO_IMAGE", "shmguard-demo:latest")
BASE_IMAGE = os.environ.get("SHMGUARD_BASE_IMAGE", "shmguard-base:bookworm")  # Debian with python3, no torch
TEST_LABEL = "org.shmguard.test"
SESSION = uuid.uuid4().hex[:12]


class RunResult(Record):
    exit_code: int
    logs: str
    attrs: dict[str, Any]  # `docker inspect` of the container after it stopped
