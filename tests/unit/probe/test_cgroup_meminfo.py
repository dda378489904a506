"""/proc/meminfo: the one parser, in probe/cgroup.py's memory section (check's memory probe, both exporter modes,
elastic's grower)."""

from __future__ import annotations

from shmguard.probe.cgroup import Meminfo, parse_meminfo, parse_meminfo_total, read_meminfo


def test_total_and_available():
    text = "MemTotal:       24684084 kB\nMemFree:        21529376 kB\nMemAvailable:   23888920 kB\n"
    assert parse_meminfo(text) == Meminfo(total=24684084 * 1024, available=23888920 * 1024)
    assert parse_meminfo_total(text) == 24684084 * 1024  # check's and the exporter's name for the same reading


def test_what_cannot_be_read_is_unknown(tree):
    assert parse_meminfo("garbage\nMemTotal: lots kB\nMemAvailable:\n") == Meminfo()
    assert parse_meminfo("MemTotal: 1024\n").total == 1024 * 1024  # kB, as the kernel writes it
    assert read_meminfo(tree({})) == Meminfo()
