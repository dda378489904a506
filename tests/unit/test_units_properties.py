"""Property tests of the size parsers and writers: no text crashes them, and a size written reads back never below.

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shmguard.units import docker_size, k8s_quantity, parse_quantity, parse_size
from tests.support.properties import SETTINGS

sizes = st.integers(min_value=0, max_value=2**62)


@SETTINGS
@given(sizes)
def test_sizes_round_trip_never_below(n):
    assert parse_size(str(n)) == n
    assert parse_size(docker_size(n)) >= n
    assert parse_quantity(k8s_quantity(n)) >= n


@SETTINGS
@given(st.text(max_size=40))
def test_size_parsers_raise_only_value_error(text):
    for parse in (parse_size, parse_quantity):
        try:
            assert parse(text) >= 0
        except ValueError:
            pass
