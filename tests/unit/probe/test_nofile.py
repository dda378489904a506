"""Open-file limits from /proc/self/limits."""

from __future__ import annotations

import pytest

from shmguard.probe.nofile import parse_limits, probe_nofile


def test_parse_limits():
    assert parse_limits("Limit Soft Hard Units\nMax open files            1024                 1048576              files\n") == (1024, 1048576)
    assert parse_limits("Max open files unlimited unlimited files\n") == (None, None)


@pytest.mark.parametrize("text", ["", "Max processes 1 1\n", "Max open files lots 1 files\n", "Max open files 1\n"])
def test_parse_limits_rejects(text):
    with pytest.raises(ValueError):
        parse_limits(text)


def test_probe(tree):
    assert probe_nofile(tree(base="docker-v1")).soft == 20000


def test_probe_missing(tree):
    missing = probe_nofile(tree({}))
    assert missing.soft is None and missing.errors
