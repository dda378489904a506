"""Property tests of the cgroup parsers: no text crashes them (a bad value is a ValueError at most).

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shmguard.probe import cgroup
from tests.support.properties import SETTINGS


@SETTINGS
@given(st.text(max_size=300))
def test_never_crashes(text):
    cgroup.parse_proc_cgroup(text)
    for parse in (cgroup.parse_cpu_max, lambda t: cgroup.parse_limit_value(t, "v2"),
                  lambda t: cgroup.parse_v1_quota(t, "100000")):
        try:
            parse(text)
        except ValueError:
            pass
