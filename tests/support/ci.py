"""What a missing component means: locally a skip with the reason, in CI (CI=true) a failure, because a green CI
that skipped the engine, the cluster or torch proves nothing."""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(reason: str) -> None:
    """Skip locally, fail in CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: integration tests must run, not skip)", pytrace=False)
    pytest.skip(reason)
