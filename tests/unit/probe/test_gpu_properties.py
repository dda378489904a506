"""Property tests of the *_VISIBLE_DEVICES parsers: no text crashes them, and CUDA's rules hold.

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shmguard.probe.gpu import parse_cuda_visible_devices, parse_nvidia_visible_devices
from tests.support.properties import SETTINGS


@SETTINGS
@given(st.text(max_size=300))
def test_never_crashes(text):
    parse_cuda_visible_devices(text)
    parse_nvidia_visible_devices(text)


@SETTINGS
@given(st.text(alphabet="0123456789,-GPUMI abcdef", max_size=30))
def test_cuda_visible_devices_rules(value):
    selected = parse_cuda_visible_devices(value)
    assert selected is not None
    assert len(set(selected)) == len(selected)  # duplicates empty the list instead
