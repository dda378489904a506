"""Property tests of the /proc/self/limits parser: no text crashes it (a bad one is a ValueError at most).

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shmguard.probe.nofile import parse_limits
from tests.support.properties import SETTINGS


@SETTINGS
@given(st.text(max_size=300))
def test_never_crashes(text):
    try:
        parse_limits(text)
    except ValueError:
        pass
