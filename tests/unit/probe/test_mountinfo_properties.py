"""Property tests of the mountinfo parser: no text crashes it, and escaped mount points read back.

Seeded (derandomize) and bounded (tests/support/properties.py), so CI runs the same examples every time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shmguard.probe.mountinfo import parse_line, parse_mountinfo
from tests.support.properties import SETTINGS


@SETTINGS
@given(st.text(max_size=300))
def test_never_crashes(text):
    parse_mountinfo(text)


path_chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")


@SETTINGS
@given(st.text(path_chars, min_size=1, max_size=30), st.lists(st.sampled_from(["shared:1", "master:2", "unbindable"]), max_size=3))
def test_mountinfo_escapes_round_trip(name, optional):
    escaped = "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in "/mnt/" + name)
    if any(c.isspace() for c in escaped):
        return  # other whitespace cannot appear unescaped in a field
    mount = parse_line(f"36 35 98:0 / {escaped} rw {' '.join(optional)} - tmpfs shm rw,size=1k".replace("  ", " "))
    assert mount is not None and mount.mount_point == "/mnt/" + name and mount.fstype == "tmpfs"
