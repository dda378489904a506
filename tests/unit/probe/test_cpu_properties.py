"""Property tests of the cpuset list parser: no text crashes it (a bad list is a ValueError at most).

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shmguard.probe.cpu import parse_cpu_list
from tests.support.properties import SETTINGS


@SETTINGS
@given(st.text(max_size=300))
def test_never_crashes(text):
    try:
        parse_cpu_list(text)
    except ValueError:
        pass
