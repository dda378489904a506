"""Memory probe: MemTotal, the limit along the path, usage."""

from __future__ import annotations

from shmguard.probe import cgroup
from shmguard.probe.cgroup import parse_meminfo_total, probe_memory
from shmguard.probe.mountinfo import parse_mountinfo


def test_parse_meminfo_total():
    assert parse_meminfo_total("MemTotal:       24598640 kB\nMemFree: 1 kB\n") == 24598640 * 1024
    assert parse_meminfo_total("MemFree: 1 kB\n") is None
    assert parse_meminfo_total("MemTotal: lots kB\n") is None


def test_docker_v1_fixture(tree):
    root = tree(base="docker-v1")
    mounts, _ = parse_mountinfo(root.read("/proc/self/mountinfo"))
    info = probe_memory(root, mounts, cgroup.parse_proc_cgroup(root.read("/proc/self/cgroup")))
    assert info.limit == 2**30 and info.usage == 50_000_000 and info.host == 24598640 * 1024


def test_nothing_readable(tree):
    info = probe_memory(tree({}), [], [])
    assert info.limit is None and info.host is None and info.usage is None
    assert any("MemTotal" in e for e in info.errors) and any("no cgroup memory" in e for e in info.errors)
